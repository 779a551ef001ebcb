"""What the server answers, each read from a :class:`~openprose.lsp.document.Document`'s
compile result and analysis (never a walk of its own over the syntax tree)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types as lsp

from openprose.errors import OpenProseError
from openprose.language import nodes as n
from openprose.language.analysis import (
    BINDING_KINDS,
    SESSION_KINDS,
    Analysis,
    Symbol,
    analyze_part,
)
from openprose.language.canonical import NotFormatted, format_source
from openprose.language.lexer import T, Token
from openprose.language.parser import STATEMENT_KEYWORDS
from openprose.language.validator import (
    AGENT_PROPERTIES,
    BACKOFFS,
    MODELS,
    SESSION_PROPERTIES,
)
from openprose.lsp.document import Document, utf16

NAME = r"[A-Za-z_][\w-]*"
#: allowed values offered after ``property:`` (``persist`` also takes a quoted path)
VALUES = {"model": sorted(MODELS), "backoff": sorted(BACKOFFS),
          "persist": ["true", "project", "user"]}
KEYWORDS = STATEMENT_KEYWORDS | {"as", "in", "and", "or", "not", "elif", "else", "catch",
                                 "finally", "option", "true", "false", "null", "until",
                                 "while", "from", "map", "filter", "pmap", "reduce", "is",
                                 "assert"}
TOKEN_TYPES = ["keyword", "variable", "parameter", "function", "class", "namespace",
               "property", "string", "number", "comment", "macro"]
TOKEN_INDEX = {kind: i for i, kind in enumerate(TOKEN_TYPES)}
TOKEN_MODIFIERS = ["declaration"]
LEGEND = lsp.SemanticTokensLegend(TOKEN_TYPES, TOKEN_MODIFIERS)
#: a symbol's kind → its semantic token type
SYMBOL_TOKEN = {"binding": "variable", "variable": "variable", "parameter": "parameter",
                "block": "function", "agent": "class", "program": "namespace"}
VARIABLE_OF = {"for": "loop variable", "parallel_for": "loop variable",
               "repeat": "loop index", "loop": "loop index", "pipeline": "pipeline variable",
               "try": "error variable of 'catch'"}


class Refused(OpenProseError):
    """A request the server declines, with the reason the editor shows."""


# ---------------------------------------------------------------------- hover

def hover(doc: Document, position: lsp.Position) -> lsp.Hover | None:
    around = doc.around(position)
    if around is None:
        return None
    analysis, symbol = around
    text = describe(doc, analysis, symbol) if symbol else session_hover(doc, analysis,
                                                                          position)
    if not text:
        return None
    span = symbol.span if symbol else None
    return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text),
                     doc.range(span) if span else None)


def describe(doc: Document, analysis: Analysis, symbol: Symbol) -> str | None:
    found = analysis.definitions_of(symbol)
    if not found:
        return None
    first = found[0]
    name = symbol.name
    if first.kind == "agent":
        agent = analysis.agents.get(name)
        if agent is None:
            return None
        lines = [f"**agent** `{name}` (line {first.span.line})",
                 f"- model: {agent.model or 'default'}",
                 f"- persist: {agent.persist or 'no'}"]
        if agent.prompt:
            lines.append(f"- prompt: {_short(agent.prompt)}")
        return "\n".join(lines)
    if first.kind == "block":
        block = analysis.blocks.get(name)
        params = ", ".join(block.params) if block else ""
        return f"**block** `{name}({params})` (line {first.span.line})"
    if first.kind == "program":
        stmt = analysis.statements.get(first.statement)
        return f"**program** `{name}`: `{stmt.source.strip() if stmt else ''}`"
    if first.kind == "parameter":
        owner = analysis.statements[first.statement].binds
        return f"**parameter** `{name}` of block `{owner}` (line {first.span.line})"
    if first.kind == "variable":
        construct = analysis.statements[first.statement].kind
        return (f"**{VARIABLE_OF.get(construct, 'variable')}** `{name}`, "
                f"bound on line {first.span.line}")
    places = []
    for definition in found:
        stmt = analysis.statements.get(definition.statement)
        how = stmt.binding_kind or stmt.kind if stmt else "binding"
        what = f" by a {stmt.kind}" if stmt and stmt.kind not in BINDING_KINDS else ""
        places.append(f"- `{how}` on line {definition.span.line}{what}")
    return f"**binding** `{name}`\n" + "\n".join(places)


def session_hover(doc: Document, analysis: Analysis, position: lsp.Position) -> str | None:
    """On a ``session``/``resume`` keyword: the agent it uses and its context names."""
    line, column = doc.at(position)
    text = doc.lines[line - 1] if line <= len(doc.lines) else ""
    word = re.search(r"\b(session|resume)\b", text)
    if not word or not word.start() <= column - 1 <= word.end():
        return None
    for stmt in analysis.statements.values():
        if stmt.line == line and stmt.kind in SESSION_KINDS:
            session = _session(stmt.node)
            lines = [f"**{stmt.kind}**" + (f" `{stmt.binds}`" if stmt.binds else ""),
                     f"- agent: {('`' + stmt.agent + '`') if stmt.agent else 'none'}"]
            context = session.property("context") if session else None
            if context is not None:
                names = [x.id for x in n.walk(context.value) if isinstance(x, n.Name)]
                lines.append(f"- context: {', '.join(names) or 'none'}")
            return "\n".join(lines)
    return None


def _session(node: n.Node | None) -> n.Session | None:
    """The session a session statement runs (``let x = session ...`` and the like)."""
    for _ in range(3):
        if isinstance(node, n.Session) or node is None:
            return node
        node = getattr(node, "value", None) or getattr(node, "expr", None) or \
            getattr(node, "body", None)
    return None


def _short(text: str, most: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most] + "…"


# ---------------------------------------------------------------------- navigation

def definition(doc: Document, position: lsp.Position) -> list[lsp.Location]:
    analysis, symbol = doc.around(position) or (None, None)
    if symbol is None or analysis is None:
        return []
    out = []
    for found in analysis.definitions_of(symbol):
        imported = _imported_file(doc, analysis, found)
        if imported is not None and (symbol.defines or found.kind == "program"):
            out.append(lsp.Location(imported.resolve().as_uri(),
                                    lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0))))
            continue
        out.append(lsp.Location(doc.uri, doc.range(found.span)))
    return out


def _imported_file(doc: Document, analysis: Analysis, symbol: Symbol) -> Path | None:
    """The local file a program's alias names, when it is one."""
    if symbol.kind != "program":
        return None
    stmt = analysis.statements.get(symbol.statement)
    if stmt is None:
        return None
    return next((imp.path for imp in doc.imports
                 if imp.span.line == stmt.line and imp.result is not None), None)


def references(doc: Document, position: lsp.Position, declaration: bool
               ) -> list[lsp.Location]:
    analysis, symbol = doc.around(position) or (None, None)
    if symbol is None or analysis is None:
        return []
    return [lsp.Location(doc.uri, doc.range(s.span)) for s in analysis.references_of(symbol)
            if declaration or not s.defines]


def highlights(doc: Document, position: lsp.Position) -> list[lsp.DocumentHighlight]:
    """Every place in the text the name at ``position`` is defined (write) or read."""
    analysis, symbol = doc.around(position) or (None, None)
    if symbol is None or analysis is None:
        return []
    return [lsp.DocumentHighlight(doc.range(s.span), lsp.DocumentHighlightKind.Write
                                  if s.defines else lsp.DocumentHighlightKind.Read)
            for s in analysis.references_of(symbol)]


# ---------------------------------------------------------------------- completion

def completion(doc: Document, known: Document | None, position: lsp.Position
               ) -> list[lsp.CompletionItem]:
    """What fits at ``position`` in ``doc``, the names read from ``known`` (``doc``, or
    the last version that could be parsed)."""
    line, column = doc.at(position)
    text = doc.lines[line - 1][:column - 1] if line <= len(doc.lines) else ""
    program = known.result.program if known is not None else None
    if known is None or program is None:
        return []
    if re.search(rf"\b(session|resume)(\s+{NAME})?:\s*[\w-]*$", text):
        return _items(sorted({s.name for s in program.body if isinstance(s, n.AgentDef)}),
                      lsp.CompletionItemKind.Class, "agent")
    if re.search(r"\bdo\s+[\w-]*$", text):
        return _items(sorted({s.name for s in program.body if isinstance(s, n.BlockDef)}),
                      lsp.CompletionItemKind.Function, "block")
    if re.search(r'"[^"]*\{[\w-]*$', text) or re.search(r"^\s*context:.*?[\w-]*$", text):
        around = known.around(lsp.Position(line - 1, 0))
        names = {name for node in known.result.declaring for name in n.bound_by(node)}
        if around is not None:
            names.update(visible(around[0], line, column))
        return _items(sorted(names), lsp.CompletionItemKind.Variable, "binding")
    value = re.match(r"^\s*([\w-]+):\s*[\w-]*$", text)
    if value and value.group(1) in VALUES:
        return _items(VALUES[value.group(1)], lsp.CompletionItemKind.EnumMember,
                      value.group(1))
    if re.fullmatch(r"\s+[\w-]*", text):
        owner = _owner(doc, line)
        if owner is not None:
            names = sorted(AGENT_PROPERTIES if owner == "agent" else SESSION_PROPERTIES)
            return [lsp.CompletionItem(name, kind=lsp.CompletionItemKind.Property,
                                       detail=f"{owner} property", insert_text=f"{name}: ")
                    for name in names]
    return []


def _items(names: list[str], kind: lsp.CompletionItemKind, detail: str
           ) -> list[lsp.CompletionItem]:
    return [lsp.CompletionItem(name, kind=kind, detail=detail) for name in names]


def visible(analysis: Analysis, line: int, column: int) -> list[str]:
    """The names a value may read at ``line:column`` in ``analysis``: its bindings (visible
    throughout the program) and the parameters and variables of the constructs around it."""
    names = set()
    for s in analysis.symbols:
        if not s.defines or s.kind not in ("binding", "parameter", "variable"):
            continue
        if s.scope is None or (s.scope.line, s.scope.column) <= (line, column) <= \
                (s.scope.end_line, s.scope.end_column):
            names.add(s.name)
    return sorted(names)


def _owner(doc: Document, line: int) -> str | None:
    """``agent`` or ``session`` when ``line`` sits in the property block under one."""
    indent = len(doc.lines[line - 1]) - len(doc.lines[line - 1].lstrip())
    for above in range(line - 2, -1, -1):
        text = doc.lines[above]
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        if len(text) - len(text.lstrip()) >= indent:
            if not re.match(r"^\s*[\w-]+:", text):
                return None
            continue
        if re.match(r"^\s*agent\s", text):
            return "agent"
        if re.search(r"\b(session|resume)\b", text):
            return "session"
        return None
    return None


# ---------------------------------------------------------------------- outline

SYMBOL_KINDS = {"agent": lsp.SymbolKind.Class, "block": lsp.SymbolKind.Function,
                "input": lsp.SymbolKind.Field, "output": lsp.SymbolKind.Property}


def document_symbols(doc: Document) -> list[lsp.DocumentSymbol]:
    """Agents, blocks, inputs, outputs and the top-level bindings, in source order."""
    analysis = doc.analysis
    if analysis is None:
        return []
    defined = {(s.statement, s.name): s for s in analysis.symbols if s.defines}
    out = []
    for stmt in analysis.statements.values():
        if stmt.block is not None or stmt.parent is not None or not stmt.binds:
            continue
        kind = stmt.binding_kind or stmt.kind
        last = doc.lines[stmt.end_line - 1] if stmt.end_line <= len(doc.lines) else ""
        whole = lsp.Range(lsp.Position(stmt.line - 1, 0),
                          lsp.Position(stmt.end_line - 1, len(last)))
        name = defined.get((stmt.id, stmt.binds))
        out.append(lsp.DocumentSymbol(
            stmt.binds, SYMBOL_KINDS.get(kind, lsp.SymbolKind.Variable), whole,
            doc.range(name.span) if name else whole, detail=kind))
    return out


def folding_ranges(doc: Document) -> list[lsp.FoldingRange]:
    """One range per statement over several lines."""
    if doc.analysis is None:
        return []
    starts: dict[int, int] = {}
    for stmt in doc.analysis.statements.values():
        if stmt.end_line > stmt.line:
            starts[stmt.line] = max(starts.get(stmt.line, 0), stmt.end_line)
    return [lsp.FoldingRange(start - 1, end - 1) for start, end in sorted(starts.items())]


# ---------------------------------------------------------------------- formatting

def formatting(doc: Document) -> list[lsp.TextEdit]:
    """The canonical form, comments kept in place, as one edit; refused (never a partial
    rewrite) when the text has errors or a comment whose place the form would not keep."""
    if not doc.result.ok or doc.result.program is None:
        raise Refused(f"not formatted: the program has {len(doc.result.errors)} error(s); "
                      "fix them first")
    try:
        text = format_source(doc.source, doc.result.program)
    except NotFormatted as refusal:
        raise Refused(str(refusal)) from None
    if text == doc.source:
        return []
    end = lsp.Position(len(doc.lines), 0)
    return [lsp.TextEdit(lsp.Range(lsp.Position(0, 0), end), text)]


# ---------------------------------------------------------------------- highlighting

@dataclass(frozen=True, slots=True)
class Coloured:
    """The semantic tokens of a piece of a text (its top-level statements, comments and all),
    delta-encoded from its first line's start (``data``), the same wherever an edit moved the
    piece. ``reads``: where in ``data`` the type of a name read is whose colour is what the
    program defines it as elsewhere (a binding or an imported program); ``defines``: the
    names the piece defines for the whole program, with their type, in order; ``last``: the
    line (from the first) and column of its last token."""

    data: list[int]
    reads: list[tuple[int, str]]
    defines: list[tuple[str, int]]
    last: tuple[int, int]


def _at(span: n.Span) -> tuple[int, int]:
    return span.line, span.column


def semantic_tokens(doc: Document) -> lsp.SemanticTokens:
    """Tokens for highlighting: names by what they name, keywords, properties, strings (an
    interpolation in one coloured as the name it reads), numbers, ``**discretion**`` and
    comments; a token over several lines is cut per line. With the document's parses, each
    piece's tokens are kept by the piece's key and computed, from one analysis of the pieces
    not kept, only for those; a name read whose colour another statement decides is resolved
    through the names the pieces define."""
    program = doc.result.program
    if doc.parses is None or program is None:
        tokens, comments = doc.lexed
        analysis = doc.analysis
        symbols = analysis.symbols if analysis is not None else ()
        return lsp.SemanticTokens(data=_colour(
            doc, tokens, comments, 1, analysis, {_at(s.span): s for s in symbols}, [],
            resolve=True).data)
    kept = doc.parses.coloured
    missing = [(piece, count) for _, key, piece, count in doc.pieces if key not in kept]
    if missing:
        if len(missing) == len(doc.pieces) or "analysis" in doc.__dict__:
            # every piece (the file just opened): the whole analysis, made once for the
            # outline and folding an editor asks for next too
            analysis = doc.analysis
        else:
            analysis = analyze_part(program, doc.text, (
                i for piece, count in missing
                for i in range(count, count + len(piece.statements))))
        assert analysis is not None
        by_start = {_at(s.span): s for s in analysis.symbols}
        defining = [s for s in analysis.symbols
                    if s.defines and s.scope is None and s.kind in ("binding", "program")]
        where = [s.span.line for s in defining]
        ends = [line for line, *_ in doc.pieces[1:]] + [len(doc.lines) + 1]
        for (line, key, piece, _), end in zip(doc.pieces, ends, strict=True):
            if key not in kept:
                defines = [(s.name, TOKEN_INDEX[SYMBOL_TOKEN[s.kind]]) for s in defining[
                    bisect.bisect_left(where, line):bisect.bisect_left(where, end)]]
                kept[key] = _colour(doc, piece.tokens, piece.comments, line, analysis,
                                    by_start, defines)
    if len(kept) > 2 * len(doc.pieces) + 64:
        doc.parses.coloured = kept = {key: kept[key] for _, key, _, _ in doc.pieces}
    pieces: list[tuple[int, Coloured]] = [(line, kept[key])  # type: ignore[misc]
                                          for line, key, _, _ in doc.pieces]
    defined: dict[str, int] = {}
    for _, coloured in pieces:
        for name, kind in coloured.defines:
            defined.setdefault(name, kind)
    variable = TOKEN_INDEX["variable"]
    data: list[int] = []
    previous_line, previous_start = 1, 0
    for line, coloured in pieces:
        if not coloured.data:
            continue
        base = len(data)
        data += coloured.data
        for at, name in coloured.reads:
            data[base + at] = defined.get(name, variable)
        first = line + coloured.data[0]
        data[base] = first - previous_line
        if first == previous_line:
            data[base + 1] -= previous_start
        previous_line, previous_start = line + coloured.last[0], coloured.last[1]
    return lsp.SemanticTokens(data=data)


def _colour(doc: Document, tokens: Sequence[Token], comments: Iterable[n.Span], first: int,
            analysis: Analysis | None, by_start: dict[tuple[int, int], Symbol],
            defines: list[tuple[str, int]], resolve: bool = False) -> Coloured:
    """The tokens and comments of the text from line ``first`` on, their names coloured by
    ``analysis`` (one that holds their statements; ``by_start``: its symbols by where they
    start). A name read is coloured as what it finds when told to ``resolve`` it (the
    whole text at once) or a construct there defines it, else left to the program's
    definitions (see :class:`Coloured`; ``defines``: those of these statements): a piece's
    tokens are kept, and another statement may define the name differently later."""
    found: list[tuple[int, int, int, str, int, str]] = []  # line, column, end, type, mods, read

    def add(span: n.Span, kind: str, modifiers: int = 0, read: str = "") -> None:
        top = span.line
        if top == span.end_line:  # most tokens: one line, no line's text needed
            if span.end_column > span.column:
                found.append((top, span.column, span.end_column, kind, modifiers, read))
            return
        for line in range(top, span.end_line + 1):
            text = doc.lines[line - 1] if line <= len(doc.lines) else ""
            start = span.column if line == span.line else 1
            end = span.end_column if line == span.end_line else len(text) + 1
            if end > start:
                found.append((line, start, end, kind, modifiers, read))

    def name(span: n.Span, symbol: Symbol, modifiers: int = 0) -> None:
        """``symbol`` coloured as what it names (a read value: what defines it)."""
        if symbol.kind != "binding" or symbol.defines or analysis is None:
            return add(span, SYMBOL_TOKEN[symbol.kind], modifiers)
        defined = analysis.definitions_of(symbol)
        if resolve or (defined and defined[0].scope is not None):
            return add(span, SYMBOL_TOKEN[defined[0].kind] if defined else "variable",
                       modifiers)
        return add(span, "variable", modifiers, symbol.name)

    def string(tok: Token) -> None:
        """The string cut around its interpolations, each coloured as the name it reads."""
        line, column = tok.span.line, tok.span.column
        for part in tok.parts:
            if isinstance(part, str):
                continue
            at = part.span
            add(n.Span(line, column, at.line, at.column), "string")
            symbol = by_start.get((at.line, at.column + 1))
            if symbol is not None:
                name(at, symbol)
            else:
                add(at, "variable")
            line, column = at.end_line, at.end_column
        add(n.Span(line, column, tok.span.end_line, tok.span.end_column), "string")

    for i, tok in enumerate(tokens):
        if tok.kind is T.NAME:
            symbol = by_start.get((tok.span.line, tok.span.column))
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            if symbol is not None and symbol.name == tok.value:
                name(tok.span, symbol, 1 if symbol.defines else 0)
            elif following is not None and following.is_op(":") and \
                    tok.value in AGENT_PROPERTIES:
                add(tok.span, "property")
            elif tok.value in KEYWORDS:
                add(tok.span, "keyword")
        elif tok.kind is T.STRING:
            string(tok)
        elif tok.kind is T.NUMBER:
            add(tok.span, "number")
        elif tok.kind is T.DISCRETION:
            add(tok.span, "macro")
    for span in comments:
        add(span, "comment")
    found.sort()
    data: list[int] = []
    reads: list[tuple[int, str]] = []
    previous_line, previous_start = first, 0
    for line, start, end, kind, modifiers, read in found:
        text = doc.lines[line - 1] if line <= len(doc.lines) else ""
        if text.isascii():
            column, length = start - 1, end - start
        else:
            column, length = utf16(text[:start - 1]), utf16(text[start - 1:end - 1])
        if read:
            reads.append((len(data) + 3, read))
        delta_line = line - previous_line
        data += [delta_line, column - (previous_start if delta_line == 0 else 0), length,
                 TOKEN_INDEX[kind], modifiers]
        previous_line, previous_start = line, column
    return Coloured(data, reads, defines, (previous_line - first, previous_start))


def tokens_edit(before: list[int], after: list[int]) -> lsp.SemanticTokensEdit:
    """The one edit taking ``before`` (the tokens last sent) to ``after``: the ints between
    the longest prefix and suffix they share (for ``semanticTokens/full/delta``; a change
    touches one place, so a client gets that place's tokens, not the whole file's)."""
    most = min(len(before), len(after))
    same = _shared(before, after, most, lambda k: before[:k] == after[:k])
    end = _shared(before, after, most - same,
                  lambda k: before[len(before) - k:] == after[len(after) - k:])
    return lsp.SemanticTokensEdit(same, len(before) - same - end,
                                  after[same:len(after) - end])


def _shared(before: list[int], after: list[int], most: int,
            holds: Callable[[int], bool]) -> int:
    """The largest ``k`` <= ``most`` for which ``holds(k)`` (true up to some k, then false)."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
