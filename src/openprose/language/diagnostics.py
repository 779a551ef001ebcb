"""Coded diagnostics: what the front end reports about a program."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from openprose.errors import OpenProseError
from openprose.language.nodes import Span
from openprose.terminal import blanked


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem at one place. ``code`` is E0xx/W0xx (see docs/diagnostics.md)."""

    code: str
    message: str
    span: Span
    severity: Severity
    file: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def to_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "code": self.code,
            "severity": self.severity.value,
            "line": self.span.line,
            "column": self.span.column,
            "end_line": self.span.end_line,
            "end_column": self.span.end_column,
            "message": self.message,
        }

    def format(self, source: str | None = None) -> str:
        """``path:line:col: CODE message``, then the source line and a caret."""
        where = f"{self.file or '<input>'}:{self.span.line}:{self.span.column}"
        text = f"{where}: {self.code} {self.message}"
        if source is None:
            return text
        lines = source.splitlines()
        if not 1 <= self.span.line <= len(lines):
            return text
        line = blanked(lines[self.span.line - 1].expandtabs(1))  # columns kept
        width = 1
        if self.span.end_line == self.span.line:
            width = max(1, self.span.end_column - self.span.column)
        width = min(width, max(1, len(line) - self.span.column + 1))
        line, column = _clip(line, self.span.column - 1)
        width = max(1, min(width, len(line) - column))
        caret = " " * column + "^" + "~" * (width - 1)
        return f"{text}\n    {line}\n    {caret}"


EXCERPT = 120  # the most characters of a source line shown under a diagnostic


def _clip(line: str, column: int) -> tuple[str, int]:
    """A window of a long line around ``column`` (0-based), '...' marking what is cut; and
    the column's place in it."""
    if len(line) <= EXCERPT:
        return line, column
    start = max(0, column - EXCERPT // 3)
    end = min(len(line), start + EXCERPT)
    start = max(0, end - EXCERPT)
    head = "..." if start else ""
    tail = "..." if end < len(line) else ""
    return head + line[start:end] + tail, column - start + len(head)


class CompileError(OpenProseError):
    """Raised by :func:`openprose.language.compile_or_raise` when a program has errors."""

    def __init__(self, diagnostics: list[Diagnostic], source: str | None = None) -> None:
        self.diagnostics = diagnostics
        self.source = source
        errors = [d for d in diagnostics if d.is_error]
        super().__init__("\n".join(d.format(source) for d in errors) or "compile failed")
