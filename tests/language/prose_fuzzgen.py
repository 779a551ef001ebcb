"""Input generators and the invariant check shared by tests/language/test_fuzz.py and
bench/fuzz.py.

Generators take a ``random.Random`` (hypothesis supplies a reproducible one in the tests), so the
long benchmark run explores exactly the same space as the normal suite.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from tests.conftest import CORPUS

from openprose.language import CompileResult, Severity, compile
from openprose.language.canonical import format_program

KEYWORDS = (
    "session", "agent", "let", "const", "parallel", "for", "in", "loop", "until", "while", "as",
    "repeat", "try", "catch", "finally", "throw", "choice", "option", "if", "elif", "else", "do",
    "block", "use", "import", "from", "input", "output", "resume", "map", "filter", "reduce",
    "pmap", "max", "count", "on-fail", "model", "prompt", "context", "retry", "backoff",
    "persist", "skills", "permissions", "read", "bash", "gate", "true", "item", "max_depth",
    "sonnet", "opus", "not", "and", "or", "x", "a-b", "_", "é", "²", "٣",
)
PUNCTUATION = (
    '"', '"""', "**", "***", "*", "\\", "\\{", "{", "}", "{x}", "(", ")", "[", "]", ":", ",", "=",
    ".", "|", "->", "-", "#", "\n", "\n\n", "  ", "    ", "\t", "\r\n", "\r", "\ufeff", "@", "`",
    "0", "3", "1.5", " ", "'", "\x00", "\u2028", "\x0c", "<", "==",
)
FRAGMENTS = KEYWORDS + PUNCTUATION
CODE_RE = re.compile(r"^[EW]\d{3}$")


def corpus_sources() -> list[str]:
    """Every ``*.prose`` text of the corpus (the syntax sketch included), or [] if absent."""
    if not CORPUS.is_dir():
        return []
    return [p.read_text(encoding="utf-8") for p in sorted(CORPUS.rglob("*.prose"))]


# --------------------------------------------------------------------------- random text


def token_soup(rng: random.Random, max_fragments: int = 60) -> str:
    """Keywords and punctuation of the language glued together with spaces and newlines."""
    out = []
    for _ in range(rng.randint(0, max_fragments)):
        out.append(rng.choice(FRAGMENTS))
        out.append(rng.choice(("", " ", " ", "\n", "\n  ")))
    return "".join(out)


def random_chars(rng: random.Random, max_len: int = 200) -> str:
    """Arbitrary characters, biased towards ASCII and the language's punctuation."""
    out = []
    for _ in range(rng.randint(0, max_len)):
        roll = rng.random()
        if roll < 0.5:
            out.append(chr(rng.randint(32, 126)))
        elif roll < 0.8:
            out.append(rng.choice(PUNCTUATION))
        else:
            code = rng.randint(0, 0x10FFFF)
            out.append(chr(code) if not 0xD800 <= code <= 0xDFFF else "?")
    return "".join(out)


# --------------------------------------------------------------------------- mutations


def _pos(rng: random.Random, text: str) -> int:
    return rng.randint(0, len(text))


def _lines(text: str) -> list[str]:
    return text.split("\n")


def delete_chars(rng: random.Random, text: str) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + text[i + rng.randint(1, 3):]


def duplicate_chars(rng: random.Random, text: str) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    j = i + rng.randint(1, 4)
    return text[:j] + text[i:j] + text[j:]


def swap_chars(rng: random.Random, text: str) -> str:
    if len(text) < 2:
        return text
    i = rng.randrange(len(text) - 1)
    j = i + 1 if rng.random() < 0.6 else rng.randrange(len(text))
    i, j = sorted((i, j))
    if i == j:
        return text
    return text[:i] + text[j] + text[i + 1:j] + text[i] + text[j + 1:]


def delete_line(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def duplicate_line(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    lines.insert(rng.randint(0, len(lines)), lines[i])
    return "\n".join(lines)


def swap_lines(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def break_indentation(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    stripped = lines[i].lstrip(" \t")
    indent = len(lines[i]) - len(stripped)
    new = rng.choice((
        " " * max(0, indent + rng.choice((-3, -2, -1, 1, 2, 3))),
        "\t" * rng.randint(0, 3),
        " " * indent + "\t",
        "",
        " " * (indent * 2),
    ))
    lines[i] = new + stripped
    return "\n".join(lines)


def unterminate_string(rng: random.Random, text: str) -> str:
    quotes = [m.start() for m in re.finditer('"', text)]
    if not quotes or rng.random() < 0.3:
        i = _pos(rng, text)
        return text[:i] + rng.choice(('"', '"""', '"\\', '"{', '"""x""')) + text[i:]
    i = rng.choice(quotes)
    return text[:i] + text[i + 1:]


def unterminate_discretion(rng: random.Random, text: str) -> str:
    stars = [m.start() for m in re.finditer(r"\*\*\*?", text)]
    if not stars or rng.random() < 0.5:
        i = _pos(rng, text)
        return text[:i] + rng.choice(("**", "***", "***\n", "*")) + text[i:]
    i = rng.choice(stars)
    return text[:i] + text[i + 2:]


def insert_punctuation(rng: random.Random, text: str) -> str:
    i = _pos(rng, text)
    return text[:i] + rng.choice(PUNCTUATION) + text[i:]


def insert_keyword(rng: random.Random, text: str) -> str:
    i = _pos(rng, text)
    return text[:i] + rng.choice(KEYWORDS) + rng.choice(("", " ", ":", "\n")) + text[i:]


def truncate(rng: random.Random, text: str) -> str:
    return text[:_pos(rng, text)]


def line_endings(rng: random.Random, text: str) -> str:
    return text.replace("\n", rng.choice(("\r\n", "\r", "\n\n")))


MUTATIONS: tuple[Callable[[random.Random, str], str], ...] = (
    delete_chars, duplicate_chars, swap_chars, delete_line, duplicate_line, swap_lines,
    break_indentation, unterminate_string, unterminate_discretion, insert_punctuation,
    insert_keyword, truncate, line_endings,
)


def excerpt(rng: random.Random, text: str, max_lines: int = 40) -> str:
    """A random run of lines (keeps mutated inputs small, so many more cases fit a second)."""
    lines = _lines(text)
    start = rng.randrange(len(lines))
    return "\n".join(lines[start:start + rng.randint(1, max_lines)])


def mutate(rng: random.Random, text: str, max_mutations: int = 4) -> str:
    for _ in range(rng.randint(1, max_mutations)):
        text = rng.choice(MUTATIONS)(rng, text)
    return text


# --------------------------------------------------------------------------- the invariant


def check(source: str, path: str | None = None) -> CompileResult:
    """Compile ``source``; raise AssertionError unless every diagnostic is well formed.

    ``compile`` must never raise, must return a program unless it reports an error, a program
    without errors must have a canonical form that compiles again, and each diagnostic must have a
    valid code and severity and a position inside the source (lines counted after the same
    newline normalization the lexer applies).
    """
    result = compile(source, path)
    assert result.program is not None or result.errors, "no program and no error"
    text = source.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")
    lines = text.split("\n")
    for d in result.diagnostics:
        where = f"{d.code} at {d.span} ({d.message})"
        assert CODE_RE.match(d.code), where
        assert d.severity is (Severity.ERROR if d.code[0] == "E" else Severity.WARNING), where
        assert d.message.strip(), where
        assert 1 <= d.span.line <= len(lines), f"line outside the source: {where}"
        assert 1 <= d.span.column <= len(lines[d.span.line - 1]) + 1, \
            f"column outside line {d.span.line}: {where}"
        assert (d.span.end_line, d.span.end_column) >= (d.span.line, d.span.column), where
        assert d.span.end_line <= len(lines), f"end line outside the source: {where}"
        d.format(source)
        d.to_dict()
    if result.ok and result.program is not None:
        canonical = format_program(result.program)
        again = compile(canonical, path)
        assert again.ok, (f"canonical form does not compile again: {again.errors[:1]}\n"
                          f"canonical = {canonical!r}")
    return result
