"""compile() reuses the parse of a text it saw recently: results must not show it."""

from __future__ import annotations

import random
from pathlib import Path

import prose_fuzzgen as g
import pytest

from openprose.language import CompileResult, compile, nodes
from openprose.language.analysis import analyze
from openprose.language.lexer import Lexer, Token
from openprose.language.parser import Parses
from openprose.language.validator import Validator

BROKEN = 'let a = session "unterminated\nlet b = session "fine"\n'


def test_each_compile_names_its_own_file() -> None:
    first = compile(BROKEN, "one.prose")
    second = compile(BROKEN, "two.prose")
    unnamed = compile(BROKEN)
    assert first.errors and {d.file for d in first.diagnostics} == {"one.prose"}
    assert {d.file for d in second.diagnostics} == {"two.prose"}
    assert {d.file for d in unnamed.diagnostics} == {None}
    assert [d.code for d in first.diagnostics] == [d.code for d in second.diagnostics]


def test_a_result_changed_by_its_caller_leaves_the_next_alone() -> None:
    first = compile(BROKEN, "one.prose")
    count = len(first.diagnostics)
    first.diagnostics.clear()
    assert len(compile(BROKEN, "one.prose").diagnostics) == count


def test_imports_are_checked_again_when_the_imported_file_changes(tmp_path: Path) -> None:
    """Validation reads the imported file each time: only the parse is reused."""
    lib = tmp_path / "lib.prose"
    lib.write_text('input topic: "t"\noutput findings = session "x {topic}"\n', encoding="utf-8")
    source = 'use "./lib.prose" as lib\nlet r = lib(topic: "a")\n'
    main = str(tmp_path / "main.prose")
    assert compile(source, main).diagnostics == []
    lib.write_text('input topic: "t"\ninput depth: "d"\noutput findings = session "x"\n',
                   encoding="utf-8")
    assert [d.code for d in compile(source, main).diagnostics] == ["E026"]


def _exact(result: CompileResult) -> tuple[object, ...]:
    """A compile result with every node's span (node equality leaves spans out)."""
    program = result.program
    tree = [(type(x).__name__, x.span, x) for x in nodes.walk(program)] if program else None
    return tree, result.diagnostics, result.omitted


def _whole_lexed(source: str) -> tuple[list[Token], list[nodes.Span]]:
    lexer = Lexer(source)
    return lexer.tokenize()[:-1], lexer.comments


def _lexed(tokens: list[Token], comments: list[nodes.Span]) -> tuple[object, ...]:
    """Tokens with the spans of their interpolations (node equality leaves spans out)."""
    return [(t, [getattr(p, "span", None) for p in t.parts]) for t in tokens], comments


def test_an_edited_text_compiles_as_a_whole_compile_would() -> None:
    """An editor's successive versions of a text, compiled with the parses kept between
    them (its unchanged statements not read again, or moved when lines were added above),
    give exactly a fresh compile's result, spans included (and the text's tokens, exactly
    the whole text's): corpus programs edited by the
    fuzzer's mutations, one after another (strings and brackets left open, lines swapped,
    indentation broken, ...), with lines added at the top and a line added or deleted at a
    random place between them, each undone again."""
    rng = random.Random(33)
    sources = g.corpus_sources()
    for start in range(16):
        parses = Parses()
        text = sources[start % len(sources)]
        for _ in range(5):
            text = g.mutate(rng, text, 2) if rng.random() < 0.8 else text + "\n" + \
                g.excerpt(rng, rng.choice(sources), 8)
            lines = text.split("\n")
            at = rng.randrange(len(lines))
            inserted = "\n".join([*lines[:at], rng.choice(["", "# note", 'session "x"']),
                                  *lines[at:]])
            deleted = "\n".join(lines[:at] + lines[at + 1:])
            for version in (text, "# lines added above\n\n" + text, text, inserted, text,
                            deleted, text):
                assert _exact(compile(version, parses=parses)) == _exact(compile(version))
                if version is not text:  # its statements moved, their tokens with them
                    assert _lexed(*parses.lexed(version)) == _lexed(*_whole_lexed(version))


def test_findings_kept_for_unchanged_statements_follow_their_definitions() -> None:
    """The validator's findings on a statement whose parse was kept are kept only while
    what they read of the rest of the program is unchanged: an agent, const or binding
    defined or removed elsewhere, a statement whose message names a line moved, a program
    call's result bound above."""
    body = ('session: b\n  prompt: "x"\n  prompt: "y"\n\nk = "z"\n\n'
            'let r = lib(topic: "t")\nsession "{r.findings} {missing}"\n')
    versions = [body, 'agent b:\n  model: sonnet\n  persist: true\n\n' + body,
                'agent b:\n  model: sonnet\n\n' + body, "\n\n" + body,
                'const k = "x"\n' + body, '\n\nconst k = "x"\n' + body,
                'let missing = "m"\n' + body, 'use "h/s" as lib\n' + body,
                'use "h/s" as lib\n\n' + body, body + 'resume: b\n  prompt: "again"\n', body]
    parses = Parses()
    for version in versions:
        assert _exact(compile(version, parses=parses)) == _exact(compile(version))


def test_an_edit_near_where_a_statement_starts_cuts_the_text_again() -> None:
    """Whether a line starts a statement is decided by its first word (``else`` does not)
    and the line break before it: an edit there, however near the text kept before or
    after it, changes how the text is cut."""
    parses = Parses()
    for version in ('let a = 1\nif a:\n  session "x"\nelsewhere = 2\n',
                    'let a = 1\nif a:\n  session "x"\nelse:\n  session "y"\n',
                    'let a = 1\nif a:\n  session "x"\nelsewhere = 2\n',
                    'let a = 1\nif a:\n  session "x"\n\nelse:\n  session "y"\n',
                    'let a = 1\nlet b = 2\nlet c = 3\nsession "{c}"\n',
                    'let a = 1\nlet b = 4\nlet c = 3\nsession "{c}"\n',
                    'let\na = 1 let b = 4\nlet c = 3\nsession "{c}"\n',
                    'let a = 1\nlet b = 4\nlet c = 3\nsession "{c}"\n',
                    'let a = 1\nif a:\n  session "x"\nlet b = 4\nlet c = 3\nsession "{c}"\n',
                    'let a = 1\nif a:\n  session "x"\nelse:\n  let c = 3\nsession "{c}"\n',
                    'let a = 1\nlet b = 2\nlet c = 3\nlet d = 4\nsession "{d}"\n',
                    f'let a = 1\nlet b = "{"words " * 10}"\nlet c = 3\nlet d = 4\nsession "{{d}}"\n',
                    f'let a = 1\nlet b = "{"words " * 10}"\nlet c = 3\nlet d = 4\nsession "{{d}} {{e}}"\n'):
        assert _exact(compile(version, parses=parses)) == _exact(compile(version))


def test_a_program_is_analysed_once() -> None:
    """Every stage that reads a program's analysis (the server's start, the engine, state.md's
    program map, a reload) asked for it anew: 45 ms each for 200 statements. A parse is
    shared, so is its analysis; another text gets its own."""
    source = 'let a = session "one"\nlet b = session "two"\n'
    shared = analyze(compile(source, "one.prose").program, source)
    assert analyze(compile(source, "two.prose").program, source) is shared
    longer = source + 'let c = session "three"\n'
    other = analyze(compile(longer).program, longer)
    assert other is not shared and len(other.statements) == len(shared.statements) + 1


def test_a_line_added_or_removed_mid_text_moves_the_parses_below_in_place() -> None:
    """A line added or removed above a statement moves its kept parse: the same tree, its
    spans moved (no copy of the statements below, which took a second on a 1 MB text), and
    only the statement the edit touched read again; the text as a whole compile reads it."""
    units = [f'let x{i} = session "part {i}"\nsession "again {{x{i}}}"\n' for i in range(40)]
    text = "".join(units)
    parses = Parses()
    before = compile(text, parses=parses).program
    assert before is not None
    middle = "".join(units[:20])
    for version in (middle + 'session "added"\n' + text[len(middle):], text,
                    middle[:-1] + text[len(middle):]):  # added, removed, another removed
        after = compile(version, parses=parses)
        assert after.program is not None
        kept = {id(s) for s in before.body}
        new = [s for s in after.program.body if id(s) not in kept]
        assert len(new) <= 2 and all(s.span.line <= 41 for s in new)
        assert _exact(after) == _exact(compile(version))


def test_the_same_statement_twice_keeps_a_parse_for_each() -> None:
    """A parse is moved in place, so one kept for a statement written twice is placed once:
    the other is read again, and neither moves the other."""
    twice = 'session "same"\n\nsession "same"\n'
    parses = Parses()
    for version in (twice, "\n" + twice, twice + twice, "\n\n" + twice + "\n" + twice, twice,
                    'let a = 1\n' + twice + twice):
        assert _exact(compile(version, parses=parses)) == _exact(compile(version))
        assert _lexed(*parses.lexed(version)) == _lexed(*_whole_lexed(version))


def test_a_definition_changed_checks_again_only_the_statements_that_read_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Renaming an agent changes the definitions: the statements whose checks looked that
    name up are checked again (a session of it now names an undefined agent), and those that
    went through every name (a "did you mean" suggestion); the others keep their findings
    (all were checked again: 0.7 s on a 1 MB text)."""
    units = [f'agent a{i}:\n  model: sonnet\n\nlet x{i} = session: a{i}\n'
             f'session "{{x{i}}}"\n' for i in range(30)]
    text = "".join(units) + 'session "{x7_}"\n'  # E029, suggesting x7
    parses = Parses()
    compile(text, parses=parses)
    visited: list[int] = []
    visit = Validator.visit

    def counted(self: Validator, node: nodes.Node, *args: object) -> object:
        visited.append(id(node))
        return visit(self, node, *args)

    monkeypatch.setattr(Validator, "visit", counted)
    for version in (text.replace("agent a7:", "agent a7b:"), text):
        visited.clear()
        result = compile(version, parses=parses)
        assert result.program is not None
        assert _exact(result) == _exact(compile(version))
        top = {id(s) for s in result.program.body}
        assert len(top.intersection(visited)) == 3  # the agent, its session, the E029


def test_findings_of_a_statement_removed_are_not_kept_for_its_return() -> None:
    """A statement taken out, then written again after a definition it reads changed: its
    findings are checked again (the change happened while it was not there to see it)."""
    parses = Parses()
    for version in ('agent b:\n  model: sonnet\n\nsession: b\n', 'agent b:\n  model: sonnet\n\n',
                    'agent c:\n  model: sonnet\n\n', 'agent c:\n  model: sonnet\n\nsession: b\n'):
        assert _exact(compile(version, parses=parses)) == _exact(compile(version))


def test_spans_read_only_after_several_moves_are_the_texts() -> None:
    """A piece moved again and again (lines added and removed above it, pieces kept from an
    older text taken back) and read only at the end: its tree's, diagnostics' and tokens'
    lines are the last text's, including a triple-quoted string that ends a piece, which the
    piece after it reads too (a failure right after it is a nested triple quote)."""
    body = ('let a = """\nlong\n"""\nsession "after {a}"\nlet b = session "unterminated\n'
            'let c = """\ntext\n"""x\nsession "{c} {missing}"\n')
    parses = Parses()
    versions = [body, "\n" + body, "\n\n\n" + body, "# c\n" + body, body,
                "\n\n" + body.replace('session "after', '\nsession "after'), "\n" + body]
    for version in versions:
        compile(version, parses=parses)
    last = versions[-1]
    assert _exact(compile(last, parses=parses)) == _exact(compile(last))
    assert _lexed(*parses.lexed(last)) == _lexed(*_whole_lexed(last))
