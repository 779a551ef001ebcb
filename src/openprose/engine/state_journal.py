"""The interpreter's journal on :mod:`openprose.state` (its public API only).

Each session: an intent record, a session capability for exactly its binding (plus its
agent's memory when persistent), then binding and result committed as one durable step.
``state.md`` is re-rendered from progress events at most every ``render_interval`` seconds
and when the run ends (it is derived data; the journal is what resume trusts).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from openprose import state
from openprose.engine.events import Event
from openprose.engine.imports import Imported
from openprose.engine.journal import Recorded, SessionSpec
from openprose.engine.parallel import JoinDecision
from openprose.engine.provider import ContextItem, Usage
from openprose.engine.values import Value, to_text
from openprose.language import nodes as n

# Rendering may take at most about 1/RENDER_SHARE of the run's wall time.
RENDER_SHARE = 50
#: Seconds at least between two renders of state.md while a run goes.
RENDER_INTERVAL = 0.5
# Sessions opened in one write at most: the first of many starting together need not wait
# for the writes of all the others.
OPEN_BATCH = 32
_KINDS = {"let", "const", "output", "input", "param"}
_STATUS = {"session_start": "executing", "session_retry": "retrying",
           "session_end": "complete", "session_reused": "complete",
           "session_failed": "failed", "cancelled": "cancelled"}


Item = TypeVar("Item")
Result = TypeVar("Result")


class _IO:
    """The provider's view of one session capability."""

    def __init__(self, handle: state.SessionHandle, items: tuple[ContextItem, ...]) -> None:
        self.handle = handle
        self.items = {item.name: item.text for item in items}
        self.wrote = False

    def read_context(self, name: str) -> str:
        try:
            return self.handle.read_context(name)
        except (state.NotFoundError, state.CapabilityError):
            if name in self.items:  # a loop variable or literal: no binding to read
                return self.items[name]
            raise

    def write_output(self, text: str) -> None:
        self.handle.write_output(text)
        self.wrote = True

    def output_location(self) -> str:
        return self.handle.run.binding_location(self.handle.binding)

    def read_memory(self) -> str | None:
        return self.handle.read_memory()

    def write_memory(self, text: str) -> None:
        self.handle.write_memory(text)

    def tag(self, host_token: str) -> None:
        """The host knows this session by ``host_token``: note it with the grant (for the
        host's permission hook)."""
        self.handle.run.tag_grant(self.handle.token, host_token)

    def memory_owner(self) -> tuple[str, str]:
        """The persistent agent this session speaks for, and where its memory lives."""
        location = self.handle.memory_location()
        return self.handle.agent.name, location  # type: ignore[union-attr]


class _OpenSession:
    def __init__(self, journal: StateJournal, spec: SessionSpec, grant: state.SessionGrant,
                 io: _IO) -> None:
        self.journal, self.spec, self.grant, self.io = journal, spec, grant, io

    def binding_location(self, name: str, execution_id: int | None) -> str:
        return self.journal.location(name, execution_id)

    def finish(self, output: str | None, usage: Usage) -> str:
        """Commit now, on this thread (nothing else is in flight)."""
        self._append_segment(output)
        done = self._completion(output, usage)
        binding = self.journal.run.complete_session(done.token, done.key,
                                                    input_hash=done.input_hash,
                                                    value=done.value, usage=done.usage)
        return self._committed(binding)

    async def finish_batched(self, output: str | None, usage: Usage) -> str:
        """Commit together with the other sessions finishing around the same time."""
        if self.spec.persist is not None:
            await asyncio.to_thread(self._append_segment, output)
        binding = await self.journal.committer.submit(self._completion(output, usage))
        return self._committed(binding)

    def _append_segment(self, output: str | None) -> None:
        if self.spec.persist is not None and self.io.handle.agent is not None:
            self.io.handle.append_segment(output if output is not None else "(written)")

    def _completion(self, output: str | None, usage: Usage) -> state.Completion:
        return state.Completion(
            self.grant.token, self.spec.key, self.spec.input_hash,
            None if self.io.wrote and output is None else (output or ""),
            state.Usage(usage.input_tokens, usage.output_tokens, usage.cost_usd))

    def _committed(self, binding: state.Binding) -> str:
        if self.journal.on_commit is not None:
            self.journal.on_commit(self.spec.key)
        return binding.value

    def abort(self, error: str) -> None:
        run = self.journal.run
        status = "cancelled" if error == "cancelled" else "failed"
        run.record_result(self.spec.key, input_hash=self.spec.input_hash, status=status,
                          error=error)
        run.end_session(self.grant.token)


class Batcher(Generic[Item, Result]):
    """Group writes that arrive while one is under way: the next write takes them all (or
    the first ``max_batch``), on a worker thread so the event loop keeps going. ``write``
    gets a batch and returns one result per item (a value, or the exception for that item).
    ``orphan`` is called with the result of an item whose waiter was cancelled meanwhile."""

    def __init__(self, write: Callable[[list[Item]], list[Result | Exception]],
                 orphan: Callable[[Result], None] | None = None,
                 max_batch: int | None = None) -> None:
        self.write = write
        self.orphan = orphan
        self.max_batch = max_batch
        self.waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self.writer: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self.waiting.append((item, future))
        if self.writer is None:
            self.writer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.waiting:
                cut = self.max_batch or len(self.waiting)
                batch, self.waiting = self.waiting[:cut], self.waiting[cut:]
                try:
                    results = await asyncio.to_thread(self.write, [item for item, _ in batch])
                except Exception as err:  # nothing was written: every waiter learns why
                    results = [err] * len(batch)
                for (_, future), result in zip(batch, results, strict=True):
                    failed = isinstance(result, Exception)
                    if future.done():  # its waiter was cancelled meanwhile
                        if self.orphan is not None and not failed:
                            self.orphan(result)
                    elif failed:
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self.writer = None

    async def settle(self) -> None:
        """Wait until nothing is being written (before the run is finished and closed)."""
        while self.writer is not None:
            await asyncio.shield(self.writer)


class StateJournal:
    def __init__(self, run: state.Run, on_commit: Callable[[str], None] | None = None,
                 render_interval: float = RENDER_INTERVAL, hold_renders: bool = False) -> None:
        self.run = run
        #: state.md is not rendered until new work starts (see :meth:`new_work`).
        self.hold_renders = hold_renders
        # Sessions that start or finish while others are in flight share one write.
        self.opener: Batcher[SessionSpec, _OpenSession] = Batcher(
            self.open_sessions, lambda opened: opened.abort("cancelled"),
            max_batch=OPEN_BATCH)
        self.committer: Batcher[state.Completion, state.Binding] = Batcher(
            self.run.complete_sessions)  # type: ignore[arg-type]
        self.writes_wait = run.store.writes_wait
        self.on_commit = on_commit
        self.render_interval = render_interval
        self.statuses: dict[int, state.StatementStatus] = {}
        self.render_due = 0.0

    # ----------------------------------------------------------------------- sessions

    def session_result(self, key: str) -> Recorded | None:
        entry = self.run.journal(key)
        if entry is None:
            return self.followed_session(key)
        if entry.kind != "result" or entry.status != "completed":
            return None
        return Recorded(entry.input_hash, entry.value)

    def followed_session(self, key: str) -> Recorded | None:
        """The session an embodied host did at ``key`` (see ``state.FOLLOWED_STEP``)."""
        note = self.run.journal(state.FOLLOWED_STEP + key)
        if note is None or "session" not in note.meta:
            return None
        done = self.run.journal(note.meta["session"])
        if done is None or done.kind != "result" or done.status != "completed" \
                or done.binding is None:
            return None
        return Recorded(note.meta["hash"], self.run.read_binding(done.binding).value)

    def open_session(self, spec: SessionSpec) -> _OpenSession:
        opened = self.open_sessions([spec])[0]
        if isinstance(opened, Exception):
            raise opened
        return opened

    async def open_session_batched(self, spec: SessionSpec) -> _OpenSession:
        return await self.opener.submit(spec)

    def open_sessions(self, specs: list[SessionSpec]) -> list[_OpenSession | Exception]:
        """Intent records and capabilities for sessions about to call the model."""
        self.new_work()
        starts = []
        for spec in specs:
            name = spec.binding or self.run.next_anonymous()
            kind = spec.kind if spec.binding and spec.kind in _KINDS else "anonymous"
            agent = state.AgentRef.of(spec.agent, spec.persist) if spec.agent and spec.persist else None
            starts.append(state.SessionStart(
                spec.key, spec.input_hash, state.BindingRef(name, spec.execution_id), kind,
                spec.source, tuple(state.BindingRef(c, eid) for c, eid in spec.context), agent,
                {"line": spec.line}, spec.work, spec.host_token))
        opened: list[_OpenSession | Exception] = []
        for spec, grant in zip(specs, self.run.start_sessions(starts), strict=True):
            if isinstance(grant, Exception):
                opened.append(grant)
            else:
                handle = self.run.store.session(grant.token)
                opened.append(_OpenSession(self, spec, grant, _IO(handle, spec.items)))
        return opened

    # ----------------------------------------------------------------------- verdicts

    def verdict(self, key: str) -> Recorded | None:
        entry = self.run.verdict(key)
        if entry is not None:
            return Recorded(entry.input_hash, entry.value, entry.reason)
        note = self.run.journal(state.FOLLOWED_STEP + key)  # an embodied host's verdict
        if note is None or "value" not in note.meta:
            return None
        return Recorded(note.meta["hash"], note.meta["value"], note.meta.get("reason", ""))

    def record_verdict(self, key: str, input_hash: str, value: bool | str, reason: str,
                       source: str, line: int) -> None:
        self.new_work()
        self.run.record_verdict(key, input_hash, value, reason)

    def decision(self, key: str, branches: int) -> JoinDecision | None:
        entry = self.run.decision(key)
        return None if entry is None else JoinDecision.from_json(entry.value, branches)

    def record_decision(self, key: str, decision: JoinDecision) -> None:
        self.run.record_decision(key, decision.to_json())

    # ----------------------------------------------------------------------- bindings, frames

    def bind(self, name: str, value: Value, kind: str, execution_id: int | None,
             source: str) -> None:
        if kind == "input" and self._holds(state.BindingRef(name, execution_id), value):
            return  # bound before (a resume reaches it again): once is enough
        self.run.write_binding(state.BindingRef(name, execution_id), to_text(value),
                               kind if kind in _KINDS else "let", source)

    def _holds(self, ref: state.BindingRef, value: Value) -> bool:
        try:
            return self.run.read_binding(ref).value == to_text(value)
        except state.NotFoundError:
            return False

    def reuse(self, name: str, value: Value, kind: str, execution_id: int | None,
              source: str) -> None:
        """Put a reused session's value back in its binding when something wrote over it
        since (a resumed run re-executes the ``let`` before it, say), so a model reading the
        binding sees what the run's own values say."""
        ref = state.BindingRef(name, execution_id)
        if not self._holds(ref, value):
            self.run.write_binding(ref, to_text(value), kind if kind in _KINDS else "let",
                                   source)

    def location(self, name: str, execution_id: int | None) -> str:
        try:
            return self.run.binding_location(state.BindingRef(name, execution_id))
        except state.InvalidNameError:
            return name

    def has_memory(self, agent: str, persist: str) -> bool:
        return self.run.has_memory(state.AgentRef.of(agent, persist))

    def push_frame(self, block: str, args: dict[str, Value], parent: int | None,
                   max_depth: int, key: str) -> int:
        frame = self.run.push_frame(block, {k: to_text(v)[:200] for k, v in args.items()},
                                    parent, max_depth, key)
        return frame.execution_id

    def pop_frame(self, execution_id: int) -> None:
        self.run.pop_frame(execution_id)

    def note(self, key: str, status: str, source: str, line: int) -> None:
        self.run.record_result(key, status=status)

    def record_tool(self, key: str, call: dict[str, Any]) -> None:
        self.run.record_tool(key, call)

    def record_imports(self, imports: dict[str, Imported]) -> None:
        for alias, imported in imports.items():
            program = imported.program
            self.run.record_import(state.ImportRecord(
                alias, imported.file,
                "sha256:" + hashlib.sha256(imported.source.encode()).hexdigest(),
                {decl.name: decl.prompt.text for decl in program.inputs},
                tuple(s.name for s in program.body if isinstance(s, n.Output) and s.name)))

    def child(self, handle: str, program_text: str) -> StateJournal:
        owner, _, slug = handle.partition("--")
        return StateJournal(self.run.child(owner, slug or owner, program_text), self.on_commit,
                            self.render_interval, self.hold_renders)

    # ----------------------------------------------------------------------- state.md

    def on_event(self, event: Event) -> None:
        status = _STATUS.get(event.kind)
        if status is None:
            return
        if event.kind == "session_failed" and event.text == "cancelled":
            status = "cancelled"  # stopped by a failing sibling or Ctrl-C, not failed itself
        self.statuses[event.line] = state.StatementStatus(event.line, event.line, status)
        if not self.hold_renders and time.monotonic() >= self.render_due:
            self.render()

    def new_work(self) -> None:
        """The run does something it had not done before: state.md follows it from now."""
        self.hold_renders = False

    def render(self) -> None:
        """Re-render state.md; the next render waits long enough that rendering (which grows
        with the number of bindings) stays a small share of the run's time."""
        started = time.monotonic()
        self.run.update_state(self._snapshot())
        cost = time.monotonic() - started
        self.render_due = time.monotonic() + max(self.render_interval, cost * RENDER_SHARE)

    def _snapshot(self) -> state.StateSnapshot:
        return state.StateSnapshot(tuple(self.statuses[line] for line in sorted(self.statuses)))

    async def settle(self) -> None:
        """Wait for batched writes still under way (before finishing the run)."""
        await self.opener.settle()
        await self.committer.settle()

    def finish(self, status: str, error: str | None) -> None:
        """Record the outcome with its render (state.md shows the status and error)."""
        self.hold_renders = False
        self.run.finish(status, error, self._snapshot())


def recorded_inputs(run: state.Run, program: n.Program) -> dict[str, Value]:
    """The input values a run was started with (its input bindings)."""
    inputs: dict[str, Value] = {}
    for decl in program.inputs:
        try:
            inputs[decl.name] = run.read_binding(state.BindingRef(decl.name)).value
        except state.NotFoundError:
            continue
    return inputs
