"""One analysis of a compiled program that every later stage reads.

For each statement: its stable path, kind, lines, the binding it makes, its agent, the block
definition it sits in and the construct around it; for the program: its inputs and outputs,
its agents with their settings (defaults applied), its blocks and a symbol table (where each
name is defined and where it is referenced).

Paths are the static part of the engine's resume keys, built with the one definition of the
format (:mod:`openprose.language.paths`), so the same program always gets the same paths:
``3`` is the fourth top-level statement, ``3.try.0`` the first statement of its ``try`` body,
``review.0`` the first statement of ``block review``.

Walkers over the syntax tree derive from :class:`NodeVisitor`.
"""

from __future__ import annotations

import bisect
import itertools
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from openprose.language import nodes as n
from openprose.language import paths
from openprose.language.lexer import NAME_RE

#: kinds of statement that spawn a session
SESSION_KINDS = frozenset({"session", "resume"})
BINDING_KINDS = frozenset({"let", "const", "output", "input"})


class NodeVisitor:
    """Dispatch on a node's class: ``visit(node, ...)`` calls ``<prefix><ClassName>(node, ...)``
    (``prefix`` is ``visit_`` unless a subclass says otherwise), else :meth:`generic_visit`,
    which visits the node's children. One lookup per class and visitor type."""

    prefix: ClassVar[str] = "visit_"
    _methods: ClassVar[dict[tuple[type, type], str | None]] = {}

    def visit(self, node: n.Node, *args: Any, **kwargs: Any) -> Any:
        key = (type(self), type(node))
        name = NodeVisitor._methods.get(key, "")
        if name == "":
            name = next((self.prefix + cls.__name__ for cls in type(node).__mro__
                         if hasattr(self, self.prefix + cls.__name__)), None)
            NodeVisitor._methods[key] = name
        method: Callable[..., Any] = getattr(self, name) if name else self.generic_visit
        return method(node, *args, **kwargs)

    def generic_visit(self, node: n.Node, *args: Any, **kwargs: Any) -> Any:
        for inner in node.children():
            self.visit(inner, *args, **kwargs)


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement. ``binds`` is the binding it makes (None for an anonymous session, which
    gets a generated name when run); ``binding_kind`` how it is stored; ``block`` the block
    definition it is inside (None: the program's top level); ``parent`` the path of the
    construct around it."""

    id: str
    kind: str
    line: int
    end_line: int
    source: str
    binds: str | None = None
    binding_kind: str | None = None
    agent: str | None = None
    block: str | None = None
    parent: str | None = None
    judged: bool = False
    options: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # the names a destructuring ``let { a, b } = ...`` binds
    node: n.Node | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent's settings as sessions get them: ``persist`` is execution, project, user or a
    path (None: not persistent)."""

    name: str
    prompt: str | None
    model: str | None
    persist: str | None
    node: n.AgentDef | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Block:
    name: str
    params: tuple[str, ...]
    max_depth: int  # the default applied (see BlockDef.depth_limit)


@dataclass(frozen=True, slots=True)
class Symbol:
    """One place a name is written: ``defines`` it (a binding, an agent, a block, a
    parameter, a loop/pipeline/catch variable, an imported program's alias) or reads it.
    ``kind``: binding, agent, block, parameter, variable or program (what it names; a
    reading of a value is ``binding`` until resolved). ``scope``: for a parameter or variable,
    the span of the construct it is visible in (None: the whole program)."""

    name: str
    span: n.Span
    kind: str
    defines: bool
    statement: str
    scope: n.Span | None = None

    def contains(self, line: int, column: int) -> bool:
        return _within(self.span, line, column)


def _within(span: n.Span, line: int, column: int) -> bool:
    return (span.line, span.column) <= (line, column) <= (span.end_line, span.end_column)


@dataclass
class Analysis:
    statements: dict[str, Statement]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    agents: dict[str, Agent]
    blocks: dict[str, Block]
    #: path → the construct whose body or branches run under it (``let x = parallel:`` is
    #: the parallel; a pipeline stage ``9.p0`` its stage): what a key's ``[i]``/``|b`` is of
    constructs: dict[str, n.Node] = field(default_factory=dict)
    program: n.Program | None = field(default=None, repr=False)
    #: every name written in the source, with its exact span, in source order
    symbols: tuple[Symbol, ...] = ()
    _outputs: frozenset[int] = field(default=frozenset(), init=False, repr=False)
    _named: dict[str, list[Symbol]] = field(default_factory=dict, init=False, repr=False)
    #: by name, its definitions visible in the whole program
    _global: dict[str, list[Symbol]] = field(default_factory=dict, init=False, repr=False)
    #: by name, its definitions visible in a construct only, by where their construct
    #: starts, and how far the constructs up to each reach (see definitions_of)
    _scoped: dict[str, tuple[list[tuple[int, int]], list[Symbol], list[tuple[int, int]]]] = \
        field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        scoped: dict[str, list[Symbol]] = {}
        for symbol in self.symbols:
            self._named.setdefault(symbol.name, []).append(symbol)
            if symbol.defines:
                (self._global if symbol.scope is None else scoped).setdefault(
                    symbol.name, []).append(symbol)
        for name, found in scoped.items():
            found.sort(key=lambda d: (d.scope.line, d.scope.column))  # type: ignore[union-attr]
            self._scoped[name] = (
                [(d.scope.line, d.scope.column) for d in found], found,  # type: ignore[union-attr]
                list(itertools.accumulate(((d.scope.end_line, d.scope.end_column)  # type: ignore[union-attr]
                                           for d in found), max)))
        self._outputs = frozenset(id(s.node) for s in self.statements.values()
                                  if s.binds in self.outputs and s.binding_kind == "output"
                                  and s.block is None)

    def is_program_output(self, node: n.Node) -> bool:
        """Whether the ``output`` statement ``node`` sets one of the program's outputs (it
        is outside every block definition)."""
        return id(node) in self._outputs

    def symbol_at(self, line: int, column: int) -> Symbol | None:
        """The name written at ``line:column`` (1-based), if any."""
        return next((s for s in self.symbols if s.contains(line, column)), None)

    def definitions_of(self, symbol: Symbol) -> list[Symbol]:
        """Where the name ``symbol`` writes is defined: the innermost parameter or variable
        whose construct holds it, else the program's definitions of that name and sort."""
        values = ("binding", "parameter", "variable", "program")
        sorts = values if symbol.kind in values else (symbol.kind,)
        at = symbol.span.line, symbol.span.column
        starts, scoped, reach = self._scoped.get(symbol.name, ((), (), ()))
        # the constructs starting before it, innermost first, while any may still hold it
        j = bisect.bisect_right(starts, at) - 1  # type: ignore[arg-type]
        while j >= 0 and reach[j] >= at:
            if _within(scoped[j].scope, *at) and scoped[j].kind in sorts:  # type: ignore[arg-type]
                while j and starts[j - 1] == starts[j] and scoped[j - 1].kind in sorts:
                    j -= 1  # of two in one construct, the first written
                return [scoped[j]]
            j -= 1
        return [d for d in self._global.get(symbol.name, ()) if d.kind in sorts]

    def references_of(self, symbol: Symbol) -> list[Symbol]:
        """Every place the name ``symbol`` writes is defined or read, resolved the same way."""
        targets = set(self.definitions_of(symbol))
        return [s for s in self._named.get(symbol.name, ())
                if s in targets or not targets.isdisjoint(self.definitions_of(s))]

    def writers_of(self, name: str, block: str | None) -> list[Statement]:
        """The statements inside ``block`` (None: top level) that bind ``name``."""
        return [s for s in self.statements.values()
                if (s.binds == name or name in s.names) and s.block == block]


#: The last analyses made, by source: a run's interpreter and its state.md (its steps placed in
#: the program) read one program, and a long program takes long to analyse.
_RECENT: dict[str, Analysis] = {}
_RECENT_KEPT = 8
_RECENT_LOCK = threading.Lock()


def analyze(program: n.Program, source: str) -> Analysis:
    """The analysis of a compiled program (made once for the same tree of the same source;
    nothing changes an analysis once made)."""
    with _RECENT_LOCK:
        found = _RECENT.get(source)
    if found is not None and found.program is program:
        return found
    analysis = _analyze(program, source)
    with _RECENT_LOCK:
        _RECENT.pop(source, None)
        while len(_RECENT) >= _RECENT_KEPT:
            del _RECENT[next(iter(_RECENT))]
        _RECENT[source] = analysis
    return analysis


def analyze_part(program: n.Program, source: str, only: Iterable[int]) -> Analysis:
    """The analysis of some of ``program``'s top-level statements (by index), each with the
    path it has in the whole program's: what a question about one place or a few names
    reads of a long program (an editor's hover), whose whole analysis takes seconds. Its
    ``program`` holds those statements only."""
    return _analyze(program, source, sorted(set(only)))


def _analyze(program: n.Program, source: str, only: list[int] | None = None) -> Analysis:
    lines = source.split("\n")
    walker = _Statements(lines)
    if only is None:
        walker.body(program.body, "", None, None)
    else:
        for i in only:
            walker.visit(program.body[i], paths.child("", i), None, None)
        program = n.Program(tuple(program.body[i] for i in only), span=program.span)
    for block in program.blocks.values():
        walker.body(block.body, block.name, block.name, None)
    statements = walker.out
    return Analysis(statements, tuple(d.name for d in program.inputs),
                    program_outputs(statements.values()),
                    {name: agent_settings(a) for name, a in program.agents.items()},
                    {name: Block(b.name, b.params, b.depth_limit)
                     for name, b in program.blocks.items()},
                    walker.constructs, program,
                    tuple(_Names(lines, statements).walk(program)))


def program_outputs(statements: Any) -> tuple[str, ...]:
    """The program's outputs, the one rule every mode reports by: each named ``output``
    outside a block definition, wherever it sits otherwise (under an ``if``, in a loop, in a
    ``try``). A named ``output`` inside a block is the block's, bound in the call's frame (see
    docs/architecture.md)."""
    return tuple(dict.fromkeys(s.binds for s in statements
                               if s.binding_kind == "output" and s.binds and s.block is None))


def persist_scope(node: n.Node) -> str | None:
    """An agent's ``persist:`` value as sessions use it: ``true`` → "execution", ``false`` →
    None, ``project``/``user`` as written, a quoted path → the path."""
    if isinstance(node, n.Boolean):
        return "execution" if node.value else None
    if isinstance(node, n.Name):
        return {"true": "execution", "false": None}.get(node.id, node.id)
    if isinstance(node, n.String):
        return node.text
    return None


def agent_settings(node: n.AgentDef) -> Agent:
    def text(name: str) -> str | None:
        prop = node.property(name)
        if prop is None:
            return None
        value = prop.value
        if isinstance(value, n.String):
            return value.text
        if isinstance(value, n.Name):
            return value.id
        return None

    persist = node.property("persist")
    return Agent(node.name, text("prompt"), text("model"),
                 persist_scope(persist.value) if persist is not None else None, node)


#: the patterns :meth:`_Names.find` has compiled, by their text
_PATTERNS: dict[str, re.Pattern[str]] = {}
#: properties whose bare-word value is a setting (``model: opus``), never a binding
_WORD_VALUED = frozenset({"model", "persist", "backoff", "bash", "network"})


class _Names:
    """The names written in a program, each with its span: the parser keeps spans of nodes,
    so a name inside a node (``let NAME``, ``block NAME(A, B)``, ``session: AGENT``) is
    found in the node's source after the word before it. Iterative, as deep trees are."""

    def __init__(self, lines: list[str], statements: dict[str, Statement]) -> None:
        self.lines = lines
        self.paths = {id(s.node): s.id for s in statements.values() if s.node is not None}
        self.out: list[Symbol] = []

    def walk(self, program: n.Program) -> list[Symbol]:
        stack: list[tuple[n.Node, str]] = [(program, "")]
        while stack:
            node, sid = stack.pop()
            sid = self.paths.get(id(node), sid)
            self.node(node, sid)
            if isinstance(node, n.Property) and node.name in _WORD_VALUED:
                continue  # ``model: sonnet`` names a setting, not a binding
            stack.extend((child, sid) for child in reversed(node.children()))
        return sorted(self.out, key=lambda s: (s.span.line, s.span.column))

    def find(self, node: n.Node, pattern: str, name: str, start: n.Span | None = None
             ) -> n.Span | None:
        """The span of ``name`` where ``pattern`` (``{}`` standing for it) first matches in
        ``node``'s source, from ``start`` (default: the node's start) on."""
        begin = start or node.span
        regex = _PATTERNS.get(pattern)
        if regex is None:
            regex = _PATTERNS[pattern] = re.compile(pattern.format(f"({NAME_RE.pattern})"))
        for line in range(begin.line, node.span.end_line + 1):
            if not 0 < line <= len(self.lines):
                return None
            text = self.lines[line - 1]
            offset = (begin.end_column - 1 if start else begin.column - 1) \
                if line == begin.line else 0
            match = next((m for m in regex.finditer(text, offset) if m.group(1) == name), None)
            if match:
                return n.Span(line, match.start(1) + 1, line, match.end(1) + 1)
        return None

    def add(self, name: str, span: n.Span | None, kind: str, defines: bool, sid: str,
            scope: n.Span | None = None) -> None:
        if span is not None:
            self.out.append(Symbol(name, span, kind, defines, sid, scope))

    def node(self, node: n.Node, sid: str) -> None:
        add, find = self.add, self.find
        match node:
            case n.Name():
                add(node.id, node.span, "binding", False, sid)
            case n.Interpolation():
                first = node.path[0]
                col = node.span.column + 1
                add(first, n.Span(node.span.line, col, node.span.line, col + len(first)),
                    "binding", False, sid)
            case n.Session():
                if node.label:
                    add(node.label, find(node, r"\bsession\s+{}", node.label), "binding",
                        True, sid)
                if node.agent:
                    add(node.agent, find(node, r":\s*{}", node.agent), "agent", False, sid)
            case n.DoCall():
                add(node.block, find(node, r"\bdo\s+{}", node.block), "block", False, sid)
            case n.ProgramCall():
                add(node.callee, find(node, "{}", node.callee), "program", False, sid)
            case n.Let() if isinstance(node.target, str):
                add(node.target, find(node, r"\b(?:let|const)\s+{}", node.target), "binding",
                    True, sid)
            case n.Destructure():
                for name in node.names:
                    add(name, find(node, r"[{{,]\s*{}", name), "binding", True, sid)
            case n.Assign():
                add(node.target, find(node, "{}", node.target), "binding", True, sid)
            case n.Output() if node.name:
                add(node.name, find(node, r"\boutput\s+{}", node.name), "binding", True, sid)
            case n.Input():
                add(node.name, find(node, r"\binput\s+{}", node.name), "binding", True, sid)
            case n.Branch() if node.name:
                add(node.name, find(node, "{}", node.name), "binding", True, sid)
            case n.AgentDef():
                add(node.name, find(node, r"\bagent\s+{}", node.name), "agent", True, sid)
            case n.BlockDef():
                name = find(node, r"\bblock\s+{}", node.name)
                add(node.name, name, "block", True, sid)
                for param in node.params:
                    add(param, find(node, r"[(,]\s*{}", param, name), "parameter", True, sid,
                        node.span)
            case n.For():
                add(node.item, find(node, r"\bfor\s+{}", node.item), "variable", True, sid,
                    node.span)
                if node.index:
                    add(node.index, find(node, r",\s*{}", node.index), "variable", True, sid,
                        node.span)
            case n.Repeat() | n.Loop() if node.index:
                after = node.condition.span if isinstance(node, n.Loop) and node.condition \
                    else None
                add(node.index, find(node, r"\bas\s+{}", node.index, after), "variable",
                    True, sid, node.span)
            case n.Try() if node.catch_name and node.body:
                add(node.catch_name, find(node, r"\bcatch\s+as\s+{}", node.catch_name,
                                          node.body[-1].span), "variable", True, sid, node.span)
            case n.PipeOp():
                if node.kind == "reduce":
                    for name in (node.accumulator or "", node.variable):
                        add(name, find(node, r"[(,]\s*{}", name), "variable", True, sid,
                            node.span)
                else:  # the implicit ``item`` is defined by the operation's word
                    word = find(node, r"\|\s*{}", node.kind)
                    add(node.variable, word, "variable", True, sid, node.span)
            case n.Use():
                if node.alias:
                    add(node.alias, find(node, r"\bas\s+{}", node.alias, node.path.span),
                        "program", True, sid)
                else:
                    add(node.handle, node.path.span, "program", True, sid)


class _Statements(NodeVisitor):
    """Collects every statement with its path; ``visit`` dispatches a statement by its class
    (an expression standing as a statement goes through :meth:`value`)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.out: dict[str, Statement] = {}
        self.constructs: dict[str, n.Node] = {}
        self.bodies = _Bodies(self)

    def source(self, node: n.Node) -> str:
        return "\n".join(self.lines[node.span.line - 1: node.span.end_line])

    def add(self, sid: str, kind: str, node: n.Node, block: str | None, parent: str | None,
            **extra: object) -> None:
        self.out[sid] = Statement(sid, kind, node.span.line, node.span.end_line,
                                  self.source(node), block=block, parent=parent, node=node,
                                  **extra)  # type: ignore[arg-type]

    def body(self, stmts: tuple[n.Node, ...], path: str, block: str | None,
             parent: str | None) -> None:
        for i, stmt in enumerate(stmts):
            self.visit(stmt, paths.child(path, i), block, parent)

    # statements -----------------------------------------------------------------------
    def visit_BlockDef(self, node: n.BlockDef, sid: str, block: str | None,
                       parent: str | None) -> None:
        self.add(sid, "block", node, block, parent, binds=node.name)

    def visit_AgentDef(self, node: n.AgentDef, sid: str, block: str | None,
                       parent: str | None) -> None:
        self.add(sid, "agent", node, block, parent, binds=node.name)

    def visit_Use(self, node: n.Node, sid: str, block: str | None, parent: str | None) -> None:
        self.add(sid, "use", node, block, parent)

    visit_ImportSkill = visit_Use

    def visit_Input(self, node: n.Input, sid: str, block: str | None,
                    parent: str | None) -> None:
        self.add(sid, "input", node, block, parent, binds=node.name, binding_kind="input")

    def visit_Let(self, node: n.Let, sid: str, block: str | None, parent: str | None) -> None:
        if isinstance(node.target, n.Destructure):  # its value, then names taken apart
            self.value(node.value, sid, block, parent, None, None, node)
            self.out[sid] = replace(self.out[sid], binding_kind=node.kind,
                                    names=node.target.names)
        else:
            self.value(node.value, sid, block, parent, node.target, node.kind, node)

    def visit_Assign(self, node: n.Assign, sid: str, block: str | None,
                     parent: str | None) -> None:
        self.value(node.value, sid, block, parent, node.target, "let", node)

    def visit_Output(self, node: n.Output, sid: str, block: str | None,
                     parent: str | None) -> None:
        self.value(node.value, sid, block, parent, node.name,
                   "output" if node.name else None, node)

    def visit_ExprStmt(self, node: n.ExprStmt, sid: str, block: str | None,
                       parent: str | None) -> None:
        self.value(node.expr, sid, block, parent, None, None)

    def visit_Branch(self, node: n.Branch, sid: str, block: str | None,
                     parent: str | None) -> None:
        body = node.body.expr if isinstance(node.body, n.ExprStmt) else node.body
        if node.name is not None:
            self.value(body, sid, block, parent, node.name, "let", node)
        else:
            self.visit(node.body, sid, block, parent)

    def visit_Throw(self, node: n.Throw, sid: str, block: str | None,
                    parent: str | None) -> None:
        self.add(sid, "throw", node, block, parent)

    def generic_visit(self, node: n.Node, sid: str, block: str | None,  # type: ignore[override]
                      parent: str | None) -> None:
        self.value(node, sid, block, parent, None, None)

    # expressions standing as statements -----------------------------------------------
    def value(self, node: n.Node, sid: str, block: str | None, parent: str | None,
              binds: str | None, binding_kind: str | None, stmt: n.Node | None = None) -> None:
        """A statement made of the expression ``node`` (``stmt``: the statement around it,
        whose lines the entry spans), binding ``binds`` when given."""
        whole = stmt or node
        if isinstance(node, n.Session):
            name = binds if binds is not None else node.label
            kind = binding_kind if binds is not None else ("let" if name else None)
            self.add(sid, "resume" if node.resume else "session", whole, block, parent,
                     binds=name, binding_kind=kind, agent=node.agent)
            return
        if isinstance(node, n.Arrow):
            self.add(sid, "sequence", whole, block, parent, binds=binds,
                     binding_kind=binding_kind)
            last = len(node.steps) - 1
            for i, step in enumerate(node.steps):
                self.value(step, paths.sequence_step(sid, i), block, sid, binds if i == last else None,
                           binding_kind if i == last else None)
            return
        kind, judged = _compound_kind(node)
        if kind is None:  # a plain value: the VM writes it
            self.add(sid, binding_kind or "expression", whole, block, parent, binds=binds,
                     binding_kind=binding_kind)
            return
        options: tuple[str, ...] = ()
        if isinstance(node, n.Choice):
            options = tuple(o.label.text for o in node.options)
        self.add(sid, kind, whole, block, parent, binds=binds, binding_kind=binding_kind,
                 judged=judged, options=options)
        self.constructs[sid] = node
        self.bodies.visit(node, sid, block)



class _Bodies(NodeVisitor):
    """Collects the statements of a construct's bodies, each under its path label (a
    construct without bodies, such as a block call, has none)."""

    def __init__(self, walker: _Statements) -> None:
        self.walker = walker

    def visit_Parallel(self, node: n.Parallel, sid: str, block: str | None) -> None:
        for i, branch_node in enumerate(node.branches):
            self.walker.visit(branch_node, paths.branch(sid, i), block, sid)

    def visit_Loop(self, node: n.Repeat | n.For | n.Loop | n.DoBlock, sid: str,
                   block: str | None) -> None:
        self.walker.body(node.body, sid, block, sid)

    visit_Repeat = visit_For = visit_DoBlock = visit_Loop

    def visit_Try(self, node: n.Try, sid: str, block: str | None) -> None:
        self.walker.body(node.body, paths.try_body(sid), block, sid)
        if node.catch_body is not None:
            self.walker.body(node.catch_body, paths.catch_body(sid), block, sid)
        if node.finally_body is not None:
            self.walker.body(node.finally_body, paths.finally_body(sid), block, sid)

    def visit_If(self, node: n.If, sid: str, block: str | None) -> None:
        for i, branch in enumerate(node.branches):
            self.walker.add(paths.condition(sid, i), "condition", branch.condition, block, sid,
                            judged=_judged(branch.condition))
            self.walker.body(branch.body, paths.then_body(sid, i), block, sid)
        if node.else_body is not None:
            self.walker.body(node.else_body, paths.else_body(sid), block, sid)

    def visit_Choice(self, node: n.Choice, sid: str, block: str | None) -> None:
        for i, option in enumerate(node.options):
            self.walker.body(option.body, paths.option(sid, i), block, sid)

    def visit_Pipeline(self, node: n.Pipeline, sid: str, block: str | None) -> None:
        for k, op in enumerate(node.ops):
            self.walker.constructs[paths.stage(sid, k)] = op
            self.walker.body(op.body, paths.stage(sid, k), block, sid)

    def generic_visit(self, node: n.Node, *args: Any, **kwargs: Any) -> None:
        return None


_COMPOUND = {n.Parallel: "parallel", n.Repeat: "repeat", n.Try: "try", n.If: "if",
             n.DoBlock: "do", n.DoCall: "call_block", n.ProgramCall: "call_program",
             n.Pipeline: "pipeline"}


def _compound_kind(node: n.Node) -> tuple[str | None, bool]:
    if isinstance(node, n.For):
        return ("parallel_for" if node.parallel else "for"), False
    if isinstance(node, n.Loop):
        return "loop", node.condition is not None and _judged(node.condition)
    if isinstance(node, n.Choice):
        return "choice", _judged(node.criteria)
    return _COMPOUND.get(type(node)), False


def _judged(condition: n.Node) -> bool:
    """Whether a condition has a ``**discretion**`` part the VM judges."""
    return any(isinstance(node, n.Discretion) for node in n.walk(condition))


__all__ = ["BINDING_KINDS", "SESSION_KINDS", "Agent", "Analysis", "Block", "NodeVisitor",
           "Statement", "Symbol", "agent_settings", "analyze", "analyze_part", "persist_scope",
           "program_outputs"]
