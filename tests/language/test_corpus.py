"""Every real program of ../shared/corpus compiles; the syntax sketch gets clear diagnostics.

The corpus lives outside the repository (see tests/conftest.py); these tests skip when it is
absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import CORPUS

from openprose.language import Severity, compile, nodes

SKETCH_NAME = "roadmap/syntax/open-prose-syntax.prose"
SKETCH = CORPUS / SKETCH_NAME

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")


def _programs() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*.prose") if p != SKETCH)


PROGRAMS = _programs()
PARAMS = [pytest.param(p, id=p.relative_to(CORPUS).as_posix()) for p in PROGRAMS] or [
    pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason="corpus not found"))
]


def _assert_positions(source: str, result) -> None:
    lines = source.replace("\r\n", "\n").split("\n")
    for d in result.diagnostics:
        assert 1 <= d.span.line <= len(lines), d
        assert 1 <= d.span.column <= len(lines[d.span.line - 1]) + 1, d


@needs_corpus
def test_corpus_has_the_53_programs_of_ruling_5():
    names = {p.relative_to(CORPUS).as_posix() for p in PROGRAMS}
    assert len(names) == 53
    assert sum(1 for name in names if name.startswith("roadmap/")) == 3
    assert "roadmap/simple-pipeline.prose" in names
    assert SKETCH_NAME not in names
    assert SKETCH.is_file()


@pytest.mark.parametrize("path", PARAMS)
def test_corpus_program_compiles_without_errors(path: Path):
    source = path.read_text(encoding="utf-8")
    result = compile(source, str(path))
    assert result.program is not None
    assert result.errors == [], "\n".join(d.format(source) for d in result.errors)
    assert result.ok
    assert result.program.body, "a real program has statements"
    _assert_positions(source, result)
    for d in result.warnings:
        assert d.severity is Severity.WARNING
        assert d.code.startswith("W")


@needs_corpus
def test_corpus_programs_contain_sessions():
    """Guard against a parser that 'succeeds' by dropping statements."""
    for path in PROGRAMS:
        result = compile(path.read_text(encoding="utf-8"), str(path))
        assert result.program is not None
        kinds = {type(node) for node in nodes.walk(result.program)}
        assert nodes.Session in kinds, path.name


# --------------------------------------------------------------------------- the syntax sketch


@pytest.fixture(scope="module")
def sketch():
    if not SKETCH.is_file():
        pytest.skip(f"syntax sketch not found at {SKETCH}")
    source = SKETCH.read_text(encoding="utf-8")
    lines = source.split("\n")
    return source, lines, compile(source, str(SKETCH))


def _line_of(lines: list[str], text: str) -> int:
    matches = [i + 1 for i, line in enumerate(lines) if line.rstrip() == text]
    assert len(matches) == 1, (text, matches)
    return matches[0]


def _errors_at(result, line: int) -> list:
    return [d for d in result.errors if d.span.line == line]


def test_sketch_is_rejected_but_parsed(sketch):
    source, _, result = sketch
    assert result.program is not None
    assert not result.ok
    assert result.errors
    _assert_positions(source, result)
    for d in result.diagnostics:
        assert d.message.strip()
        assert d.file == str(SKETCH)


def test_sketch_colon_after_session_prompt(sketch):
    _, lines, result = sketch
    line = _line_of(lines, 'session "Synthesize":')
    errors = _errors_at(result, line)
    assert [(d.code, d.span.column) for d in errors] == [("E005", lines[line - 1].index(":") + 1)]
    assert "no ':' after a session prompt" in errors[0].message
    for text in ('session "Final synthesis":', 'session "Independent task":'):
        n = _line_of(lines, text)
        assert ("E005", len(text)) in [(d.code, d.span.column) for d in _errors_at(result, n)]


def test_sketch_choice_without_options(sketch):
    _, lines, result = sketch
    line = _line_of(lines, "choice **based on urgency**:")
    errors = _errors_at(result, line)
    assert [(d.code, d.span.column) for d in errors] == [("E005", 1)]
    assert "no options" in errors[0].message
    # the sessions inside are reported as not being options
    for offset in (1, 2):
        inner = _errors_at(result, line + offset)
        assert [(d.code, d.span.column) for d in inner] == [("E005", 3)]
        assert "option" in inner[0].message


def test_sketch_session_options_in_parentheses(sketch):
    _, lines, result = sketch
    line = _line_of(lines, 'session "Flaky API call" (retry: 3)')
    errors = _errors_at(result, line)
    assert [(d.code, d.span.column) for d in errors] == [("E005", lines[line - 1].index("(") + 1)]
    assert "retry: 3" in errors[0].message


def test_sketch_undefined_names(sketch):
    _, lines, result = sketch
    undefined = {(d.span.line, d.span.column, d.message) for d in result.errors if d.code == "E029"}
    expected = [
        ("for item in items:", "items"),
        ('items | map: session "Process {item}"', "items"),
        ('items | filter: session "Is {item} relevant?"', "items"),
        ("items | reduce(summary, item):", "items"),
        ("files", "files"),
        ('items | pmap: session "Process {item}"', "items"),
        ("  context: [research, analysis, feedback]", "analysis"),
    ]
    for text, name in expected:
        line = _line_of(lines, text)
        column = lines[line - 1].index(name) + 1
        assert (line, column, f"undefined variable '{name}'") in undefined, (text, name)
    # feedback is bound later (let feedback = ...) and names are program-wide; research too
    assert not any("'feedback'" in m or "'research'" in m for _, _, m in undefined)


def test_sketch_infinite_loop_warns(sketch):
    _, lines, result = sketch
    line = _line_of(lines, "loop:")
    assert [(d.code, d.span.column) for d in result.warnings if d.span.line == line] == [
        ("W015", 1)
    ]


def test_sketch_errors_do_not_cascade_into_valid_sections(sketch):
    """Recovery: the valid parts before the first problem and the complete example at the end
    produce no errors."""
    _, lines, result = sketch
    first_problem = _line_of(lines, 'session "Synthesize":')
    complete_example = _line_of(lines, "# COMPLETE EXAMPLE")
    assert not [d for d in result.errors if d.span.line < first_problem]
    assert not [d for d in result.errors if d.span.line > complete_example]
    # the parser still produced the statements after the broken ones
    agents = result.program.agents
    assert {"researcher", "writer", "code-reviewer", "synthesizer"} <= set(agents)
    loops = [n for n in nodes.walk(result.program) if isinstance(n, nodes.Loop)]
    assert [loop.mode for loop in loops] == ["until", "until", None, "until"]
