"""The OpenProse front end: source text → tokens → AST → validated program.

``compile(source, path)`` is the facade the engine, the MCP server and the CLI use.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from openprose.language import nodes
from openprose.language.diagnostics import CompileError, Diagnostic, Severity


@dataclass
class CompileResult:
    """The parsed program (``None`` only when nothing could be parsed) and its diagnostics."""

    program: nodes.Program | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: str = ""
    path: str | None = None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if not d.is_error]

    @property
    def ok(self) -> bool:
        return self.program is not None and not self.errors


def compile(source: str, path: str | None = None) -> CompileResult:
    """Parse and validate ``source``; never raises for bad input, reports diagnostics instead."""
    from openprose.language.parser import parse
    from openprose.language.validator import validate

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 6000))  # room for the parser's own nesting limit
    try:
        program, diagnostics = parse(source, path)
        if program is not None:
            diagnostics.extend(validate(program, path))
    except RecursionError:  # a last line of defence; the parser bounds nesting itself
        span = nodes.Span(1, 1, 1, 1)
        message = "program is nested too deeply to process"
        return CompileResult(None, [Diagnostic("E005", message, span, Severity.ERROR, path)],
                             source, path)
    finally:
        sys.setrecursionlimit(limit)
    diagnostics.sort(key=lambda d: (d.span.line, d.span.column, d.code))
    return CompileResult(program, diagnostics, source, path)


def compile_or_raise(source: str, path: str | None = None) -> nodes.Program:
    """Like :func:`compile` but raise :class:`CompileError` when there are errors."""
    result = compile(source, path)
    if not result.ok:
        raise CompileError(result.diagnostics, source)
    assert result.program is not None
    return result.program


__all__ = [
    "CompileError",
    "CompileResult",
    "Diagnostic",
    "Severity",
    "compile",
    "compile_or_raise",
    "nodes",
]
