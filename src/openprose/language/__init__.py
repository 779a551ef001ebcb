"""The OpenProse front end: source text → tokens → AST → validated program.

``compile(source, path)`` is the facade the engine, the MCP server and the CLI use.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from openprose.language import nodes
from openprose.language.diagnostics import CompileError, Diagnostic, Severity

if TYPE_CHECKING:
    from openprose.language.parser import Parses

#: The deepest syntax tree ``compile`` accepts; every later stage handles this depth within
#: Python's default recursion limit (tests/language/test_depth.py checks each at the limit).
MAX_TREE_DEPTH = 256
#: The most diagnostics reported for one file; the rest are counted (``omitted``).
MAX_DIAGNOSTICS = 100
#: What compile reads of a parse: tree, the parser's diagnostics, the first node nested too
#: deeply, the nodes that bind names (see ``_parsed``)
Parsed = tuple[nodes.Program | None, tuple[Diagnostic, ...], nodes.Node | None,
               tuple[nodes.Node, ...] | None]
#: Program texts whose parse is kept: starting a run compiles its program in several places
#: (the server's outline, the engine, state.md), and parsing is most of compile's time.
PARSED_KEPT = 8


@dataclass
class CompileResult:
    """The parsed program (``None`` only when nothing could be parsed) and its diagnostics."""

    program: nodes.Program | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: str = ""
    path: str | None = None
    #: Diagnostics left out beyond :data:`MAX_DIAGNOSTICS` (errors are kept before warnings).
    omitted: int = 0
    #: the nodes that bind names (:func:`nodes.declaring`), found with the parse: an editor
    #: offers their names without walking a long program again
    declaring: tuple[nodes.Node, ...] = ()

    @property
    def omitted_note(self) -> str | None:
        """``"... and N more diagnostics in FILE"`` when some were left out."""
        if not self.omitted:
            return None
        return f"... and {self.omitted} more diagnostic(s) in {self.path or '<input>'}"

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if not d.is_error]

    @property
    def ok(self) -> bool:
        return self.program is not None and not self.errors


def compile(source: str, path: str | None = None, *, root: Path | None = None,
            parses: Parses | None = None) -> CompileResult:
    """Parse and validate ``source``; never raises for bad input, reports diagnostics instead.
    The parse of a recent text is reused (the tree is immutable); validation always runs, as
    it reads the local files the program imports. ``root``: the project the program belongs
    to — a relative ``path`` is inside it, and local imports resolve from the program's own
    place there and may not leave it (E034); without one they resolve from the working
    directory (the command line's files). ``parses``: the parses kept from earlier versions of
    this text (an editor's), reused for its unchanged statements (the tree is then the
    latest version's only: compiling the next moves its statements in place)."""
    from openprose.language.validator import validate

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 6000))  # room for the parser's own nesting limit
    try:
        program, parsed, deep, declaring = _parsed(source) if parses is None else \
            parses.parse(source)
        diagnostics = [replace(d, file=path) for d in parsed]
        if program is not None:
            if deep is not None:
                too_deep = _too_deep(deep, path)
                kept = _capped([*diagnostics, too_deep])
                return CompileResult(None, kept, source, path, len(diagnostics) + 1 - len(kept))
            diagnostics.extend(validate(program, path, root, declaring, *(
                (parses.keys, parses.checked) if parses is not None else ())))
    except RecursionError:  # a last line of defence; the parser bounds nesting itself
        span = nodes.Span(1, 1, 1, 1)
        message = "program is nested too deeply to process"
        return CompileResult(None, [Diagnostic("E005", message, span, Severity.ERROR, path)],
                             source, path)
    finally:
        sys.setrecursionlimit(limit)
    kept = _capped(diagnostics)
    return CompileResult(program, kept, source, path, len(diagnostics) - len(kept),
                         declaring or ())


def syntax_tree(source: str) -> nodes.Program | None:
    """The tree :func:`compile` would give for ``source`` (the same object while its parse is
    kept), without validating it: nothing is read from disk, for readers that only place
    things in the program's text. ``None`` where :func:`compile` gives none."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 6000))  # as compile: room for the parser's nesting
    try:
        program, _, deep, _ = _parsed(source)
        return None if deep is not None else program
    except RecursionError:
        return None
    finally:
        sys.setrecursionlimit(limit)


@lru_cache(maxsize=PARSED_KEPT)
def _parsed(source: str) -> Parsed:
    """The syntax tree of ``source``, the parser's diagnostics (for no file: the caller
    names its own), the first node nested too deeply (see :func:`_too_deep`) and the nodes
    that bind names (:func:`nodes.declaring`)."""
    from openprose.language.parser import parse

    program, diagnostics = parse(source, None)
    if program is None:
        return None, tuple(diagnostics), None, None
    return (program, tuple(diagnostics), nodes.deeper_than(MAX_TREE_DEPTH, program.body, 2),
            nodes.declaring(program.body))


def _capped(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """At most :data:`MAX_DIAGNOSTICS`, errors first, in source order."""
    if len(diagnostics) > MAX_DIAGNOSTICS:
        errors = [d for d in diagnostics if d.is_error]
        warnings = [d for d in diagnostics if not d.is_error]
        diagnostics = errors[:MAX_DIAGNOSTICS] + warnings[:max(0, MAX_DIAGNOSTICS - len(errors))]
    return sorted(diagnostics, key=lambda d: (d.span.line, d.span.column, d.code))


def _too_deep(node: nodes.Node, path: str | None) -> Diagnostic:
    """The error for ``node``, nested deeper than :data:`MAX_TREE_DEPTH` (a long ``a + b +
    ...`` chain or ``.a.b...`` member chain nests one level per term): refused so that every
    later pass (validation, canonical form, planning, the interpreter) stays within Python's
    recursion limit."""
    message = (f"this expression or block is nested more than {MAX_TREE_DEPTH} levels "
               "deep (a chain of operators or '.' members counts one level per term); "
               "split it with intermediate 'let' bindings or blocks")
    return Diagnostic("E005", message, node.span, Severity.ERROR, path)


def compile_or_raise(source: str, path: str | None = None) -> nodes.Program:
    """Like :func:`compile` but raise :class:`CompileError` when there are errors."""
    result = compile(source, path)
    if not result.ok:
        raise CompileError(result.diagnostics, source)
    assert result.program is not None
    return result.program


__all__ = [
    "MAX_DIAGNOSTICS",
    "MAX_TREE_DEPTH",
    "CompileError",
    "CompileResult",
    "Diagnostic",
    "Severity",
    "compile",
    "compile_or_raise",
    "nodes",
    "syntax_tree",
]
