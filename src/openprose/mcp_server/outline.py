"""A program's outline: every statement a host VM steps, with a stable id.

Ids are paths through the program tree, so the same program always gets the same ids:
``3`` is the fourth top-level statement, ``3.try.0`` the first statement of its ``try`` body,
``3.catch.0``/``3.finally.0`` the other bodies, ``4|1`` the second branch of a ``parallel``,
``5.0`` the first statement of a loop body, ``6.if1`` the ``elif`` condition of an ``if`` and
``6.b1.0`` the first statement under it (``6.else.0`` under ``else``), ``7.o0.0`` under a
``choice`` option, ``8.s1`` the second step of an arrow ``->`` sequence, ``9.p0.0`` inside a
pipeline stage, and ``review.0`` the first statement of ``block review``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from openprose.language import nodes as n

#: kinds of statement that spawn a session (``spawn_session`` accepts only these)
SESSION_KINDS = frozenset({"session", "resume"})
BINDING_KINDS = frozenset({"let", "const", "output", "input"})


@dataclass(frozen=True, slots=True)
class Statement:
    """One steppable statement. ``binds`` is the binding it makes (None for an anonymous
    session, which gets a generated name when spawned); ``binding_kind`` how it is stored;
    ``block`` the block definition it is inside (None: the program's top level)."""

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
    name: str
    prompt: str | None
    model: str | None
    persist: str | None  # execution | project | user | a path; None: not persistent
    node: n.AgentDef | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Block:
    name: str
    params: tuple[str, ...]
    max_depth: int


@dataclass
class Outline:
    statements: dict[str, Statement]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    agents: dict[str, Agent]
    blocks: dict[str, Block]

    def writers_of(self, name: str, block: str | None) -> list[Statement]:
        """The statements inside ``block`` (None: top level) that bind ``name``."""
        return [s for s in self.statements.values()
                if (s.binds == name or name in s.names) and s.block == block]




def build(program: n.Program, source: str) -> Outline:
    """The outline of a compiled program."""
    walker = _Walker(source.split("\n"), program)
    walker.body(program.body, "", None, None)
    for block in program.blocks.values():
        walker.body(block.body, block.name, block.name, None)
    outputs = tuple(s.binds for s in walker.out.values()
                    if s.binding_kind == "output" and s.binds and s.block is None)
    return Outline(walker.out, tuple(d.name for d in program.inputs), tuple(dict.fromkeys(outputs)),
                   {name: _agent(a) for name, a in program.agents.items()},
                   {name: Block(b.name, b.params, b.depth_limit)
                    for name, b in program.blocks.items()})


def _agent(node: n.AgentDef) -> Agent:
    def text(name: str) -> str | None:
        prop = node.property(name)
        if prop is None:
            return None
        value = prop.value
        if isinstance(value, n.String):
            return value.text
        if isinstance(value, n.Name):
            return value.id
        if isinstance(value, n.Boolean):
            return "true" if value.value else "false"
        return None

    persist = text("persist")
    if persist in ("true",):
        persist = "execution"
    elif persist == "false":
        persist = None
    return Agent(node.name, text("prompt"), text("model"), persist, node)


def _child(path: str, step: str | int) -> str:
    return f"{path}.{step}" if path else str(step)


class _Walker:
    def __init__(self, lines: list[str], program: n.Program) -> None:
        self.lines = lines
        self.agents = program.agents
        self.out: dict[str, Statement] = {}

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
            self.stmt(stmt, _child(path, i) if path else str(i), block, parent)

    def stmt(self, node: n.Node, sid: str, block: str | None, parent: str | None,
             binds: str | None = None, binding_kind: str | None = None) -> None:
        if isinstance(node, n.BlockDef):
            self.add(sid, "block", node, block, parent, binds=node.name)
        elif isinstance(node, n.AgentDef):
            self.add(sid, "agent", node, block, parent, binds=node.name)
        elif isinstance(node, n.Use | n.ImportSkill):
            self.add(sid, "use", node, block, parent)
        elif isinstance(node, n.Input):
            self.add(sid, "input", node, block, parent, binds=node.name, binding_kind="input")
        elif isinstance(node, n.Let):
            if isinstance(node.target, n.Destructure):  # its value, then names taken apart
                self.value(node.value, sid, block, parent, None, None, node)
                self.out[sid] = replace(self.out[sid], binding_kind=node.kind,
                                        names=node.target.names)
            else:
                self.value(node.value, sid, block, parent, node.target, node.kind, node)
        elif isinstance(node, n.Assign):
            self.value(node.value, sid, block, parent, node.target, "let", node)
        elif isinstance(node, n.Output):
            self.value(node.value, sid, block, parent, node.name,
                       "output" if node.name else None, node)
        elif isinstance(node, n.ExprStmt):
            self.value(node.expr, sid, block, parent, binds, binding_kind)
        elif isinstance(node, n.Branch):
            body = node.body.expr if isinstance(node.body, n.ExprStmt) else node.body
            if node.name is not None:
                self.value(body, sid, block, parent, node.name, "let", node)
            else:
                self.stmt(node.body, sid, block, parent)
        elif isinstance(node, n.Throw):
            self.add(sid, "throw", node, block, parent)
        else:
            self.value(node, sid, block, parent, binds, binding_kind)

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
                self.value(step, f"{sid}.s{i}", block, sid, binds if i == last else None,
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
        self.children(node, sid, block)

    def children(self, node: n.Node, sid: str, block: str | None) -> None:
        if isinstance(node, n.Parallel):
            for i, branch in enumerate(node.branches):
                self.stmt(branch, f"{sid}|{i}", block, sid)
        elif isinstance(node, n.Repeat | n.For | n.Loop | n.DoBlock):
            self.body(node.body, sid, block, sid)
        elif isinstance(node, n.Try):
            self.body(node.body, f"{sid}.try", block, sid)
            if node.catch_body is not None:
                self.body(node.catch_body, f"{sid}.catch", block, sid)
            if node.finally_body is not None:
                self.body(node.finally_body, f"{sid}.finally", block, sid)
        elif isinstance(node, n.If):
            for i, branch in enumerate(node.branches):
                judged = _judged(branch.condition)
                self.add(f"{sid}.if{i}", "condition", branch.condition, block, sid,
                         judged=judged)
                self.body(branch.body, f"{sid}.b{i}", block, sid)
            if node.else_body is not None:
                self.body(node.else_body, f"{sid}.else", block, sid)
        elif isinstance(node, n.Choice):
            for i, option in enumerate(node.options):
                self.body(option.body, f"{sid}.o{i}", block, sid)
        elif isinstance(node, n.Pipeline):
            for k, op in enumerate(node.ops):
                self.body(op.body, f"{sid}.p{k}", block, sid)


def _compound_kind(node: n.Node) -> tuple[str | None, bool]:
    if isinstance(node, n.Parallel):
        return "parallel", False
    if isinstance(node, n.For):
        return ("parallel_for" if node.parallel else "for"), False
    if isinstance(node, n.Repeat):
        return "repeat", False
    if isinstance(node, n.Loop):
        return "loop", node.condition is not None and _judged(node.condition)
    if isinstance(node, n.Try):
        return "try", False
    if isinstance(node, n.If):
        return "if", False
    if isinstance(node, n.Choice):
        return "choice", _judged(node.criteria)
    if isinstance(node, n.DoBlock):
        return "do", False
    if isinstance(node, n.DoCall):
        return "call_block", False
    if isinstance(node, n.ProgramCall):
        return "call_program", False
    if isinstance(node, n.Pipeline):
        return "pipeline", False
    return None, False


def _judged(condition: n.Node) -> bool:
    """Whether a condition has a ``**discretion**`` part the VM judges."""
    return any(isinstance(node, n.Discretion) for node in n.walk(condition))
