"""Syntax of OpenProse releases after 0.8 found in real programs: each construct is either
read with its clear 0.8 meaning plus a W020 naming it, or refused with one E035 (E036 for a
nested triple quote). The rulings are in docs/diagnostics.md, "Newer syntax"."""

from __future__ import annotations

import pytest

from openprose.language import compile
from openprose.language.canonical import format_program


def found(source: str) -> list[tuple[str, int, int, int]]:
    return [(d.code, d.span.line, d.span.column, d.span.end_column)
            for d in compile(source).diagnostics]


# (newer source, its 0.8 meaning, the W020 spans (line, column, end column), message part)
ACCEPTED = [
    ('let mode = "a"\nif mode is "fetch":\n  session "x"\n',
     'let mode = "a"\nif mode == "fetch":\n  session "x"\n', [(2, 9, 11)], "'is'"),
    ('let mode = "a"\nif mode is not "fetch":\n  session "x"\n',
     'let mode = "a"\nif mode != "fetch":\n  session "x"\n', [(2, 9, 15)], "'is not'"),
    ('let n = 1\nassert n > 0: "n must be positive"\n',
     'let n = 1\nif not n > 0:\n  throw "n must be positive"\n', [(2, 1, 7)], "'assert'"),
    ('assert **the tests pass**\n',
     'if not **the tests pass**:\n  throw "assertion failed"\n', [(1, 1, 7)], "'assert'"),
    ('input tags: ["a", "b"]\n', 'input tags: "(default: [\\"a\\", \\"b\\"])"\n',
     [(1, 13, 23)], "input default"),
    ('input opts: "Options" = { depth: 2,\n  fast: true }\n',
     'input opts: "Options (default: { depth: 2, fast: true })"\n', [(1, 25, 15)],
     "input default"),
    ('input topic: **Which sea\n  the poem is about**\n',
     'input topic: **Which sea the poem is about**\n', [(1, 14, 16)], "over several lines"),
    ('loop until **the draft\n    reads well** (max: 2):\n  session "Edit"\n',
     'loop until **the draft reads well** (max: 2):\n  session "Edit"\n', [(1, 12, 14)],
     "over several lines"),
]


@pytest.mark.parametrize(("newer", "meaning", "spans", "message"), ACCEPTED)
def test_newer_construct_read_with_its_08_meaning(newer, meaning, spans, message):
    result = compile(newer)
    assert result.ok
    assert [(d.code, d.span.line, d.span.column, d.span.end_column)
            for d in result.diagnostics] == [("W020", *span) for span in spans]
    assert all(message in d.message for d in result.diagnostics)
    plain = compile(meaning)
    assert plain.ok and not plain.diagnostics
    assert result.program == plain.program
    # the canonical form is the 0.8 spelling, and it round-trips
    text = format_program(result.program)
    again = compile(text)
    assert not again.diagnostics and again.program == result.program
    assert format_program(again.program) == text


@pytest.mark.parametrize(("source", "span", "what"), [
    ('let t = 120s\n', (1, 9, 13), "duration literal '120s'"),
    ('let waits = [1,\n  500ms]\n', (2, 3, 8), "duration literal '500ms'"),
    ('let page = http.get("https://example.com")\n', (1, 12, 21), "'http.get(...)'"),
    ('let key = env("API_KEY")\n', (1, 11, 15), "'env(...)'"),
])
def test_newer_construct_refused_with_one_error(source, span, what):
    result = compile(source)
    assert [(d.code, d.span.line, d.span.column, d.span.end_column)
            for d in result.diagnostics] == [("E035", *span)]
    message = result.diagnostics[0].message
    assert what in message
    assert "not part of the language this compiler implements" in message


def test_names_like_the_refused_constructs_stay_valid():
    """``http`` and ``env`` as variables, a use alias called ``env``, ``assert`` as a name,
    and a number before a name on its own are untouched."""
    source = ('let http = { body: "b" }\nlet env = "e"\nlet assert = http.body\n'
              'session "{env} {assert}"\n')
    assert compile(source).diagnostics == []
    assert [d.code for d in compile('let x = 3 s\n').diagnostics] == ["E004"]


@pytest.mark.parametrize(("source", "line", "column"), [
    ('session """Say """hi""" now"""\n', 1, 16),
    ('session """\n  Write code like this:\n  """\n  docstring\n  """\n"""\n', 3, 3),
])
def test_nested_triple_quotes_are_one_error_saying_so(source, line, column):
    result = compile(source)
    assert [(d.code, d.span.line, d.span.column) for d in result.diagnostics] == [
        ("E036", line, column)]
    assert 'nested """ inside a """ string' in result.diagnostics[0].message


def test_unclosed_double_star_still_an_error():
    """A ``**`` with no close before the next blank line stays E005."""
    assert [c for c, *_ in found('if **unclosed\n\nsession "x"\n')][:1] == ["E005"]
