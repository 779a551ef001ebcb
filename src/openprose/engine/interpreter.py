"""The interpreter: runs a validated program exactly, one visit method per AST node.

Control flow is computed here; model calls happen only for sessions (through the provider)
and for ``**conditions**`` (a verdict). Every session and verdict goes through the
:class:`~openprose.engine.journal.Journal` under a stable resume key (see :mod:`keys`), so a
resumed run reuses what already finished.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from openprose.engine import inputs as input_rules
from openprose.engine import judging, keys, values
from openprose.engine.errors import (
    BudgetExhausted,
    InputPaused,
    MemoryMissing,
    MissingInput,
    ProgramError,
    ProviderError,
    RecursionLimitExceeded,
    ResumeMismatch,
    RunawayLoop,
    SessionFailed,
    ThrownError,
    ValueFault,
)
from openprose.engine.events import Event, Listener
from openprose.engine.imports import Imported
from openprose.engine.journal import Journal, OpenSession, SessionSpec
from openprose.engine.parallel import join, replay
from openprose.engine.permissions import Permissions, grant_fields, permissions_for
from openprose.engine.provider import (
    ContextItem,
    JudgeRequest,
    Provider,
    SessionRequest,
    Usage,
)
from openprose.engine.retry import RetryPolicy, Sleep, real_sleep
from openprose.engine.scope import Scope, Slot
from openprose.engine.sessions import shape
from openprose.engine.values import Value
from openprose.engine.work_tools import WorkSetup, WorkTools
from openprose.language import nodes as n
from openprose.language import paths
from openprose.language.analysis import Analysis, NodeVisitor, analyze

#: Turns of the event loop at most that :func:`after_ready_work` gives way for.
READY_TURNS = 8


def nothing_ready() -> bool:
    """Whether the running event loop has nothing ready to run besides the caller: no task
    can move until an answer, I/O or a timer comes, so waiting more turns changes nothing.
    False when the loop does not say (asyncio's own loop keeps a ready queue)."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    return ready is not None and not ready


async def one_turn() -> None:
    """A turn of the event loop for whoever shares it."""
    await asyncio.sleep(0)


async def after_ready_work() -> None:
    """Turns of the event loop until nothing else is ready (at most :data:`READY_TURNS`):
    in a server, the reply to the call that let the engine go on (a host's write_binding,
    answered once the session's commit is durable) reaches the transport before the engine
    sets up its next statement, instead of waiting for it. Only the order changes: a host's
    next call waits for what it needs (next_step for the item to be pending)."""
    for _ in range(READY_TURNS):
        await asyncio.sleep(0)
        if nothing_ready():
            return


@dataclass(slots=True)
class Options:
    """Run-wide knobs. ``ask`` prompts for a missing input (``None``: not interactive)."""

    max_concurrency: int = 16
    sleep: Sleep = real_sleep
    retry_base_delay: float = 1.0
    loop_limit: int = 1000
    #: ``ask(name, prompt)`` -> the value, ``None`` (no answer), or an awaitable of either.
    ask: Callable[[str, str], Any] | None = None
    listener: Listener | None = None
    #: Work tools for sessions (files, shell, web) and their permission policy.
    work: WorkSetup | None = None
    #: The run's token and cost limits (``None``: none).
    budget: RunBudget | None = None
    #: What each statement awaits first: a turn of the event loop for whoever shares it (a
    #: program that only computes awaits nothing else, and would hold the loop until it
    #: ended); :func:`after_ready_work` in a server.
    turn: Callable[[], Awaitable[None]] = one_turn


@dataclass(slots=True)
class RunBudget:
    """At most ``max_tokens`` tokens (input and output) and ``max_cost`` US dollars for the
    whole run, ``spent`` counting what it used before this process drove it."""

    max_tokens: int | None = None
    max_cost: float | None = None
    spent: Usage = field(default_factory=Usage)

    def exceeded(self, used: Usage) -> str | None:
        """Why no new session may start after ``used`` more, or ``None``."""
        total = self.spent + used
        tokens = total.input_tokens + total.output_tokens
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return (f"the run has used {tokens:,} tokens, its --max-tokens is "
                    f"{self.max_tokens:,}")
        if self.max_cost is not None and total.cost_usd >= self.max_cost:
            return (f"the run has cost ${total.cost_usd:.4f}, its --max-cost is "
                    f"${self.max_cost:.4f}")
        return None


@dataclass(frozen=True, slots=True)
class CallFrame:
    block: str
    execution_id: int
    depth: int


@dataclass(frozen=True, slots=True)
class Ctx:
    """Where execution is: scope, resume path, block frame, the error a catch handles."""

    scope: Scope
    path: str
    frame: CallFrame | None = None
    error: ProgramError | None = None

    def at(self, path: str) -> Ctx:
        return replace(self, path=path)

    @property
    def execution_id(self) -> int | None:
        return self.frame.execution_id if self.frame else None


@dataclass(frozen=True, slots=True)
class Target:
    """Where a value goes: the binding a session writes (``name`` None: anonymous)."""

    name: str | None
    kind: str = "let"
    carry: Value = None


@dataclass(slots=True)
class Totals:
    sessions: int = 0
    reused: int = 0
    in_flight: int = 0
    usage: Usage = field(default_factory=Usage)
    typical_call: float = 0.0  # seconds a provider call takes, a moving average

    def note_call(self, seconds: float) -> None:
        self.typical_call += (seconds - self.typical_call) * (0.1 if self.typical_call else 1)


class Interpreter(NodeVisitor):
    def __init__(
        self,
        program: n.Program,
        source: str,
        journal: Journal,
        provider: Provider,
        *,
        file: str | None = None,
        inputs: dict[str, Value] | None = None,
        imports: dict[str, Imported] | None = None,
        options: Options | None = None,
        semaphore: asyncio.Semaphore | None = None,
        totals: Totals | None = None,
        root_path: str = "",
        analysis: Analysis | None = None,
    ) -> None:
        self.program = program
        self.analysis = analysis or analyze(program, source)
        self.lines = source.splitlines()
        self.journal = journal
        self.provider = provider
        self.file = file
        self.inputs = dict(inputs or {})
        self.imports = imports or {}
        self.options = options or Options()
        self.semaphore = semaphore or asyncio.Semaphore(self.options.max_concurrency)
        self.totals = totals or Totals()
        self.root_path = root_path
        self.agents = program.agents
        self.blocks = program.blocks
        self.outputs: dict[str, Value] = {}
        self.escaped: dict[str, Slot] = {}
        #: The analyses of the imported programs this one has called (each call is a new
        #: interpreter; a program called in a loop is analysed once).
        self.callee_analyses: dict[str, Analysis] = {}

    async def run(self) -> dict[str, Value]:
        """Run the program; return its outputs (``output`` bindings by name)."""
        if self.imports:
            self.journal.record_imports(self.imports)
        if self.options.ask is None:  # inputs ahead of the first step must exist up front
            missing = input_rules.missing(self.program, self.inputs)
            if missing:
                raise MissingInput(*missing)
        await self.body(self.program.body, Ctx(Scope(), self.root_path))
        return self.outputs

    # ----------------------------------------------------------------------- dispatch

    async def body(self, stmts: tuple[n.Node, ...], ctx: Ctx) -> Value:
        value = None
        for i, stmt in enumerate(stmts):
            value = await self.stmt(stmt, ctx.at(paths.child(ctx.path, i)))
        return value

    async def stmt(self, node: n.Node, ctx: Ctx, target: Target | None = None) -> Value:
        self.emit("statement", ctx.path, node,
                  type(node.expr if isinstance(node, n.ExprStmt) else node).__name__)
        failure = ""
        await self.options.turn()
        try:
            return await self.visit(node, ctx, target)
        except ProgramError as err:
            located = err.located(node.span, self.file)
            failure = str(located)
            raise located from None
        except _Return:
            raise
        except asyncio.CancelledError:
            failure = "cancelled"
            raise
        except BaseException as err:  # paused, over budget: the statement stops
            failure = str(err) or type(err).__name__
            raise
        finally:
            self.emit("statement_end", ctx.path, node, failure)

    prefix = "v_"  # NodeVisitor: visit(node, ctx, target) calls v_<Node>(node, ctx, target)

    def visit(self, node: n.Node, ctx: Ctx, target: Target | None = None) -> Any:
        return super().visit(node, ctx, target)

    def generic_visit(self, node: n.Node, *args: object, **kwargs: object) -> None:
        raise TypeError(f"the engine does not run {type(node).__name__} nodes")

    def emit(self, kind: str, key: str, node: n.Node, text: str = "", tokens: int = 0,
             **detail: Any) -> None:
        if self.options.listener is not None:
            self.options.listener(Event(kind, key, node.span.line, text, tokens, **detail))

    def source_of(self, node: n.Node) -> str:
        return "\n".join(self.lines[node.span.line - 1 : node.span.end_line])

    # ----------------------------------------------------------------------- declarations

    async def v_Use(self, node: n.Use, ctx: Ctx, target: Target | None) -> None:
        return None

    v_ImportSkill = v_AgentDef = v_BlockDef = v_Use

    async def v_Input(self, node: n.Input, ctx: Ctx, target: Target | None) -> Value:
        if node.name in self.inputs:
            value = self.inputs[node.name]
        else:
            prompt = node.prompt if isinstance(node.prompt, n.String) else \
                _discretion_string(node.prompt)
            description = self.interpolate(prompt, ctx.scope)
            asked = self.options.ask(node.name, description) if self.options.ask else None
            if inspect.isawaitable(asked):
                asked = await asked
            if asked is None and input_rules.is_optional(description):
                asked = ""
            if asked is None:
                if node in input_rules.upfront(self.program):
                    raise MissingInput((node.name, description))
                raise InputPaused(node.name, description)
            value = self.inputs[node.name] = asked
        ctx.scope.bind(node.name, value, "input")
        self.journal.bind(node.name, value, "input", ctx.execution_id, self.source_of(node))
        return value

    # ----------------------------------------------------------------------- bindings

    async def v_Let(self, node: n.Let, ctx: Ctx, target: Target | None) -> Value:
        if isinstance(node.target, n.Destructure):
            value = await self.visit(node.value, ctx)
            for name in node.target.names:
                part = values.member(value, name)
                ctx.scope.bind(name, part, node.kind)
                self.journal.bind(name, part, node.kind, ctx.execution_id, self.source_of(node))
            return value
        return await self.bind(node.target, node.kind, node.value, node, ctx)

    async def v_Assign(self, node: n.Assign, ctx: Ctx, target: Target | None) -> Value:
        slot = ctx.scope.find(node.target)
        if slot is not None and slot.kind == "const":
            raise ValueFault(f"cannot reassign const '{node.target}'")
        value = await self.evaluate(node.value, ctx, Target(node.target))
        ctx.scope.assign(node.target, value)
        if not isinstance(node.value, n.Session):
            self.journal.bind(node.target, value, "let", ctx.execution_id, self.source_of(node))
        return value

    async def v_Output(self, node: n.Output, ctx: Ctx, target: Target | None) -> Value:
        if node.name is None:
            value = await self.evaluate(node.value, ctx)
            if ctx.frame is not None:
                raise _Return(value)
            return value
        value = await self.bind(node.name, "output", node.value, node, ctx)
        if self.analysis.is_program_output(node):  # a block's named output is its own
            self.outputs[node.name] = value
        return value

    async def bind(self, name: str, kind: str, expr: n.Node, stmt: n.Node, ctx: Ctx) -> Value:
        """Evaluate ``expr`` into binding ``name``: a session writes it; otherwise the VM does."""
        value = await self.evaluate(expr, ctx, Target(name, kind))
        ctx.scope.bind(name, value, kind)
        if not isinstance(expr, n.Session):
            self.journal.bind(name, value, kind, ctx.execution_id, self.source_of(stmt))
        return value

    async def evaluate(self, node: n.Node, ctx: Ctx, target: Target | None = None) -> Value:
        """Evaluate an expression (compound statements used as values get their location)."""
        if isinstance(node, n.Session | n.Parallel | n.Loop | n.For | n.Repeat | n.Try
                      | n.If | n.Choice | n.DoBlock):
            return await self.stmt(node, ctx, target)
        return await self.visit(node, ctx, target)

    async def v_ExprStmt(self, node: n.ExprStmt, ctx: Ctx, target: Target | None) -> Value:
        return await self.visit(node.expr, ctx, target)

    # ----------------------------------------------------------------------- simple values

    async def v_String(self, node: n.String, ctx: Ctx, target: Target | None) -> str:
        return self.interpolate(node, ctx.scope)

    async def v_Number(self, node: n.Number, ctx: Ctx, target: Target | None) -> Value:
        return node.value

    v_Boolean = v_Number

    async def v_Null(self, node: n.Null, ctx: Ctx, target: Target | None) -> None:
        return None

    async def v_Name(self, node: n.Name, ctx: Ctx, target: Target | None) -> Value:
        return self.lookup(ctx.scope, node.id)

    async def v_Member(self, node: n.Member, ctx: Ctx, target: Target | None) -> Value:
        return values.member(await self.visit(node.obj, ctx), node.attr)

    async def v_Index(self, node: n.Index, ctx: Ctx, target: Target | None) -> Value:
        return values.index(await self.visit(node.obj, ctx), await self.visit(node.index, ctx))

    async def v_Array(self, node: n.Array, ctx: Ctx, target: Target | None) -> list[Value]:
        return [await self.evaluate(item, ctx.at(paths.item(ctx.path, i)))
                for i, item in enumerate(node.items)]

    async def v_Object(self, node: n.Object, ctx: Ctx, target: Target | None) -> dict:
        return {e.key: await self.evaluate(e.value, ctx.at(paths.entry(ctx.path, i)))
                for i, e in enumerate(node.entries)}

    async def v_BinaryOp(self, node: n.BinaryOp, ctx: Ctx, target: Target | None) -> Value:
        left = await self.visit(node.left, ctx)
        if node.op == "and":
            return values.truthy(left) and values.truthy(await self.visit(node.right, ctx))
        if node.op == "or":
            return values.truthy(left) or values.truthy(await self.visit(node.right, ctx))
        return values.binary(node.op, left, await self.visit(node.right, ctx))

    async def v_UnaryOp(self, node: n.UnaryOp, ctx: Ctx, target: Target | None) -> Value:
        operand = await self.visit(node.operand, ctx)
        if node.op == "not":
            return not values.truthy(operand)
        return -values.to_number(operand)

    async def v_Discretion(self, node: n.Discretion, ctx: Ctx, target: Target | None) -> bool:
        return bool(await self.judge(node, ctx, paths.judgment(ctx.path, 0)))

    def lookup(self, scope: Scope, name: str) -> Value:
        """Resolve ``name`` through the scope chain; failing that, a name a finished block
        call bound in its own frame (programs use blocks as procedures that leave results)."""
        if scope.has(name) or name not in self.escaped:
            return scope.lookup(name)
        return self.escaped[name].value

    def interpolate(self, string: n.String, scope: Scope) -> str:
        out = []
        for part in string.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            name = part.path[0]
            if not scope.has(name) and name not in self.escaped:
                out.append("{" + ".".join(part.path) + "}")
                continue
            value = self.lookup(scope, name)
            for attr in part.path[1:]:
                value = values.member(value, attr)
            out.append(values.to_text(value))
        return "".join(out)

    # ----------------------------------------------------------------------- sessions

    async def v_Session(self, node: n.Session, ctx: Ctx, target: Target | None) -> str:
        merged = shape(node, self.agents)
        if merged.prompt is None:
            raise ValueFault("session has neither a prompt nor an agent prompt")
        name = target.name if target else node.label
        kind = target.kind if target else "let"
        prompt = self.interpolate(merged.prompt, ctx.scope)
        system = self.interpolate(merged.system, ctx.scope) if merged.system else None
        items, refs = self.context(merged.context, ctx)
        if target is not None and target.carry is not None:
            items.append(ContextItem("previous", values.to_text(target.carry), "previous step"))
        digest = keys.input_hash(prompt, system, merged.model, node.agent, node.resume,
                                 [(i.name, i.text) for i in items])
        recorded = self.journal.session_result(ctx.path)
        if recorded is not None:
            self.check_same(recorded.input_hash, digest, node)
            self.totals.reused += 1
            self.emit("session_reused", ctx.path, node)
            value = recorded.value
            if name is not None:  # the binding may have been written over since
                self.journal.reuse(name, value, kind, ctx.execution_id, self.source_of(node))
        else:
            value = await self.spawn(node, ctx, merged, name, kind, prompt, system, items, refs,
                                     digest)
        if name is not None and target is None:
            ctx.scope.bind(name, value, "let")
        return value

    async def spawn(self, node: n.Session, ctx: Ctx, merged: Any, name: str | None, kind: str,
                    prompt: str, system: str | None, items: list[ContextItem],
                    refs: tuple[tuple[str, int | None], ...], digest: str) -> str:
        persist = merged.persist if node.agent else None
        if node.resume and not self.journal.has_memory(node.agent or "", persist or "execution"):
            raise MemoryMissing(f"E018: agent '{node.agent}' has no memory yet; start it with "
                                f"'session: {node.agent}' before 'resume: {node.agent}'")
        if persist and not node.resume and self.journal.has_memory(node.agent or "", persist):
            self.emit("warning", ctx.path, node,
                      f"W011 {self.file or '<program>'}:{node.span.line}:{node.span.column}: "
                      f"'session: {node.agent}' starts fresh although the agent has memory "
                      f"(use 'resume: {node.agent}' to continue it)")
        if self.options.budget is not None:
            over = self.options.budget.exceeded(self.totals.usage)
            if over is not None:
                raise BudgetExhausted(f"budget reached: {over}; no new session was started")
        permissions = self.permissions(node, ctx)
        token = self.provider.issue_token()
        spec = SessionSpec(ctx.path, digest, name, kind, ctx.execution_id, self.source_of(node),
                           node.span.line, refs, node.agent if persist else None, persist,
                           tuple(items), grant_fields(node.agent, permissions, ctx.path,
                                                      node.span.line, merged.model), token)
        self.emit("session_opening", ctx.path, node)
        try:
            handle = await self.open_session(spec)
        finally:  # opened or not (its branch cancelled, the write failed): no longer opening
            self.emit("session_opened", ctx.path, node)
        memory = handle.io.read_memory() if node.resume else None
        work = self.work_tools(node, ctx, permissions, merged.skills)
        policy = RetryPolicy(merged.retries, merged.backoff, self.options.retry_base_delay)
        self.totals.in_flight += 1
        self.emit("session_start", ctx.path, node, prompt[:120], model=merged.model,
                  content=prompt)
        failures: list[str] = []
        try:
            for attempt in range(1, policy.attempts + 1):
                request = SessionRequest(
                    key=ctx.path, prompt=prompt, system=system, model=merged.model,
                    agent=node.agent, binding=name, context=tuple(items), memory=memory,
                    persistent=persist is not None, skills=merged.skills, attempt=attempt,
                    permissions=permissions, work=work, failures=tuple(failures),
                    host_token=token if attempt == 1 else None)
                try:
                    async with self.semaphore:
                        self.emit("session_call", ctx.path, node, f"attempt {attempt}")
                        called = time.monotonic()
                        result = await self.provider.run_session(request, handle.io)
                        self.totals.note_call(time.monotonic() - called)
                    self.emit("session_called", ctx.path, node)
                    break
                except ProviderError as err:
                    if not err.retryable or attempt == policy.attempts:
                        handle.abort(str(err))
                        self.emit("session_failed", ctx.path, node, str(err))
                        raise SessionFailed(f"session failed after {attempt} attempt(s): "
                                            f"{err}") from err
                    failures.append(str(err))
                    self.emit("session_retry", ctx.path, node, f"attempt {attempt + 1}",
                              content=str(err))
                    await self.options.sleep(policy.delay(attempt))
        except asyncio.CancelledError:
            handle.abort("cancelled")
            self.emit("session_failed", ctx.path, node, "cancelled")
            raise
        finally:
            self.totals.in_flight -= 1
        if self.totals.in_flight:
            # Others are in flight: commit with them, off the event loop (group commit).
            output = await handle.finish_batched(result.output, result.usage)
        else:
            output = handle.finish(result.output, result.usage)
        self.totals.sessions += 1
        self.totals.usage += result.usage
        tokens = result.usage.input_tokens + result.usage.output_tokens
        self.emit("session_end", ctx.path, node, tokens=tokens, usage=result.usage,
                  content=output or "")
        return output

    def permissions(self, node: n.Session, ctx: Ctx) -> Permissions | None:
        """The session's permissions (``None``: the program gives none). Patterns may
        interpolate bindings or name string consts."""
        return permissions_for(node, self.agents.get(node.agent or ""), lambda item: (
            values.to_text(self.static_value(item, ctx.scope))))

    def work_tools(self, node: n.Session, ctx: Ctx, permissions: Permissions | None,
                   names: tuple[str, ...]) -> WorkTools | None:
        """The session's work tools under ``permissions``, with its skills (``names``, as
        its shape lists them) readable; ``None`` when the run gives sessions none."""
        if self.options.work is None:
            return None
        setup = self.options.work
        skills = {name: setup.skills[name].folder for name in names if name in setup.skills}
        gate = setup.policy.gate(node.agent, permissions, self.source_of(node), skills)
        key = ctx.path
        return setup.tools(gate, lambda record: self.journal.record_tool(
            key, record.to_meta()))

    async def open_session(self, spec: SessionSpec) -> OpenSession:
        """Record the intent and grant the capability; off the event loop while other
        sessions are in flight, so their progress never waits on this write."""
        if not self.totals.in_flight or not self.journal.writes_wait:
            return self.journal.open_session(spec)
        return await self.journal.open_session_batched(spec)

    def context(self, node: n.Node | None, ctx: Ctx
                ) -> tuple[list[ContextItem], tuple[tuple[str, int | None], ...]]:
        """Context items (by value and by reference) and the binding refs to grant."""
        if node is None:
            return [], ()
        if isinstance(node, n.Array):
            entries = [(_label(item), item) for item in node.items]
        elif isinstance(node, n.Object):
            entries = [(e.key, e.value) for e in node.entries]
        elif isinstance(node, n.PropertyBlock):
            entries = [(p.name, p.value) for p in node.properties]
        else:
            entries = [(_label(node), node)]
        items, refs = [], []
        for label, expr in entries:
            value = self.static_value(expr, ctx.scope)
            root = _root_name(expr)
            eid = ctx.scope.execution_id_of(root) if root else None
            location = self.journal.location(root, eid) if root else "inline"
            text = values.to_text(value) if value is not None else "(no value)"
            slot = ctx.scope.find(root) if root else None
            items.append(ContextItem(label, text, location, slot.kind if slot else ""))
            if root:
                refs.append((root, eid))
        return items, tuple(dict.fromkeys(refs))

    def static_value(self, node: n.Node, scope: Scope) -> Value:
        """Context entries are names, member access, strings or literals: no model calls."""
        if isinstance(node, n.Name):
            return self.lookup(scope, node.id)
        if isinstance(node, n.Member):
            return values.member(self.static_value(node.obj, scope), node.attr)
        if isinstance(node, n.Index):
            return values.index(self.static_value(node.obj, scope),
                                self.static_value(node.index, scope))
        if isinstance(node, n.String):
            return self.interpolate(node, scope)
        if isinstance(node, n.Number | n.Boolean):
            return node.value
        if isinstance(node, n.Array):
            return [self.static_value(item, scope) for item in node.items]
        if isinstance(node, n.Object):
            return {e.key: self.static_value(e.value, scope) for e in node.entries}
        return None

    def check_same(self, recorded: str, current: str, node: n.Node) -> None:
        if recorded != current:
            where = f"{self.file or '<program>'}:{node.span.line}:{node.span.column}"
            raise ResumeMismatch(
                f"{where}: this step no longer matches the recorded run (its input changed: "
                f"the program or an earlier result differs); start a new run instead")

    # ----------------------------------------------------------------------- judgments

    async def judge(self, node: n.Node, ctx: Ctx, key: str, options: tuple[str, ...] = (),
                    round_: int = 0, last: Value = None, stmt: n.Node | None = None
                    ) -> bool | str:
        """A verdict on a discretion condition (or any expression, evaluated directly)."""
        if not isinstance(node, n.Discretion):
            value = await self.visit(node, ctx)
            if not options:
                return values.truthy(value)
            text = values.to_text(value).strip().lower()
            for option in options:
                if option.lower() == text:
                    return option
            raise ValueFault(f"choice value {text!r} matches no option")
        text = self.interpolate(_discretion_string(node), ctx.scope)
        digest = keys.input_hash(text, options, round_)
        recorded = self.journal.verdict(key)
        if recorded is not None:
            self.check_same(recorded.input_hash, digest, node)
            self.emit("verdict_reused", key, node, str(recorded.value))
            return recorded.value
        stmt = stmt or node
        budget = judging.REFERENCES if self.provider.judges_by_reference else judging.WHOLE
        program = judging.program_excerpt(self.lines, stmt.span.line, stmt.span.end_line,
                                          node.span.line, budget)
        context, read = judging.context_items(self.visible(ctx.scope, last, round_), budget)
        request = JudgeRequest(key, text, options, context, round_, program, read)
        self.emit("judging", key, node, text)
        try:
            async with self.semaphore:
                verdict = await self.provider.judge(request)
        except ProviderError as err:
            self.emit("verdict_failed", key, node, str(err))
            raise SessionFailed(f"judging {text[:60]!r} failed: {err}") from err
        except asyncio.CancelledError:
            self.emit("verdict_failed", key, node, "cancelled")
            raise
        self.journal.record_verdict(key, digest, verdict.value, verdict.reason,
                                    self.source_of(node), node.span.line)
        self.totals.usage += verdict.usage
        self.emit("verdict", key, node, f"{verdict.value}: {verdict.reason}",
                  usage=verdict.usage)
        return verdict.value

    def visible(self, scope: Scope, last: Value, round_: int) -> Iterator[judging.Seen]:
        """What a judgment sees: the latest loop iteration's result, then every binding in
        scope (and those finished block calls left), most recently written first. Lazy:
        values are rendered only for the bindings the judgment gets."""
        if round_:
            yield judging.Seen(judging.LATEST, "loop result", values.to_text(last),
                               "the loop body's value")
        slots = {name: (slot, eid) for name, slot, eid in scope.visible()}
        for name, slot in self.escaped.items():
            slots.setdefault(name, (slot, None))
        for name, (slot, eid) in sorted(slots.items(), key=lambda kv: -kv[1][0].written):
            text = "(no value)" if slot.value is None else values.to_text(slot.value)
            where = (self.journal.location(name, eid) if slot.kind not in ("loop", "error")
                     else f"{slot.kind} variable (in scope only)")
            yield judging.Seen(name, slot.kind, text, where)

    async def v_If(self, node: n.If, ctx: Ctx, target: Target | None) -> Value:
        for i, branch in enumerate(node.branches):
            key = paths.judgment(paths.condition(ctx.path, i), 0)
            if await self.judge(branch.condition, ctx.at(key), key, stmt=node):
                return await self.body(branch.body, ctx.at(paths.then_body(ctx.path, i)))
        if node.else_body is not None:
            return await self.body(node.else_body, ctx.at(paths.else_body(ctx.path)))
        return None

    async def v_Choice(self, node: n.Choice, ctx: Ctx, target: Target | None) -> Value:
        labels = tuple(self.interpolate(o.label, ctx.scope) for o in node.options)
        key = paths.judgment(ctx.path, 0)
        picked = await self.judge(node.criteria, ctx, key, labels, stmt=node)
        i = labels.index(str(picked))
        return await self.body(node.options[i].body, ctx.at(paths.option(ctx.path, i)))

    # ----------------------------------------------------------------------- loops

    async def v_Repeat(self, node: n.Repeat, ctx: Ctx, target: Target | None) -> list[Value]:
        count = values.to_number(await self.visit(node.count, ctx))
        results = []
        for i in range(int(count)):
            scope = ctx.scope.child(transparent=True)
            if node.index:
                scope.bind_here(node.index, i, "loop")
            sub = replace(ctx, scope=scope, path=paths.iteration(ctx.path, i))
            results.append(await self.body(node.body, sub))
        return results

    async def v_For(self, node: n.For, ctx: Ctx, target: Target | None) -> list[Value]:
        collection = values.items_of(await self.visit(node.collection, ctx))

        async def one(i: int, item: Value, transparent: bool) -> Value:
            scope = ctx.scope.child(transparent=transparent)
            scope.bind_here(node.item, item, "loop")
            if node.index:
                scope.bind_here(node.index, i, "loop")
            sub = replace(ctx, scope=scope, path=paths.iteration(ctx.path, i))
            return await self.body(node.body, sub)

        if node.parallel:
            return await self.fan_out([lambda i=i, x=x: one(i, x, False)
                                       for i, x in enumerate(collection)], ctx, node)
        return [await one(i, item, True) for i, item in enumerate(collection)]

    async def v_Loop(self, node: n.Loop, ctx: Ctx, target: Target | None) -> list[Value]:
        results: list[Value] = []
        last = None
        i = 0
        while True:
            if node.max is not None and i >= node.max:
                break
            if node.mode is not None and node.condition is not None:
                key = paths.judgment(ctx.path, i)
                held = await self.judge(node.condition, ctx.at(key), key, round_=i, last=last,
                                        stmt=node)
                if (node.mode == "until") == bool(held):
                    break
            if node.max is None and i >= self.options.loop_limit:
                raise RunawayLoop(f"loop ran {i} iterations without a (max: N); stopped at the "
                                  f"engine's safety limit")
            scope = ctx.scope.child(transparent=True)
            if node.index:
                scope.bind_here(node.index, i, "loop")
            sub = replace(ctx, scope=scope, path=paths.iteration(ctx.path, i))
            last = await self.body(node.body, sub)
            results.append(last)
            i += 1
        return results

    # ----------------------------------------------------------------------- pipelines

    async def v_Pipeline(self, node: n.Pipeline, ctx: Ctx, target: Target | None) -> Value:
        current: Value = values.items_of(await self.visit(node.source, ctx))
        for k, op in enumerate(node.ops):
            path = paths.stage(ctx.path, k)
            current = await self.pipe(op, current, ctx.at(path))
        return current

    async def pipe(self, op: n.PipeOp, items: list[Value], ctx: Ctx) -> Value:
        def run(i: int, **variables: Value) -> Any:
            sub = replace(ctx, scope=ctx.scope.child(**variables),
                          path=paths.iteration(ctx.path, i))
            return self.body(op.body, sub)

        if op.kind == "reduce":
            if not items:
                return None
            acc = items[0]
            for i, item in enumerate(items[1:], start=1):
                acc = await run(i, **{op.accumulator or "acc": acc, op.variable: item})
            return acc
        if op.kind == "pmap":
            return await self.fan_out([lambda i=i, x=x: run(i, **{op.variable: x})
                                       for i, x in enumerate(items)], ctx, op)
        results = [await run(i, **{op.variable: item}) for i, item in enumerate(items)]
        if op.kind == "filter":
            return [item for item, keep in zip(items, results, strict=True)
                    if values.truthy(keep)]
        return results

    # ----------------------------------------------------------------------- parallel

    async def fan_out(self, makers: list[Callable[[], Any]], ctx: Ctx, node: n.Node
                      ) -> list[Value]:
        """Run iterations concurrently (fail-fast); values in iteration order. Twice the
        concurrency cap are under way at once: one wave calling the model, the next ready.
        An iteration that ends makes room for the next a quarter of a typical model call
        later (50 ms at most): the wave after next is prepared while this one waits on the
        model, not while the event loop is handing this one's slots over."""
        outcome = await join(makers, on_cancel=lambda i: self.cancelled(
            paths.iteration(ctx.path, i), node), window=2 * self.options.max_concurrency,
            refill_delay=lambda: min(self.totals.typical_call / 4, 0.05))
        return [outcome.values.get(i) for i in range(len(makers))]

    def cancelled(self, key: str, node: n.Node) -> None:
        self.journal.note(key, "cancelled", self.source_of(node), node.span.line)
        self.emit("cancelled", key, node)

    async def v_Parallel(self, node: n.Parallel, ctx: Ctx, target: Target | None) -> Value:
        def make(i: int, branch: n.Branch) -> Callable[[], Any]:
            sub = ctx.at(paths.branch(ctx.path, i))
            if branch.name is None:
                return lambda: self.stmt(branch.body, sub)
            body = branch.body.expr if isinstance(branch.body, n.ExprStmt) else branch.body
            return lambda: self.bind(branch.name, "let", body, branch, sub)

        branches = [make(i, b) for i, b in enumerate(node.branches)]

        def on_cancel(i: int) -> None:
            self.cancelled(paths.branch(ctx.path, i), node.branches[i])

        decided = None
        if node.join in ("first", "any"):  # which branches win depends on timing
            decided = self.journal.decision(ctx.path, len(branches))
        if decided is not None:
            outcome = await replay(branches, decided, on_cancel)
        else:
            outcome = await join(
                branches, strategy=node.join, on_fail=node.on_fail, count=node.count,
                on_cancel=on_cancel, on_decide=None if node.join not in ("first", "any")
                else lambda decision: self.journal.record_decision(ctx.path, decision))
        for i, branch in enumerate(node.branches):
            if branch.name is not None and i not in outcome.values:
                ctx.scope.bind(branch.name, None, "let")
        if any(b.name for b in node.branches):
            return {b.name or str(i): outcome.values.get(i) for i, b in enumerate(node.branches)}
        return [outcome.values.get(i) for i in range(len(node.branches))]

    # ----------------------------------------------------------------------- errors

    async def v_Try(self, node: n.Try, ctx: Ctx, target: Target | None) -> Value:
        try:
            value = await self.body(node.body, ctx.at(paths.try_body(ctx.path)))
        except ProgramError as err:
            if node.catch_body is None:
                await self.run_finally(node, ctx)
                raise
            scope = ctx.scope.child(transparent=True)
            if node.catch_name:
                scope.bind_here(node.catch_name, err.message, "error")
            sub = replace(ctx, scope=scope, path=paths.catch_body(ctx.path), error=err)
            try:
                value = await self.body(node.catch_body, sub)
            except ProgramError:
                await self.run_finally(node, ctx)
                raise
        await self.run_finally(node, ctx)
        return value

    async def run_finally(self, node: n.Try, ctx: Ctx) -> None:
        if node.finally_body is not None:
            await self.body(node.finally_body, ctx.at(paths.finally_body(ctx.path)))

    async def v_Throw(self, node: n.Throw, ctx: Ctx, target: Target | None) -> None:
        if node.message is None:
            if ctx.error is not None:
                raise ctx.error
            raise ThrownError("throw outside a catch body has no error to re-raise")
        raise ThrownError(values.to_text(await self.visit(node.message, ctx)))

    # ----------------------------------------------------------------------- composition

    async def v_DoBlock(self, node: n.DoBlock, ctx: Ctx, target: Target | None) -> Value:
        return await self.body(node.body, ctx)

    async def v_Arrow(self, node: n.Arrow, ctx: Ctx, target: Target | None) -> Value:
        value = None
        last = len(node.steps) - 1
        for i, step in enumerate(node.steps):
            name, kind = (target.name, target.kind) if target and i == last else (None, "let")
            value = await self.evaluate(step, ctx.at(paths.sequence_step(ctx.path, i)),
                                        Target(name, kind, value))
        return value

    async def v_DoCall(self, node: n.DoCall, ctx: Ctx, target: Target | None) -> Value:
        block = self.blocks.get(node.block)
        if block is None:
            raise ValueFault(f"undefined block '{node.block}'")
        args = [await self.visit(a, ctx) for a in node.args]
        if len(args) != len(block.params):
            raise ValueFault(f"block '{block.name}' takes {len(block.params)} argument(s), "
                             f"got {len(args)}")
        depth = (ctx.frame.depth if ctx.frame else 0) + 1
        limit = block.depth_limit
        if depth > limit:
            raise RecursionLimitExceeded(f"block '{block.name}' exceeded max_depth {limit}")
        path = paths.call(ctx.path, block.name)
        bound = dict(zip(block.params, args, strict=True))
        eid = self.journal.push_frame(block.name, bound, ctx.execution_id, limit, path)
        scope = Scope(parent=ctx.scope, execution_id=eid)
        for param, value in bound.items():
            scope.bind_here(param, value, "param")
            self.journal.bind(param, value, "param", eid, self.source_of(node))
        frame = CallFrame(block.name, eid, depth)
        try:
            # Its own task: the body starts on a fresh stack, so recursion through any
            # nesting of constructs reaches max_depth instead of Python's recursion limit.
            value = await asyncio.create_task(self.body(block.body, Ctx(scope, path, frame)))
        except _Return as returned:
            value = returned.value
        finally:
            self.journal.pop_frame(eid)
        for name, slot in scope.slots.items():
            if slot.kind != "param":
                self.escaped[name] = slot
        return value

    async def v_ProgramCall(self, node: n.ProgramCall, ctx: Ctx, target: Target | None
                            ) -> dict[str, Value]:
        imported = self.imports.get(node.callee)
        if imported is None:
            raise ValueFault(f"'{node.callee}' is not an imported program")
        args = {a.name: await self.visit(a.value, ctx) for a in node.args}
        analysis = self.callee_analyses.get(node.callee)
        if analysis is None:
            analysis = analyze(imported.program, imported.source)
            self.callee_analyses[node.callee] = analysis
        child = Interpreter(
            imported.program, imported.source, self.journal.child(imported.handle,
                                                                  imported.source),
            self.provider, file=imported.file, inputs=args, imports=imported.imports,
            options=self.options,
            semaphore=self.semaphore, totals=self.totals,
            root_path=paths.call(ctx.path, node.callee), analysis=analysis)
        try:
            return await child.run()
        except MissingInput as err:
            raise ValueFault(f"call of '{node.callee}': {err}") from err


class _Return(Exception):
    """``output expr`` inside a block: return from the block with ``value``."""

    def __init__(self, value: Value) -> None:
        super().__init__("output")
        self.value = value


def _label(node: n.Node) -> str:
    if isinstance(node, n.Name):
        return node.id
    if isinstance(node, n.Member):
        return f"{_label(node.obj)}.{node.attr}"
    return "value"


def _root_name(node: n.Node) -> str | None:
    while isinstance(node, n.Member | n.Index):
        node = node.obj
    return node.id if isinstance(node, n.Name) else None


def _discretion_string(node: n.Discretion) -> n.String:
    """Discretion text may name bindings as ``{name}``; treat it as a string for that."""
    parts: list[str | n.Interpolation] = []
    text = node.text
    pos = 0
    while (start := text.find("{", pos)) >= 0:
        end = text.find("}", start)
        inner = text[start + 1 : end] if end > start else ""
        if not inner or not all(p.replace("-", "_").isidentifier() for p in inner.split(".")):
            parts.append(text[pos : start + 1])
            pos = start + 1
            continue
        parts.append(text[pos:start])
        parts.append(n.Interpolation(tuple(inner.split(".")), span=node.span))
        pos = end + 1
    parts.append(text[pos:])
    return n.String(tuple(parts), span=node.span)
