"""A document's answers about one place (hover, definition, references, highlight) read
an analysis of the statements concerned only, and give what the whole analysis gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as lsp

from openprose.language.parser import Parses
from openprose.lsp import features
from openprose.lsp.document import Document

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
