"""A scripted embodied host that walks a program correctly, and the same walk with single
deviations a careless host would make, each of which the server must refuse at that step
with a message naming what the program expects there.

The walk is :func:`tests.mcp_server.tool_host.walk` one step at a time (``concurrency=1``),
so every walk of a program makes the same calls in the same order: a first walk records the
steps (``spawn_session``, ``record_verdict``, ``push_frame``), which say what a deviation at
step ``k`` is — the next step taken early (a statement skipped, two swapped), a verdict left
out, the branch the verdict did not choose, a statement started again (one loop round too
many), a changed prompt. A second walk makes each deviant call just before step ``k``, checks
the refusal, and goes on; since a refused call changes nothing, it must still leave the run
``prose run`` leaves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from tests.mcp_server.tool_host import Bridge, engine_run, walk

from openprose.language import compile_or_raise
from openprose.language.analysis import Analysis, Statement, analyze
from openprose.mcp_server.server import create_server

STEPS = ("spawn_session", "record_verdict", "push_frame")
#: constructs whose body may run several times at once in one frame
CONCURRENT = frozenset({"parallel", "parallel_for", "pipeline"})
LOOPS = frozenset({"loop", "repeat", "for", "parallel_for", "pipeline"})


@dataclass(frozen=True)
class Step:
    tool: str
    args: dict[str, Any]

    @property
    def statement(self) -> str:
        return str(self.args.get("statement", ""))

    @property
    def frame(self) -> int | None:
        return self.args.get("execution_id") or self.args.get("parent") or None

    def expected(self) -> str:
        """How the server's 'next:' names this step (a regex)."""
        if self.tool == "push_frame":
            return re.escape(f"push_frame {self.args['block']}(")
        if self.tool == "record_verdict":
            return re.escape(f"record_verdict {self.statement} iteration "
                             f"{self.args.get('iteration', 0)}") + r"\b"
        return re.escape(f"spawn_session {self.statement}") + r"(?![\w.|])"


@dataclass
class Deviation:
    at: int  # made just before step ``at`` (the correct call there)
    kind: str
    tool: str
    args: dict[str, Any]
    expect: list[str]  # regexes the refusal must match
    refusal: str = ""


class Recorder(Bridge):
    """Records a walk's steps."""

    def __init__(self, server: MCPServer | StdioServerParameters, era: dict[str, Any]) -> None:
        super().__init__(server, era)
        self.steps: list[Step] = []

    async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await super()._call(tool, arguments)
        if tool in STEPS:
            self.steps.append(Step(tool, {k: v for k, v in arguments.items()
                                          if k != "vm_token"}))
        return result


def deviating(plan: list[Deviation]) -> type[Bridge]:
    """A bridge that makes the planned deviant calls before the steps they precede."""

    class Deviator(Bridge):
        def __init__(self, server: MCPServer | StdioServerParameters,
                     era: dict[str, Any]) -> None:
            super().__init__(server, era)
            self.step = 0

        async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            if tool in STEPS or tool == "complete_run":  # complete_run: after the last step
                for deviation in (d for d in plan if d.at == self.step):
                    assert self.client is not None
                    args = dict(deviation.args, vm_token=arguments["vm_token"])
                    got = await self.client.call_tool(deviation.tool, args)
                    text = got.content[0].text if got.content else ""
                    assert got.is_error, f"{deviation.kind} at step {self.step} was " \
                        f"granted: {deviation.tool}({deviation.args}): {text}"
                    deviation.refusal = text
                self.step += tool in STEPS
            return await super()._call(tool, arguments)

    return Deviator


def _ancestors(outline: Analysis, statement: Statement) -> list[Statement]:
    found, parent = [], statement.parent
    while parent is not None and parent in outline.statements:
        found.append(outline.statements[parent])
        parent = outline.statements[parent].parent
    return found


def _construct(outline: Analysis, judged: str) -> str:
    """The statement a verdict's statement decides: ``2.if0`` decides ``2``."""
    statement = outline.statements[judged]
    return statement.parent if statement.kind == "condition" and statement.parent else judged


def _inside(statement: str, construct: str) -> bool:
    return statement.startswith((construct + ".", construct + "|"))


def _branch(statement: str, construct: str) -> str:
    """The branch label of ``statement`` under an if/choice ``construct`` (``b0``, ``else``)."""
    return statement[len(construct) + 1:].split(".")[0]


def plan(steps: list[Step], outline: Analysis) -> list[Deviation]:
    """At most one deviation of each kind, the first place it applies."""
    found: dict[str, Deviation] = {}

    def add(kind: str, at: int, step: Step, expect: list[str]) -> None:
        if kind not in found:
            args = dict(step.args)
            found[kind] = Deviation(at, kind, step.tool, args, expect)

    spawns = [i for i, s in enumerate(steps) if s.tool == "spawn_session"]
    if spawns:  # a changed prompt, at a session in the middle of the walk
        i = spawns[len(spawns) // 2]
        changed = Step("spawn_session", dict(steps[i].args,
                                             prompt=steps[i].args["prompt"] + " (and more)"))
        add("changed prompt", i, changed, [r"the prompt differs from the program's"])
    for k, cur in enumerate(steps):
        nxt = steps[k + 1] if k + 1 < len(steps) else None
        st = outline.statements.get(cur.statement)
        later = outline.statements.get(nxt.statement) if nxt is not None else None
        if cur.tool == "record_verdict" and nxt is not None and nxt.tool == "spawn_session" \
                and st is not None and later is not None and nxt.frame == cur.frame \
                and not any(a.kind in CONCURRENT for a in [*_ancestors(outline, st),
                                                           *_ancestors(outline, later)]):
            add("verdict missing", k, nxt, [r"is not next", cur.expected()])
            construct = _construct(outline, cur.statement)
            if _inside(nxt.statement, construct):
                kind = outline.statements[construct].kind
                if kind in ("if", "choice"):
                    chosen = _branch(nxt.statement, construct)
                    other = next((s for s in outline.statements.values()
                                  if s.kind in ("session", "resume")
                                  and _inside(s.id, construct)
                                  and _branch(s.id, construct) != chosen
                                  and _ancestors(outline, s)[0].kind not in CONCURRENT), None)
                    if other is not None:
                        add("other branch taken", k + 1, Step("spawn_session", dict(
                            nxt.args, statement=other.id, prompt="")),
                            [r"is not next", r"the verdict recorded for", nxt.expected()])
        if cur.tool != "spawn_session" or st is None:
            continue
        ancestors = _ancestors(outline, st)
        if any(a.kind in CONCURRENT for a in ancestors):
            continue
        if nxt is not None and nxt.tool == "spawn_session" and nxt.frame == cur.frame \
                and nxt.statement != cur.statement and later is not None \
                and later.parent == st.parent and later.line > st.line \
                and later.id.rsplit(".", 1)[0] == st.id.rsplit(".", 1)[0]:
            add("statement skipped", k, nxt, [r"is not next", cur.expected()])
        if nxt is not None and nxt.tool == "spawn_session" and nxt.statement == cur.statement:
            continue  # the same statement is next anyway (another round)
        again = Step("spawn_session", dict(cur.args, prompt=""))
        # in a block call that has ended the frame is refused first (it was popped)
        expect = [r"is not next.*(" + (nxt.expected() if nxt is not None else "complete_run")
                  + r")|frame \d+ was popped"]
        in_loop = any(a.kind in LOOPS for a in ancestors)
        rerun = any(s.tool == "spawn_session" and s.statement == cur.statement
                    and s.frame == cur.frame for s in steps[k + 1:])
        if in_loop and not rerun:
            add("loop round too many", k + 1, again, expect)
        elif not in_loop:
            add("statement started twice", k + 1, again,
                [*expect, r"has already run here|frame \d+ was popped"])
    return sorted(found.values(), key=lambda d: d.at)


@dataclass
class Checked:
    """What one program's check found."""

    run_id: str = ""
    status: str = ""
    steps: int = 0
    deviations: list[Deviation] = field(default_factory=list)


def check_program(root: Path, name: str, source: str, script: dict[str, Any],
                  era: dict[str, Any] | None = None) -> Checked:
    """Walk ``name`` correctly, then with deviations; both runs must equal ``prose run``'s.
    Raises on a granted deviation or a refusal that does not name what was expected."""
    from tests.mcp_server.test_host_walk import assert_same_run

    program = compile_or_raise(source, name)
    inputs = {decl.name: f"sample {decl.name}" for decl in program.inputs}
    roots = {part: root / part for part in ("engine", "walk", "deviate")}
    for path in roots.values():
        path.mkdir(parents=True)
        (path / name).write_text(source)
    outcome = engine_run(roots["engine"], source, name, inputs, script)
    recorded: list[Recorder] = []

    class Recording(Recorder):
        def __init__(self, server: Any, era_: dict[str, Any]) -> None:
            super().__init__(server, era_)
            recorded.append(self)

    server = create_server(roots["walk"], home=root / "home", watch=False)
    run_id, status, _ = walk(server, era or {}, source, name, inputs, script,
                             bridge_type=Recording, concurrency=1)
    assert status == outcome.status, (status, outcome.status, outcome.error)
    assert_same_run(roots["walk"], run_id, roots["engine"], outcome.run_id)

    steps = recorded[0].steps
    deviations = plan(steps, analyze(program, source))
    server = create_server(roots["deviate"], home=root / "home", watch=False)
    run_id, status, _ = walk(server, era or {}, source, name, inputs, script,
                             bridge_type=deviating(deviations), concurrency=1)
    assert status == outcome.status
    assert_same_run(roots["deviate"], run_id, roots["engine"], outcome.run_id)
    for deviation in deviations:
        assert deviation.refusal, f"{deviation.kind} at step {deviation.at} was never made"
        for pattern in deviation.expect:
            assert re.search(pattern, deviation.refusal), \
                f"{deviation.kind} at step {deviation.at}: {pattern!r} not in " \
                f"{deviation.refusal!r}"
    return Checked(run_id, status, len(steps), deviations)
