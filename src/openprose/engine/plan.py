"""``--dry-run``: walk a program without a model and count what a run would spend.

Every session and judgment becomes a :class:`PlannedStep` with how many times it can run at most:
loops multiply by their max (or the safety limit when they have none), ``for``/pipelines by
the length of a literal collection (else the count depends on data, ``times`` is ``None``),
branches of ``if``/``choice`` are all counted (an upper bound). Block calls count the block
body once per call; a recursive call is reported as data-dependent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from openprose.engine.imports import Imported
from openprose.engine.sessions import shape
from openprose.language import nodes as n
from openprose.language.analysis import NodeVisitor

# Rough token assumptions for the estimate: characters per token, answer length.
CHARS_PER_TOKEN = 4
OUTPUT_TOKENS = 1000


@dataclass(frozen=True, slots=True)
class PlannedStep:
    line: int
    kind: str  # "session" | "judgment"
    text: str
    times: int | None  # None: depends on data (collection length, recursion)
    why: str = ""
    model: str | None = None


@dataclass(slots=True)
class Plan:
    steps: list[PlannedStep] = field(default_factory=list)

    @property
    def sessions(self) -> int:
        return _total(s for s in self.steps if s.kind == "session")

    @property
    def judgments(self) -> int:
        return _total(s for s in self.steps if s.kind == "judgment")

    @property
    def data_dependent(self) -> bool:
        return any(s.times is None for s in self.steps)

    def estimated_tokens(self) -> int:
        """Upper-bound tokens, counting data-dependent steps once."""
        total = 0
        for step in self.steps:
            per = len(step.text) // CHARS_PER_TOKEN + (OUTPUT_TOKENS if step.kind == "session"
                                                        else 50)
            total += per * (step.times or 1)
        return total

    def to_dict(self) -> dict[str, object]:
        return {"sessions": self.sessions, "judgments": self.judgments,
                "data_dependent": self.data_dependent,
                "estimated_tokens": self.estimated_tokens(),
                "steps": [{"line": s.line, "kind": s.kind, "text": s.text, "times": s.times,
                           "why": s.why, "model": s.model} for s in self.steps]}


def _total(steps: Iterable[PlannedStep]) -> int:
    """Sum of upper bounds; a data-dependent step counts once (see ``data_dependent``)."""
    return sum(step.times if step.times is not None else 1 for step in steps)


def plan(program: n.Program, imports: dict[str, Imported] | None = None,
         loop_limit: int = 1000) -> Plan:
    planner = _Planner(program, imports or {}, loop_limit)
    planner.body(program.body, 1, ())
    return planner.plan


class _Planner(NodeVisitor):
    """Counts the sessions and judgments each statement may run (``times``: how often the
    statement runs, None when data decides; ``why``: the constructs that multiply it)."""

    def __init__(self, program: n.Program, imports: dict[str, Imported], loop_limit: int,
                 plan: Plan | None = None) -> None:
        self.program = program
        self.imports = imports
        self.loop_limit = loop_limit
        self.plan = plan if plan is not None else Plan()
        self.calling: tuple[str, ...] = ()

    def body(self, stmts: tuple[n.Node, ...], times: int | None, why: tuple[str, ...]) -> None:
        for stmt in stmts:
            self.visit(stmt, times, why)

    def visit_Session(self, node: n.Session, times: int | None, why: tuple[str, ...]) -> None:
        merged = shape(node, self.program.agents)
        text = merged.prompt.text if merged.prompt else ""
        self.plan.steps.append(PlannedStep(node.span.line, "session", text, times,
                                           " × ".join(why), merged.model))

    def visit_Discretion(self, node: n.Discretion, times: int | None,
                         why: tuple[str, ...]) -> None:
        self.plan.steps.append(PlannedStep(node.span.line, "judgment", node.text, times,
                                           " × ".join(why)))

    def visit_Loop(self, node: n.Loop, times: int | None, why: tuple[str, ...]) -> None:
        bound = node.max if node.max is not None else self.loop_limit
        label = f"loop max {node.max}" if node.max is not None else f"unbounded loop " \
            f"(safety limit {self.loop_limit})"
        if node.condition is not None:
            self.visit(node.condition, _mul(times, bound), (*why, label))
        self.body(node.body, _mul(times, bound), (*why, label))

    def visit_Repeat(self, node: n.Repeat, times: int | None, why: tuple[str, ...]) -> None:
        count = node.count.value if isinstance(node.count, n.Number) else None
        self.body(node.body, _mul(times, count), (*why, f"repeat {count or '?'}"))

    def visit_For(self, node: n.For, times: int | None, why: tuple[str, ...]) -> None:
        count, label = self.size(node.collection)
        self.body(node.body, _mul(times, count), (*why, label))

    def visit_Pipeline(self, node: n.Pipeline, times: int | None, why: tuple[str, ...]) -> None:
        self.visit(node.source, times, why)
        count, label = self.size(node.source)
        for op in node.ops:
            self.body(op.body, _mul(times, count), (*why, f"{op.kind} over {label}"))

    def visit_ProgramCall(self, node: n.ProgramCall, times: int | None,
                          why: tuple[str, ...]) -> None:
        imported = self.imports.get(node.callee)
        if imported is None:
            self.generic_visit(node, times, why)
            return
        inner = _Planner(imported.program, imported.imports, self.loop_limit, self.plan)
        inner.body(imported.program.body, times, (*why, f"program {node.callee}"))

    def visit_AgentDef(self, node: n.Node, times: int | None, why: tuple[str, ...]) -> None:
        """Definitions run nothing where they stand (a block runs where it is called)."""

    visit_BlockDef = visit_AgentDef

    def visit_DoCall(self, node: n.DoCall, times: int | None, why: tuple[str, ...]) -> None:
        block = self.program.blocks.get(node.block)
        if block is None:
            return
        if block.name in self.calling:
            self.plan.steps.append(PlannedStep(node.span.line, "session", f"recursive do {block.name}",
                                        None, " × ".join((*why, "recursion"))))
            return
        self.calling = (*self.calling, block.name)
        try:
            self.body(block.body, times, (*why, f"do {block.name}"))
        finally:
            self.calling = self.calling[:-1]

    def size(self, node: n.Node) -> tuple[int | None, str]:
        if isinstance(node, n.Array):
            return len(node.items), f"{len(node.items)} items"
        if isinstance(node, n.Name):
            for stmt in n.walk(self.program):
                if (isinstance(stmt, n.Let) and stmt.target == node.id
                        and isinstance(stmt.value, n.Array)):
                    return len(stmt.value.items), f"{len(stmt.value.items)} items of {node.id}"
            return None, f"each item of {node.id}"
        return None, "each item"


def _mul(times: int | None, factor: int | None) -> int | None:
    if times is None or factor is None:
        return None
    return times * factor
