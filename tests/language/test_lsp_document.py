"""A document's answers about one place (hover, definition, references, highlight) read
an analysis of the statements concerned only, and give what the whole analysis gives; its
semantic tokens are kept per statement across versions and equal the whole analysis' too."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from lsprotocol import types as lsp

from openprose.language.parser import Parses
from openprose.lsp import features
from openprose.lsp.document import Document

T = TypeVar("T")

PROGRAMS = ["13-variables-and-context.prose", "19-advanced-parallel.prose", "20-fixed-loops.prose",
            "21-pipeline-operations.prose", "22-error-handling.prose",
            "24-choice-blocks.prose", "25-conditionals.prose", "26-parameterized-blocks.prose"]


def answers(doc: Document, position: lsp.Position) -> tuple[object, ...]:
    return (features.hover(doc, position), features.definition(doc, position),
            features.references(doc, position, True), features.highlights(doc, position))


@pytest.mark.parametrize("name", PROGRAMS)
def test_answers_about_a_place_are_the_whole_analysis_answers(corpus: Path, name: str) -> None:
    """At every name written in the program (and on each ``session`` keyword)."""
    path = corpus / name
    if not path.exists():
        pytest.skip(f"{name} is not in the corpus")
    text = path.read_text("utf-8")
    whole = Document("file:///p.prose", None, text, 1)
    assert whole.analysis is not None
    places = [(s.span.line, s.span.column) for s in whole.analysis.symbols]
    places += [(s.line, whole.lines[s.line - 1].find("session") + 1)
               for s in whole.analysis.statements.values() if s.kind == "session"]
    part = Document("file:///p.prose", None, text, 1)
    for line, column in places:
        position = lsp.Position(line - 1, column - 1)
        assert answers(part, position) == answers(whole, position), (line, column)
    assert "analysis" not in part.__dict__  # the whole was not made


def test_a_name_is_looked_up_in_the_statements_that_write_it() -> None:
    """On a long program: a parameter in its block's statement, a binding in those that
    have its word (the whole analysis of 1 MB took seconds, once per change)."""
    units = [f'agent a{i}:\n  model: sonnet\n\nblock b{i}(topic):\n'
             f'  session: a{i}\n    prompt: "About {{topic}}"\n\n'
             f'let x{i} = do b{i}("part {i}")\nsession "Use {{x{i}}}"\n' for i in range(200)]
    text = "".join(units)
    doc = Document("file:///long.prose", None, text, 1, Parses())
    topic = text.index("{topic}", text.index("block b7(")) + 1
    line = text.count("\n", 0, topic)
    around = doc.around(lsp.Position(line, topic - text.rindex("\n", 0, topic) - 1))
    assert around is not None and around[1] is not None and around[1].kind == "binding"
    assert len(around[0].program.body) == 1  # type: ignore[union-attr]
    read = text.index("{x7}") + 1
    line = text.count("\n", 0, read)
    around = doc.around(lsp.Position(line, read - text.rindex("\n", 0, read) - 1))
    assert around is not None and around[1] is not None
    assert len(around[0].program.body) == 2  # type: ignore[union-attr]
    assert [s.span.line for s in around[0].references_of(around[1])] == [
        text.count("\n", 0, text.index("let x7 ")) + 1, line + 1]


def _tokens(doc: Document) -> list[int]:
    return features.semantic_tokens(doc).data


#: a name read in one statement coloured as what another defines (an imported program)
IMPORTED = ('use "h/s" as lib\nlet a = session "one"\n\nsession "two {a} {lib}"\n'
            '  context: [lib, a]\n')
DEFINITION = re.compile(r"^(?:let|const|agent|block|output|input|use \S+ as) +([\w-]+)", re.M)


def _edited(rng: random.Random, text: str) -> str:
    """A line inserted or deleted at a random place, or a definition renamed (and back)."""
    lines = text.split("\n")
    at = rng.randrange(len(lines))
    what = rng.randrange(3)
    if what == 0:
        line = rng.choice(["", "# note", 'session "x {a}"', "  context: lib", 'let lib = "s"'])
        return "\n".join([*lines[:at], line, *lines[at:]])
    if what == 1:
        return "\n".join(lines[:at] + lines[at + 1:])
    found = list(DEFINITION.finditer(text))
    if not found:
        return text
    name = rng.choice(found)
    new = name.group(1)[:-1] if name.group(1).endswith("Z") else name.group(1) + "Z"
    return text[:name.start(1)] + new + text[name.end(1):]


def test_semantic_tokens_kept_per_statement_are_the_whole_analysis_tokens(corpus: Path) -> None:
    """Corpus programs edited version after version, the parses (and the tokens kept with
    them) carried from one to the next: each version's tokens are a fresh document's, made
    from the whole analysis, whatever moved, and whatever definition a read name lost."""
    rng = random.Random(33)
    sources = [p.read_text("utf-8") for p in sorted(corpus.glob("*.prose"))]
    for text in [IMPORTED, *rng.sample(sources, min(12, len(sources)))]:
        parses = Parses()
        for version in range(10):
            text = _edited(rng, text) if version else text
            assert _tokens(Document("file:///p.prose", None, text, version, parses)) == \
                _tokens(Document("file:///p.prose", None, text, version)), (version, text)


def test_a_line_inserted_mid_text_colours_only_its_statement() -> None:
    """The statements a line inserted moved keep their tokens (the same objects), the
    statement it went into alone is coloured again, and a definition's reads elsewhere
    follow it when it is renamed."""
    units = [f'agent a{i}:\n  model: sonnet\n\nblock b{i}(topic):\n'
             f'  session: a{i}\n    prompt: "About {{topic}}"\n\n'
             f'let x{i} = do b{i}("part {i}")\nsession "Use {{x{i}}}"\n' for i in range(100)]
    text = "".join(units)
    parses = Parses()
    _tokens(Document("file:///long.prose", None, text, 1, parses))
    before = dict(parses.coloured)
    at = text.index("\n", text.index("block b50(")) + 1
    text = text[:at] + '  session "more"\n' + text[at:]
    doc = Document("file:///long.prose", None, text, 2, parses)
    assert _tokens(doc) == _tokens(Document("file:///long.prose", None, text, 2))
    again = [key for _, key, _, _ in doc.pieces if parses.coloured[key] is not before.get(key)]
    assert len(again) == 1 and "block b50(" in again[0][0]  # type: ignore[index]
    text = text.replace("let x70 =", "let y70 =")
    assert _tokens(Document("file:///long.prose", None, text, 3, parses)) == \
        _tokens(Document("file:///long.prose", None, text, 3))


def test_the_tokens_after_an_open_and_the_outline_share_one_analysis(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An editor asks for the colours, the outline and the folding of a file it opens: the
    text is analysed once for all three (it was twice: every statement for the tokens, then
    the whole program), and the tokens are still those of a document without parses."""
    from openprose.language import analysis

    text = "".join(f'let x{i} = session "Part {i}"\nsession "Use {{x{i}}}"\n'
                   for i in range(20))
    made: list[int] = []
    whole = analysis._analyze
    monkeypatch.setattr(analysis, "_analyze", lambda *a: made.append(1) or whole(*a))
    doc = Document("file:///p.prose", None, text, 1, Parses())
    tokens = _tokens(doc)
    features.document_symbols(doc)
    features.folding_ranges(doc)
    assert len(made) == 1
    assert tokens == _tokens(Document("file:///p.prose", None, text, 1))


def test_settling_after_an_open_walks_no_old_generation() -> None:
    """The first change after a large file is opened waited for a full collection walking
    the whole tree the open compiled; settling after an open collects the young generations
    only, after a change all of them (what a change leaves in cycles is freed)."""
    from openprose.lsp.document import settle

    assert max(_collections(lambda: settle(True))[0]) < 2
    assert max(_collections(lambda: settle(False))[0]) == 2


def _collections(work: Callable[[], T]) -> tuple[list[int], T]:
    """The generations the cycle collector walked while ``work`` ran, and its result."""
    import gc

    collected: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        return collected, work()
    finally:
        gc.callbacks.remove(seen)


def test_an_open_compiles_with_the_collector_paused() -> None:
    """An open's compile builds a large tree and no cycles: no collection runs while it grows
    (each walked the tree so far for nothing), only one of the young generations before; the
    collector is on again after, and the result is a plain compile's."""
    import gc

    text = "".join(f'agent a{i}:\n  model: sonnet\nlet x{i} = session: a{i}\n'
                   f'  prompt: "Part {i} of {{x{i - 1}}}"\n' for i in range(1, 400))
    collected, doc = _collections(lambda: Document("file:///long.prose", None, text, 1,
                                                   Parses()))
    assert collected == [1] and gc.isenabled()
    assert doc.diagnostics() == Document("file:///long.prose", None, text, 1).diagnostics()
