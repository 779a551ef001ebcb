"""Tokenizer: source text → tokens, with INDENT/DEDENT like CPython's tokenize.

Rules (docs/architecture.md places the lexer among the stages):
- Indentation opens and closes blocks; blank and comment-only lines never do.
- Newlines inside ``( ) [ ] { }`` are ignored.
- A line whose first token is ``|`` or ``->`` continues the expression before it: it never
  opens a block, and it closes blocks only down to its own indentation.
- ``"..."`` strings stay on one line; ``\"\"\"...\"\"\"`` strings span lines verbatim. A run of more
  than three closing quotes ends the string with its last three (the rest is content).
- ``**text**`` and ``*** ... ***`` are discretion text, never tokenized inside.
Errors become diagnostics and lexing continues, so one pass reports every problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from openprose.language.diagnostics import Diagnostic, Severity
from openprose.language.nodes import Interpolation, Span


class T(StrEnum):
    NAME = "name"
    NUMBER = "number"
    STRING = "string"
    DISCRETION = "discretion"
    OP = "op"
    NEWLINE = "newline"
    INDENT = "indent"
    DEDENT = "dedent"
    EOF = "end of file"


@dataclass(slots=True)
class Token:
    kind: T
    value: str
    span: Span
    parts: tuple[str | Interpolation, ...] = ()
    triple: bool = False
    multiline: bool = False

    def is_op(self, *ops: str) -> bool:
        return self.kind is T.OP and self.value in ops

    def is_name(self, *names: str) -> bool:
        return self.kind is T.NAME and (not names or self.value in names)

    def describe(self) -> str:
        if self.kind in (T.NAME, T.OP):
            return f"'{self.value}'"
        if self.kind is T.NUMBER:
            return f"number {self.value}"
        return self.kind.value


NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z_][A-Za-z0-9_]*)*")
#: The longest name: names become file names and keys of the run's state.
MAX_NAME = 128
NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
#: How a refused construct of a later OpenProse version ends its message (E035).
NOT_IMPLEMENTED = "is not part of the language this compiler implements (OpenProse 0.8)"
#: A later version's duration literal (``120s``, ``500ms``, ``5m``, ``2h``): refused (E035).
DURATION_RE = re.compile(r"(?:ms|s|m|h)(?![A-Za-z0-9_])")
#: Where a ``**…**`` condition spanning lines may close: before the next blank line.
PARAGRAPH_END_RE = re.compile(r"\n[ \t\f]*(?:\n|$)")
QUOTES_RE = re.compile(r'"+')
SPACE_RE = re.compile(r"[ \t\f]+")
TEXT_RE = re.compile(r'[^"\\{\n]+')
TRIPLE_TEXT_RE = re.compile(r'[^"\\{]+')
INTERPOLATION_RE = re.compile(
    r"\{([A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z_][A-Za-z0-9_]*)*"
    r"(?:\.[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z_][A-Za-z0-9_]*)*)*)\}"
)
OPERATORS = ("->", "<=", ">=", "==", "!=", "(", ")", "[", "]", "{", "}", ":", ",", "=", ".",
             "|", "+", "-", "*", "/", "<", ">")
#: the operators by their length (two characters first: ``->`` before ``-``)
OPERATORS_2 = frozenset(op for op in OPERATORS if len(op) == 2)
OPERATORS_1 = frozenset(op for op in OPERATORS if len(op) == 1)
OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {")", "]", "}"}
ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "{": "{"}
TAB_SIZE = 8


class Lexer:
    def __init__(self, source: str, path: str | None = None, first_line: int = 1) -> None:
        self.src = source.replace("\r\n", "\n").replace("\r", "\n")
        if self.src.startswith("\ufeff"):
            self.src = self.src[1:]
        self.path = path
        self.pos = 0
        self.line = first_line  # > 1: ``source`` is the part of a text from that line on
        self.col = 1
        self.tokens: list[Token] = []
        self.diagnostics: list[Diagnostic] = []
        self.indents = [0]
        #: The same indents with each tab as one column: where the two orders disagree, the
        #: meaning of a line depends on how wide a tab is (tabs mixed with spaces).
        self.narrow = [0]
        self.brackets: list[tuple[str, Span]] = []
        self.comments: list[Span] = []  # for editors: highlighting and formatting
        #: a construct (string, discretion, bracket, indentation) reached the end of the text
        #: unclosed: the text that follows would be read as part of it
        self.unfinished = False

    # ------------------------------------------------------------------ helpers
    def error(self, code: str, message: str, span: Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.ERROR, self.path))

    def warn(self, code: str, message: str, span: Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.WARNING, self.path))

    def here(self) -> tuple[int, int]:
        return self.line, self.col

    def advance(self, n: int = 1) -> str:
        text = self.src[self.pos:self.pos + n]
        newlines = text.count("\n")
        if newlines:
            self.line += newlines
            self.col = len(text) - text.rfind("\n")
        else:
            self.col += len(text)
        self.pos += len(text)
        return text

    def skip(self, n: int) -> None:
        """:meth:`advance` over ``n`` characters known to hold no line break (a name, a
        number, spaces, an operator): the most common step, without reading them again."""
        self.pos += n
        self.col += n

    def span_from(self, line: int, col: int) -> Span:
        return Span(line, col, self.line, self.col)

    def emit(self, kind: T, value: str, span: Span, **extra: object) -> None:
        self.tokens.append(Token(kind, value, span, **extra))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ driver
    def tokenize(self) -> list[Token]:
        at_line_start = True
        while self.pos < len(self.src):
            if at_line_start and not self.brackets:
                if not self.handle_indentation():
                    continue
                at_line_start = False
            ch = self.src[self.pos]
            if ch == "\n":
                if not self.brackets:
                    if self.tokens and self.tokens[-1].kind not in (T.NEWLINE, T.INDENT, T.DEDENT):
                        self.emit(T.NEWLINE, "\n", Span(self.line, self.col, self.line, self.col + 1))
                    at_line_start = True
                self.advance()
            elif ch in " \t\f":
                self.skip(SPACE_RE.match(self.src, self.pos).end() - self.pos)  # type: ignore[union-attr]
            elif ch == "#":
                self.skip_comment()
            elif ch == '"':
                self.lex_string()
            elif self.src.startswith("**", self.pos):
                self.lex_discretion()
            elif "0" <= ch <= "9":
                line, col = self.here()
                text = NUMBER_RE.match(self.src, self.pos).group()  # type: ignore[union-attr]
                self.skip(len(text))
                unit = DURATION_RE.match(self.src, self.pos)
                if unit:  # read on as the number alone, so this is the one error it gets
                    self.advance(len(unit.group()))
                    self.error("E035", f"the duration literal '{text}{unit.group()}' is newer "
                               f"syntax that {NOT_IMPLEMENTED}", self.span_from(line, col))
                self.emit(T.NUMBER, text, self.span_from(line, col))
            elif "a" <= ch <= "z" or "A" <= ch <= "Z" or ch == "_":
                line, col = self.here()
                text = NAME_RE.match(self.src, self.pos).group()  # type: ignore[union-attr]
                self.skip(len(text))
                self.tokens.append(Token(T.NAME, text, Span(line, col, line, self.col)))
                if len(text) > MAX_NAME:
                    self.error("E005", f"the name '{text[:40]}...' is longer than {MAX_NAME} "
                               "characters (names become file names of the run's state)",
                               self.span_from(line, col))
            else:
                self.lex_operator()
        self.finish()
        return self.tokens

    def finish(self) -> None:
        self.unfinished |= bool(self.brackets)
        for opener, span in self.brackets:
            self.error("E005", f"'{opener}' is never closed", span)
        end = Span(self.line, self.col, self.line, self.col)
        if self.tokens and self.tokens[-1].kind not in (T.NEWLINE, T.DEDENT, T.INDENT):
            self.emit(T.NEWLINE, "", end)
        while len(self.indents) > 1:
            self.indents.pop()
            self.emit(T.DEDENT, "", end)
        self.emit(T.EOF, "", end)

    def skip_comment(self) -> None:
        line, col = self.here()
        end = self.src.find("\n", self.pos)
        self.advance((len(self.src) if end < 0 else end) - self.pos)
        self.comments.append(self.span_from(line, col))

    # ------------------------------------------------------------------ indentation
    def handle_indentation(self) -> bool:
        """Measure the indent of a new line. Returns False if the line was blank (consumed)."""
        start = self.pos
        space = SPACE_RE.match(self.src, start)
        indent = space.group() if space else ""
        width = narrow = len(indent)
        if "\t" in indent:
            width = 0
            for ch in indent:
                width = (width // TAB_SIZE + 1) * TAB_SIZE if ch == "\t" else width + 1
        self.skip(narrow)
        rest = self.src[self.pos:self.pos + 2]
        if self.pos >= len(self.src) or rest[:1] in ("\n", "#"):
            if rest[:1] == "#":
                self.skip_comment()
            if self.pos < len(self.src):
                self.advance()  # the newline
            return False
        line_span = Span(self.line, 1, self.line, self.col)
        continuation = rest[:1] == "|" or rest == "->"
        if continuation and self.tokens and self.tokens[-1].kind is T.NEWLINE:
            # The continued expression may have closed blocks of properties; close those only.
            while width < self.indents[-1]:
                self.indents.pop()
                self.narrow.pop()
                self.emit(T.DEDENT, "", line_span)
            return True
        if _order(width, self.indents[-1]) != _order(narrow, self.narrow[-1]):
            self.error("E005", "this line's indentation mixes tabs and spaces with the lines "
                       f"before it: a tab counts as {TAB_SIZE} columns, so the line is not "
                       "nested as it looks; indent with spaces only", line_span)
            self.unfinished = True
            self.advance(len(self.src) - self.pos)  # the rest would be read at the wrong depth
            return False
        if width > self.indents[-1]:
            self.indents.append(width)
            self.narrow.append(narrow)
            self.emit(T.INDENT, self.src[start:self.pos], line_span)
        elif width < self.indents[-1]:
            while width < self.indents[-1]:
                self.indents.pop()
                self.narrow.pop()
                self.emit(T.DEDENT, "", line_span)
            if width != self.indents[-1]:
                self.error("E005", "inconsistent indentation: this line does not line up with any "
                           "enclosing block", line_span)
                self.indents.append(width)
                self.narrow.append(narrow)
        return True

    # ------------------------------------------------------------------ operators
    def lex_operator(self) -> None:
        line, col = self.here()
        op = self.src[self.pos:self.pos + 2]
        if op in OPERATORS_2 or (op := op[:1]) in OPERATORS_1:
            self.skip(len(op))
            span = self.span_from(line, col)
            if op in OPENERS:
                self.brackets.append((op, span))
            elif op in CLOSERS:
                if self.brackets and OPENERS[self.brackets[-1][0]] == op:
                    self.brackets.pop()
                else:
                    self.error("E004", f"unexpected '{op}': nothing to close", span)
                    return
            self.emit(T.OP, op, span)
            return
        ch = self.advance()
        hint = " (names use ASCII letters, digits, '_' and '-')" if ch.isalnum() else ""
        self.error("E004", f"unexpected character {ch!r}{hint}", self.span_from(line, col))

    # ------------------------------------------------------------------ discretion
    def lex_discretion(self) -> None:
        line, col = self.here()
        if self.src.startswith("***", self.pos):
            self.advance(3)
            end = self.src.find("***", self.pos)
            if end < 0:
                self.error("E005", "unterminated '***' discretion block (add a closing '***')",
                           Span(line, col, line, col + 3))
                self.unfinished = True
                self.advance(len(self.src) - self.pos)
                self.emit(T.DISCRETION, "", self.span_from(line, col), multiline=True)
                return
            text = self.src[self.pos:end]
            self.advance(end - self.pos + 3)
            self.emit(T.DISCRETION, _dedent_block(text), self.span_from(line, col),
                      multiline="\n" in text)
            return
        self.advance(2)
        newline = self.src.find("\n", self.pos)
        newline = len(self.src) if newline < 0 else newline
        end = self.src.find("**", self.pos, newline)
        if end < 0 and self.lex_discretion_lines(line, col):
            return
        if end < 0:
            self.error("E005", "unterminated '**' condition (close it with '**' on the same line)",
                       Span(line, col, line, col + 2))
            self.unfinished = True  # text after this one may hold its close
            text = self.src[self.pos:newline]
            self.advance(newline - self.pos)
        else:
            text = self.src[self.pos:end]
            self.advance(end - self.pos + 2)
        self.emit(T.DISCRETION, text.strip(), self.span_from(line, col))

    def lex_discretion_lines(self, line: int, col: int) -> bool:
        """A ``**…**`` condition or prompt over several lines (newer syntax, closing before
        the next blank line), read as the same text on one line: OpenProse 0.8's ``**…**``
        stays on its line, and the line breaks carry no meaning. False: no close."""
        stop = PARAGRAPH_END_RE.search(self.src, self.pos)
        end = self.src.find("**", self.pos, stop.start() if stop else len(self.src))
        if end < 0:
            return False
        text = " ".join(self.src[self.pos:end].split())
        self.advance(end - self.pos + 2)
        self.warn("W020", "a '**...**' text over several lines is newer syntax, read as one "
                  "line (in OpenProse 0.8 '**...**' closes on its line; '***' blocks span lines)",
                  Span(line, col, line, col + 2))
        self.emit(T.DISCRETION, text, self.span_from(line, col))
        return True

    # ------------------------------------------------------------------ strings
    def lex_string(self) -> None:
        line, col = self.here()
        triple = self.src.startswith('"""', self.pos)
        self.advance(3 if triple else 1)
        parts: list[str | Interpolation] = []
        buf: list[str] = []
        raw_start = self.pos
        terminated = False
        while self.pos < len(self.src):
            ch = self.src[self.pos]
            if ch == '"':
                if not triple:
                    self.advance()
                    terminated = True
                    break
                run = len(QUOTES_RE.match(self.src, self.pos).group())  # type: ignore[union-attr]
                if run >= 3:
                    buf.append('"' * (run - 3))
                    self.advance(run)
                    terminated = True
                    break
                buf.append(self.advance(run))
            elif ch == "\n" and not triple:
                break
            elif ch == "\\":
                esc_line, esc_col = self.here()
                nxt = self.src[self.pos + 1:self.pos + 2]
                if nxt in ESCAPES and nxt:
                    buf.append(ESCAPES[nxt])
                    self.advance(2)
                else:
                    self.advance(1)
                    shown = "\\" + nxt if nxt and nxt != "\n" else "\\"
                    where = Span(esc_line, esc_col, esc_line, esc_col + len(shown))
                    if triple:  # kept as written: prompts carry shell continuation lines
                        what = "a backslash at the end of a line" if shown == "\\" else \
                            f"unknown escape '{shown}'"
                        self.warn("W019", f"{what} is kept as written in a triple-quoted string",
                                  where)
                    else:
                        self.error("E002", f"unknown escape '{shown}' (valid: \\\\ \\\" \\n "
                                   f"\\t \\{{)", where)
                    buf.append("\\")
            elif ch == "{":
                m = INTERPOLATION_RE.match(self.src, self.pos)
                if m:
                    if buf:
                        parts.append("".join(buf))
                        buf = []
                    i_line, i_col = self.here()
                    self.advance(len(m.group()))
                    parts.append(Interpolation(tuple(m.group(1).split(".")),
                                               span=self.span_from(i_line, i_col)))
                else:
                    buf.append(self.advance())
            else:
                chunk = (TRIPLE_TEXT_RE if triple else TEXT_RE).match(self.src, self.pos)
                buf.append(self.advance(len(chunk.group()) if chunk else 1))
        if buf:
            parts.append("".join(buf))
        span = self.span_from(line, col)
        if not terminated:
            self.unfinished |= triple
            what = 'triple-quoted string (close it with """)' if triple else \
                'string (close it with " on the same line, or use """ for text over several lines)'
            self.error("E001", f"unterminated {what}",
                       Span(line, col, line, col + (3 if triple else 1)))
        raw = self.src[raw_start:self.pos]
        self.emit(T.STRING, raw, span, parts=tuple(_merge(parts)), triple=triple)


def _order(a: int, b: int) -> int:
    return (a > b) - (a < b)


def _merge(parts: list[str | Interpolation]) -> list[str | Interpolation]:
    out: list[str | Interpolation] = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        elif part != "":
            out.append(part)
    return out


def _dedent_block(text: str) -> str:
    """The text of a ``***`` block: surrounding blank lines dropped, common indent removed."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    indents = [len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()]
    cut = min(indents, default=0)
    return "\n".join(ln[cut:].rstrip() for ln in lines)


def tokenize(source: str, path: str | None = None) -> tuple[list[Token], list[Diagnostic]]:
    lexer = Lexer(source, path)
    tokens = lexer.tokenize()
    return tokens, lexer.diagnostics
