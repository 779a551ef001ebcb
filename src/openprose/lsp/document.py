"""One open ``.prose`` text as the server sees it: its compile result and its analysis,
with positions converted between the front end's spans and the editor's ranges."""

from __future__ import annotations

import bisect
import gc
import operator
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from lsprotocol import types as lsp

from openprose.errors import OpenProseError
from openprose.language import CompileResult, compile
from openprose.language import nodes as n
from openprose.language.analysis import Analysis, Symbol, analyze, analyze_part
from openprose.language.diagnostics import Diagnostic, Severity
from openprose.language.files import read_program_file
from openprose.language.lexer import Lexer, Token
from openprose.language.parser import Parses, Piece
from openprose.language.validator import local_import

#: the most errors of an imported program shown as related information on its ``use`` line
IMPORTED_SHOWN = 5
HINT = re.compile(r"\(([^()]*)\)$")
_START = operator.attrgetter("span.line")  # where a statement starts
#: the new objects after which the cycle collector looks at the youngest (see settle)
YOUNG = 10_000


@dataclass(frozen=True, slots=True)
class Import:
    """A ``use`` of a local program: where its file is, and its errors (None: unreadable)."""

    span: n.Span
    path: Path
    result: CompileResult | None


class Document:
    """The compiled text of one document. ``parses``: the parses of its earlier versions,
    whose unchanged statements are not read again. ``analysis`` (made when first asked for:
    diagnostics need none) is None when nothing could be parsed (the server then keeps
    answering from the last text that could)."""

    def __init__(self, uri: str, path: str | None, source: str, version: int | None,
                 parses: Parses | None = None) -> None:
        self.uri, self.path, self.source, self.version = uri, path, source, version
        self.parses = parses
        if parses is not None and not parses.keys:  # nothing kept: the text just opened
            self.result = _whole(source, path, parses)
        else:
            self.result = compile(source, path, parses=parses)
        self.cut = parses.cut if parses is not None else None

    @cached_property
    def pieces(self) -> list[tuple[int, object, Piece, int]]:
        """This text's pieces as its ``parses`` cut it (none without), each with its first
        line, its key and how many top-level statements come before it."""
        if self.cut is None:
            return []
        _, _, lines, cut, _ = self.cut
        return [(lines[k], key, piece, count) for k, key, piece, count in cut]

    @cached_property
    def analysis(self) -> Analysis | None:
        if self.result.program is None:
            return None
        return analyze(self.result.program, self.text)

    @cached_property
    def lines(self) -> list[str]:
        """The lines of the text (split when a position is first converted: a change
        without diagnostics needs none)."""
        return self.text.split("\n")

    @cached_property
    def text(self) -> str:
        """The source as the lexer reads it: spans count lines after this normalization."""
        return self.source.replace("\r\n", "\n").replace("\r", "\n")

    def statement_at(self, line: int) -> int:
        """The index of the top-level statement ``line`` is in (the first before any), found
        by halves: a question about one place reads the lines of a few statements, not of
        every one of a long program's (each line read adds its piece's shift)."""
        program = self.result.program
        body = program.body if program is not None else ()
        return max(0, bisect.bisect_right(body, line, key=_START) - 1)

    # ------------------------------------------------------------------ positions
    def range(self, span: n.Span) -> lsp.Range:
        """The editor's range (0-based, UTF-16 units) of a 1-based code-point span."""
        return lsp.Range(self.position(span.line, span.column),
                         self.position(span.end_line, span.end_column))

    def position(self, line: int, column: int) -> lsp.Position:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return lsp.Position(max(0, line - 1), utf16(text[:max(0, column - 1)]))

    def at(self, position: lsp.Position) -> tuple[int, int]:
        """The 1-based line and code-point column of an editor position."""
        text = self.lines[position.line] if position.line < len(self.lines) else ""
        units = column = 0
        while column < len(text) and units < position.character:
            units += 2 if ord(text[column]) > 0xFFFF else 1
            column += 1
        return position.line + 1, column + 1

    def around(self, position: lsp.Position) -> tuple[Analysis, Symbol | None] | None:
        """The name written at ``position`` and an analysis with every place it is defined
        or read; None when nothing could be parsed. The whole analysis when made already,
        else (a long program's takes seconds) that of the statement there, and when the
        name is the program's (not a block's parameter or a construct's variable), of the
        statements whose text has that word too: wherever the name is written, it is."""
        program = self.result.program
        if program is None:
            return None
        line, column = self.at(position)
        if "analysis" in self.__dict__ or not program.body:
            whole = self.analysis
            assert whole is not None
            return whole, whole.symbol_at(line, column)
        i = self.statement_at(line)
        here = analyze_part(program, self.text, [i])
        symbol = here.symbol_at(line, column)
        if symbol is None:
            return here, None
        found = here.definitions_of(symbol)
        if found and all(d.scope is not None for d in found):
            return here, symbol
        return analyze_part(program, self.text, {i, *self.statements_with(symbol.name)}), \
            symbol

    def statements_with(self, word: str) -> set[int]:
        """The top-level statements (by index) whose text has ``word`` as a whole name."""
        found: set[int] = set()
        line, at = 1, 0
        for match in re.finditer(rf"(?<![\w-]){re.escape(word)}(?![\w-])", self.text):
            line += self.text.count("\n", at, match.start())
            at = match.start()
            found.add(self.statement_at(line))
        return found

    # ------------------------------------------------------------------ imports
    @cached_property
    def imports(self) -> list[Import]:
        """The local programs this one imports, each compiled (for its errors)."""
        program = self.result.program
        out: list[Import] = []
        for use in program.uses if program is not None else ():
            target = use.path.text
            if not target.endswith(".prose") or target.startswith(("http://", "https://")):
                continue
            try:
                where = local_import(target, self.path, None)
                text = read_program_file(where)
            except (OpenProseError, OSError):
                out.append(Import(use.span, Path(target), None))
                continue
            out.append(Import(use.span, where, compile(text, str(where))))
        return out

    # ------------------------------------------------------------------ tokens
    @cached_property
    def lexed(self) -> tuple[list[Token], list[n.Span]]:
        """The tokens and comments of the text (for highlighting and formatting)."""
        if self.parses is not None:
            return self.parses.lexed(self.source)
        lexer = Lexer(self.source)
        return lexer.tokenize(), lexer.comments

    # ------------------------------------------------------------------ diagnostics
    def diagnostics(self) -> list[lsp.Diagnostic]:
        out = [self.diagnostic(d) for d in self.result.diagnostics]
        for imp in self.imports:
            out.extend(self.import_diagnostics(imp))
        return out

    def diagnostic(self, d: Diagnostic) -> lsp.Diagnostic:
        hint = HINT.search(d.message)
        related = None
        if hint and self.path:
            related = [lsp.DiagnosticRelatedInformation(
                lsp.Location(self.uri, self.range(d.span)), hint.group(1))]
        return lsp.Diagnostic(self.range(d.span), d.message, severity(d.severity), d.code,
                              source="openprose", related_information=related)

    def import_diagnostics(self, imp: Import) -> list[lsp.Diagnostic]:
        """The errors of an imported program, as one diagnostic on its ``use`` line."""
        where = self.range(imp.span)
        if imp.result is None:
            return [lsp.Diagnostic(where, f"cannot read the imported program {imp.path}",
                                   lsp.DiagnosticSeverity.Error, "E012", source="openprose")]
        errors = imp.result.errors
        if not errors:
            return []
        first = errors[0]
        uri = imp.path.resolve().as_uri()
        related = [lsp.DiagnosticRelatedInformation(
            lsp.Location(uri, Document.plain_range(e.span)), f"{e.code} {e.message}")
            for e in errors[:IMPORTED_SHOWN]]
        message = (f"the imported program {imp.path.name} has {len(errors)} error(s); "
                   f"first, at {first.span.line}:{first.span.column}: {first.code} "
                   f"{first.message}")
        return [lsp.Diagnostic(where, message, lsp.DiagnosticSeverity.Error, first.code,
                               source="openprose", related_information=related)]

    @staticmethod
    def plain_range(span: n.Span) -> lsp.Range:
        """A range in a file not open here (columns counted as code points)."""
        return lsp.Range(lsp.Position(span.line - 1, span.column - 1),
                         lsp.Position(span.end_line - 1, span.end_column - 1))


def _whole(source: str, path: str | None, parses: Parses) -> CompileResult:
    """The first compile of a text, the cycle collector paused meanwhile and what it built
    then frozen: it builds a tree of millions of objects (1 MB) and no cycles, so each
    collection while it grows walks what is long-lived and finds nothing (a third of an
    open's CPU time, 2 s for 1 MB), and one after it would walk the whole tree (0.5 s).
    What came before is collected first (the young generations: a few ms)."""
    enabled = gc.isenabled()
    gc.collect(1)
    gc.disable()
    try:
        return compile(source, path, parses=parses)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def settle(opened: bool = False) -> None:
    """After a compile is answered: the trees kept for the next change are large and
    long-lived, so collect what the compile left, then keep the cycle collector from walking
    the rest at every later one (it doubled a change's time on a 1 MB file; objects let go
    are still freed, by their reference counts). After a file is ``opened`` only the young
    generations are collected: a full collection then walks the whole new tree (0.8 s on a
    1 MB file, finding nothing: an open's compile leaves no cycles), and the first change
    waited for it. After a change it walks only what the change made, and frees the cycles
    a change or a request may leave (a few hundred objects each). The youngest generation is
    then collected only after :data:`YOUNG` new objects, more than a change leaves (about
    2,000 on a 1 MB file): collected every 700, a change's first collection walked the long
    lists of the text's pieces it had just built (4 to 9 ms of its time)."""
    gc.collect(1 if opened else 2)
    gc.freeze()
    gc.set_threshold(YOUNG, *gc.get_threshold()[1:])


def utf16(text: str) -> int:
    """How many UTF-16 units ``text`` takes (the editor's column unit)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def severity(level: Severity) -> lsp.DiagnosticSeverity:
    return lsp.DiagnosticSeverity.Error if level is Severity.ERROR else \
        lsp.DiagnosticSeverity.Warning
