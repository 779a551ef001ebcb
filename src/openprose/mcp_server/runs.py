"""Runs a host drives through the tools, and the tokens that drive them.

Token model:
- A **VM token** ``vm.<run id>.<secret>`` drives one run. The server mints it at
  ``start_run``/``resume_run`` and records only its hash, with the run's mode, in the run's
  journal (the ``mcp:driver`` record; the latest one wins), so it survives a server restart;
  ``resume_run`` records a fresh one and the old token stops working.
- A **session token** is the state layer's session capability (``openprose.state``): it writes
  exactly its one binding, reads the bindings it was given as context and, for a persistent
  agent, that agent's memory. It ends when its binding is written.
- A run's **mode** is recorded with its driver: ``host`` (a host model steps it with these
  tools), ``guided`` and ``delegated`` (the server's engine runs it: see
  :mod:`openprose.mcp_server.tools_engine`), and ``engine`` for runs the engine started (no
  driver record), which no VM token drives until ``resume_run`` hands them over explicitly.

Everything a tool writes goes through :mod:`openprose.state`; a :class:`DrivenRun` adds what
the server checks calls against: the outline, live sessions, statement statuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openprose.engine.briefs import Brief
from openprose.engine.journal import Recorded
from openprose.engine.runner import run_inputs, tracing_wanted
from openprose.language import compile as compile_program
from openprose.language.analysis import BINDING_KINDS, Agent, Analysis, Statement, analyze
from openprose.mcp_server.follow import Follower, Replay
from openprose.mcp_server.guided import HostProvider
from openprose.mcp_server.refusal import Refusal
from openprose.mcp_server.resources import RunCatalog
from openprose.mcp_server.transport import descriptor_budget
from openprose.state import (
    FOLLOWED_STEP,
    AgentRef,
    Binding,
    BindingRef,
    CapabilityError,
    DriverHolder,
    DriverLock,
    NotFoundError,
    Run,
    RunLocked,
    RunNotFound,
    SessionHandle,
    StateError,
    StatementStatus,
    StateSnapshot,
)
from openprose.state.view import CHECKER_KEY

if TYPE_CHECKING:
    from openprose.engine.tracing import RunTrace

DRIVER_KEY = "mcp:driver"
STATE_PREFIX = "mcp:state:"
SESSION_PREFIX = "mcp:"
#: What a host does once the followed program failed (run_status and state.md say it).
FAILED_NEXT = ("complete_run with status 'failed' ends the run; resume_run(run_id, "
               "take_over=true) follows the program again from the journal (a failed session "
               "is tried again)")
VM_PREFIX = "vm."
#: Kinds of binding a run never rewrites, by the rule a refusal names: a const's value is
#: fixed, an input's is the caller's (given to start_run or resume_run, or the user's answer).
WRITTEN_ONCE = {"const": "a const is written once",
                "input": "an input is bound once, to the value its caller gave"}
#: The run modes as tools name them (``embodied``: the host is the VM; stored runs from before
#: the one name say ``host``, read as ``embodied``).
HOST, GUIDED, ENGINE = "embodied", "guided", "engine"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def new_vm_token(run_id: str) -> str:
    return f"{VM_PREFIX}{run_id}.{secrets.token_urlsafe(24)}"


def session_key(statement: str, execution_id: int | None, sequence: int) -> str:
    """The journal key of the ``sequence``-th session of ``statement`` in one frame."""
    return f"{SESSION_PREFIX}{statement}@{execution_id or 0}#{sequence}"


def verdict_key(statement: str, execution_id: int | None, iteration: int) -> str:
    return f"{SESSION_PREFIX}{statement}@{execution_id or 0}?{iteration}"


def program_call(outline: Analysis) -> Statement | None:
    """The program's first call of an imported program (None: it calls none). The follower
    of an embodied run does not enter imported programs, so such a program is not followed."""
    return next((s for s in outline.statements.values() if s.kind == "call_program"), None)


def agent_ref(agent: Agent) -> AgentRef | None:
    """Where a persistent agent's memory is (None: the agent is not persistent)."""
    return AgentRef.of(agent.name, agent.persist) if agent.persist is not None else None


@dataclass
class Pending:
    """A session granted and not yet written (``token``: known to the server that granted
    it; a server started later finds the session by its binding)."""

    statement: Statement
    ref: BindingRef
    key: str
    input_hash: str
    token: str | None = None
    #: What the session's subagent is told (``get_brief``); None when granted by an earlier
    #: server, which kept the VM's prompt.
    brief: Brief | None = None
    follows: str | None = None  # the followed program's parked session it answers
    path: str | None = None  # its interpreter key (a followed run's session)


@dataclass
class Driver:
    """The client that drives a run from this server (it started or last resumed or took
    it): its name as its ``initialize`` gave it, since when, and its connection, which
    proves a later call comes from the same client without a token."""

    client: str
    since: str
    connection: weakref.ref[Any] | None = None

    def is_connection(self, connection: object) -> bool:
        return self.connection is not None and self.connection() is connection


@dataclass
class KeptWrite:
    """A session's write, kept to answer a resend with the first confirmation."""

    value_hash: str
    confirmation: Any


@dataclass
class DrivenRun:
    run: Run
    outline: Analysis
    file: str
    mode: str
    vm_hash: str | None
    pending: dict[str, Pending] = field(default_factory=dict)  # by session key
    written: dict[str, KeptWrite] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    sequence: Counter[tuple[str, int]] = field(default_factory=Counter)
    completed: dict[tuple[str, int], BindingRef] = field(default_factory=dict)
    holder: DriverLock | None = None  # the run-driver lock while this server drives it
    follower: Follower | None = None  # the program followed beside an embodied host
    #: Who drives the run, when this server handed it over (start_run, resume_run,
    #: run_program or a cancel_run that took it).
    driver: Driver | None = None
    #: The last hand-over as recorded: (taken by, at).
    taken_over: tuple[str, str] | None = None
    _running: bool = field(default=False, repr=False)

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def status(self) -> str:
        """The run's status. While this server holds the run-driver lock no other driver can
        finish the run, so "running" is read from storage once, not on every call; it is read
        again once the lock is gone (complete_run finishes the run, then releases it)."""
        if self._running and self.holder is not None and self.holder.held:
            return "running"
        status = self.run.status
        self._running = status == "running"
        return status

    @property
    def backend(self) -> str:
        return self.run.store.kind

    def has_memory(self, agent: str) -> bool:
        """Whether the persistent ``agent`` has memory in this run."""
        definition = self.outline.agents.get(agent)
        ref = agent_ref(definition) if definition is not None else None
        return ref is not None and self.run.has_memory(ref)

    # ------------------------------------------------------------------ sessions
    def pending_for(self, token: str, ref: BindingRef) -> Pending | None:
        """The pending session of ``token`` (whose binding is ``ref``)."""
        for pending in self.pending.values():
            if pending.token == token and pending.ref == ref:
                return pending
        found = [p for p in self.pending.values() if p.ref == ref]
        exact = [p for p in found if p.token == token]
        if exact:
            return exact[0]
        unknown = [p for p in found if p.token is None]
        return unknown[0] if unknown else None

    def pending_in(self, statement: str | None, execution_id: int | None) -> list[Pending]:
        """Pending sessions of ``statement`` (None: any) in frame ``execution_id``."""
        return [p for p in self.pending.values()
                if (statement is None or p.statement.id == statement)
                and p.ref.execution_id == execution_id]

    def fail_session(self, pending: Pending, error: str) -> None:
        """Record a pending session as failed and end its token (when known)."""
        self.run.record_result(pending.key, input_hash=pending.input_hash, status="failed",
                               error=error)
        if pending.token is not None:
            self.run.end_session(pending.token)
        del self.pending[pending.key]

    # ------------------------------------------------------------------ checks
    def statement(self, statement_id: str) -> Statement:
        found = self.outline.statements.get(statement_id)
        if found is None:
            raise Refusal("a call names a statement of the run's outline",
                          f"there is no statement {statement_id!r} in run {self.id}")
        return found

    def live(self) -> None:
        status = self.status
        if status != "running":
            raise Refusal("a finished run is not driven any more",
                          f"run {self.id} is {status}")

    def frame_for(self, statement: Statement, execution_id: int | None) -> int | None:
        """``execution_id`` checked as a live frame of the block containing ``statement``
        (None or 0 at the top level); returns it as stored (None for the root)."""
        eid = execution_id or None
        if statement.block is None:
            if eid is not None:
                raise Refusal("a statement runs in a live frame of the block that contains it",
                              f"statement {statement.id} is at the program's top level, not "
                              f"inside a block: leave execution_id out", statement)
            return None
        if eid is None:
            raise Refusal("a statement runs in a live frame of the block that contains it",
                          f"statement {statement.id} is inside block '{statement.block}': give "
                          "the execution_id push_frame returned", statement)
        try:
            frame = self.run.frame(eid)
        except NotFoundError:
            raise Refusal("a statement runs in a live frame of the block that contains it",
                          f"there is no frame {eid} in run {self.id}", statement) from None
        if frame.status == "completed":
            raise Refusal("a statement runs in a live frame of the block that contains it",
                          f"frame {eid} was popped", statement)
        if frame.block != statement.block:
            raise Refusal("a statement runs in a live frame of the block that contains it",
                          f"frame {eid} is a frame of block '{frame.block}', but statement "
                          f"{statement.id} is in block '{statement.block}'", statement)
        return eid

    def resolve(self, name: str, execution_id: int | None) -> Binding | None:
        try:
            return self.run.resolve(name, execution_id)
        except (StateError, ValueError):
            return None

    # ------------------------------------------------------------------ state.md
    def set_status(self, statement: Statement, status: str, record: dict[str, Any]) -> None:
        self.statuses[statement.id] = record
        self.run.record_result(STATE_PREFIX + statement.id, status="state", meta=record)

    def render(self) -> None:
        """Re-render state.md from the statuses the host reported."""
        shown = {"started": "executing", "complete": "complete", "failed": "failed",
                 "skipped": "skipped", "waiting": "waiting"}
        by_line: dict[int, StatementStatus] = {}
        active = []
        for sid, record in self.statuses.items():
            statement = self.outline.statements.get(sid)
            if statement is None:
                continue
            status = record["status"]
            text = shown.get(status, f"iteration {record.get('iteration')}")
            by_line[statement.line] = StatementStatus(statement.line, statement.end_line, text,
                                                      record.get("binding"))
            if status in ("started", "iteration", "waiting") and statement.kind not in (
                    "session", "resume"):
                note = f": {record['note']}" if record.get("note") else ""
                active.append(f"- {statement.kind} at line {statement.line} "
                              f"(statement {sid}): {text}{note}")
        failure = self.follower.failure() if self.follower is not None else None
        if failure is not None and self.run.status == "running":
            active.append(f"- {failure}; {FAILED_NEXT}")
        ordered = tuple(by_line[line] for line in sorted(by_line))
        self.run.update_state(StateSnapshot(ordered, tuple(active)))

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, run: Run) -> DrivenRun:
        """A run as the journal has it: its driver, pending sessions and statuses."""
        file = run.program_path or f"{run.id}/program.prose"
        result = compile_program(run.program_source, run.program_path,
                                 root=run.store.project_root.resolve())
        if not result.ok or result.program is None:
            raise Refusal("a driven run's program compiles",
                          f"the program stored with run {run.id} no longer compiles")
        outline = analyze(result.program, run.program_source)
        driver = run.journal(DRIVER_KEY)
        mode = driver.meta.get("mode", HOST) if driver is not None else ENGINE
        mode = HOST if mode == "host" else mode
        vm_hash = driver.meta.get("vm") if driver is not None else None
        driven = cls(run, outline, file, mode, vm_hash)
        if driver is not None and driver.meta.get("taken_over_by"):
            driven.taken_over = (str(driver.meta["taken_over_by"]),
                                 str(driver.meta.get("taken_over_at", "")))
        ended: set[str] = set()
        intents: dict[str, Any] = {}
        for entry in run.journal_entries():
            if not entry.key.startswith(SESSION_PREFIX):
                continue
            if entry.key.startswith(STATE_PREFIX):
                driven.statuses[entry.key.removeprefix(STATE_PREFIX)] = dict(entry.meta)
            elif entry.kind == "intent":
                intents[entry.key] = entry
            elif entry.kind == "result" and "#" in entry.key:
                ended.add(entry.key)
                if entry.status == "completed" and entry.binding is not None:
                    sid, eid = _statement_of(entry.key)
                    driven.completed[(sid, eid)] = entry.binding
        for key, entry in intents.items():
            sid, eid = _statement_of(key)
            driven.sequence[(sid, eid)] += 1
            statement = outline.statements.get(sid)
            if key not in ended and statement is not None and "binding" in entry.meta:
                ref = BindingRef(*entry.meta["binding"])
                driven.pending[key] = Pending(statement, ref, key, entry.input_hash,
                                              path=entry.meta.get("path"))
        if mode == HOST and run.status == "running" and _in_event_loop():
            driven.follow()
        return driven

    def follow(self) -> None:
        """Follow the program beside the host from where the journal says the run is (not
        for programs that call imported programs)."""
        program = self.outline.program
        if program is None or program_call(self.outline) is not None:
            return
        self.follower = Follower.start(
            self.outline, self.run.program_source, self.file, run_inputs(self.run, program),
            self.has_memory, self.replay(), on_failure=self.checker_failed, on_input=self.bind_input,
            on_value=self.bind_value, trace=self.trace())

    def checker_failed(self) -> None:
        """The followed program failed: recorded in the journal (the statement, its line and
        the error, as run_status reports them), then shown in state.md."""
        follower = self.follower
        if follower is not None and follower.outcome == "failed":
            statement = follower.failed_at()
            self.run.record_result(CHECKER_KEY, status="failed", error=follower.error, meta={
                "statement": statement.id if statement else None,
                "line": statement.line if statement else follower.failed_line,
                "text": follower.failure()})
        self.render()

    def trace(self) -> RunTrace | None:
        """A trace of the followed program when the server traces runs (the host's sessions
        and verdicts are its ``invoke_agent`` and ``chat`` spans); ``None`` otherwise."""
        if not tracing_wanted():
            return None
        from openprose.engine import tracing

        try:
            return tracing.start(self.run.id, self.file, HostProvider.name, None, None,
                                 "embodied")
        except ImportError:  # no openprose[otel]
            return None

    def follow_again(self) -> None:
        """resume_run of a running run whose followed program failed: a fresh follower
        replays the journal, so a transient cause (a session that failed once) is retried."""
        if self.follower is None or self.follower.outcome != "failed" \
                or self.status != "running":
            return
        self.follower.close()
        self.run.record_result(CHECKER_KEY, status="completed")  # the failure is past
        self.follow()  # the analysis keeps the program compiled when the run was loaded
        self.render()

    def bind_input(self, ref: BindingRef, value: str, source: str) -> None:
        """An input the followed program has reached: bound then, as the engine binds it
        (engine.inputs), unless the host's write (of an answer) bound it already."""
        self.bind_value(ref, value, "input", source)

    def bind_value(self, ref: BindingRef, value: str, kind: str, source: str) -> None:
        """A value the followed program bound: written then (as ``prose run`` writes it),
        unless the binding holds it already, as that kind (``output a = a`` makes a
        session's binding an output)."""
        kind = kind if kind in BINDING_KINDS else "let"
        with contextlib.suppress(NotFoundError):
            held = self.run.read_binding(ref)
            if (held.value, held.kind) == (value, kind):
                return
        self.run.write_binding(ref, value, kind, source)

    def replay(self) -> Replay:
        """What the followed run did before (see :class:`~.follow.Replay`), from the
        journal: sessions by the interpreter key their grant noted, verdicts, frames."""
        frames = self.run.frames()
        replay = Replay(frames={f.key: f.execution_id for f in frames if f.key},
                        popped={f.execution_id for f in frames if f.status == "completed"})
        results = {e.key: e for e in self.run.journal_entries() if e.kind == "result"}
        for key, entry in results.items():
            if not key.startswith(FOLLOWED_STEP):
                continue
            path, meta = key.removeprefix(FOLLOWED_STEP), entry.meta
            if "session" not in meta:
                replay.verdicts[path] = Recorded(meta["hash"], meta["value"],
                                                 meta.get("reason", ""))
                continue
            done = results.get(meta["session"])
            if done is not None and done.status == "completed" and done.binding is not None:
                value = self.run.read_binding(done.binding).value
                replay.sessions[path] = Recorded(meta["hash"], value)
        return replay


async def followed_session(driven: DrivenRun, pending: Pending) -> str | None:
    """The followed program's parked session ``pending`` answers: found again by its
    interpreter key when it was granted before this server started."""
    if pending.follows is None and pending.path and driven.follower is not None:
        item = await driven.follower.parked(pending.path)
        pending.follows = item.token if item is not None else None
    return pending.follows


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _statement_of(key: str) -> tuple[str, int]:
    body = key.removeprefix(SESSION_PREFIX).split("#")[0].split("?")[0]
    sid, _, eid = body.rpartition("@")
    return sid, int(eid)


def held_runs_cap() -> int:
    """How many unfinished runs one server drives at once: a quarter of the descriptors its
    limit leaves beside its own (HTTP connections take half), at most 1000."""
    return max(4, min(1000, descriptor_budget() // 4))


LOCK_RULE = "one driver per run: a run another live driver holds is not driven from here"


def lock_refusal(err: RunLocked) -> Refusal:
    return Refusal(LOCK_RULE, str(err))


def held_here(err: RunLocked) -> bool:
    """``err`` names this process: an engine this server runs holds the run."""
    here = DriverHolder.this_process()
    return err.holder is not None and (err.holder.pid, err.holder.host) == (os.getpid(),
                                                                            here.host)


class RunRegistry:
    """The runs this server drives, found by token; loaded from state when needed."""

    def __init__(self, catalog: RunCatalog) -> None:
        self.catalog = catalog
        self.runs: dict[str, DrivenRun] = {}
        #: Who drove the runs let go of (an engine's run that ended or was cancelled): a
        #: run loaded again keeps its driver.
        self.drivers: dict[str, Driver] = {}
        #: The run a call reached last: :meth:`let_go` leaves its journal open for the next
        #: call, which is nearly always about the same run (one run's logs, however many runs).
        self.last: str | None = None

    def get(self, run_id: str) -> DrivenRun:
        self.last = run_id
        driven = self.runs.get(run_id)
        if driven is None:
            try:
                run = self.catalog.open(run_id)
            except Exception as exc:  # ResourceNotFoundError names the run
                raise Refusal("a run is named by its id", str(exc)) from None
            driven = self.runs[run_id] = DrivenRun.load(run)
            driven.driver = self.drivers.pop(run_id, None)
        return driven

    def known(self, run_id: str) -> DrivenRun | None:
        """``run_id`` if this server drives it or drove it (loaded again with its driver)."""
        return self.get(run_id) if run_id in self.drivers else self.runs.get(run_id)

    def add(self, driven: DrivenRun) -> None:
        self.runs[driven.id] = driven
        self.last = driven.id

    def let_go(self) -> None:
        """Close what the stores hold open for the runs hosts drive (a journal's append log,
        opened again by the next write): between calls an unfinished run keeps only its
        driver lock, but for the run the last call reached (its next write appends at once)."""
        for driven in list(self.runs.values()):
            if driven.mode == HOST and driven.id != self.last:
                self.catalog.release(driven.id)

    def check_room(self) -> None:
        """Refused once this server drives as many unfinished runs as its descriptor limit
        leaves room for (each holds its driver lock open)."""
        held = sum(1 for d in self.runs.values() if d.holder is not None and d.holder.held)
        cap = held_runs_cap()
        if held >= cap:
            raise Refusal("a server drives a bounded number of unfinished runs",
                          f"this server already drives {held} unfinished runs, its limit "
                          "under its descriptor limit; finish one first (complete_run, with "
                          "status 'failed' to abandon it) or use another server")

    def forget(self, run_id: str) -> None:
        """Load ``run_id`` again on its next call (its engine wrote it meanwhile); who drove
        it is kept."""
        driven = self.runs.pop(run_id, None)
        if driven is not None and driven.driver is not None:
            self.drivers[run_id] = driven.driver

    def claim(self, run_id: str, take_over: bool = False) -> DrivenRun:
        """``run_id`` to be driven from here with VM tokens (resume_run). The run-driver lock
        is taken before the run is opened here, and kept while the run is a running host run
        (or an engine-started one taken over); runs an engine drives (guided, delegated) are
        left to their engine, which takes the lock itself."""
        driven = self.runs.get(run_id)
        if driven is not None:
            if self._drivable(driven, take_over):
                self.hold(driven)
            return driven
        self.check_room()
        lock: DriverLock | None = None
        for store in self._stores():
            try:
                lock = store.driver_lock(run_id)
                break
            except RunNotFound:
                continue
            except RunLocked as err:
                if held_here(err):  # this server's own engine drives it
                    break
                raise lock_refusal(err) from None
            except StateError as err:
                raise Refusal("a run is named by its id", str(err)) from None
        try:
            driven = self.get(run_id)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        if self._drivable(driven, take_over):
            driven.holder = lock
            self.hold(driven)
        elif lock is not None:
            lock.release()
        return driven

    @staticmethod
    def _drivable(driven: DrivenRun, take_over: bool) -> bool:
        return driven.status == "running" and (
            driven.mode == HOST or (driven.mode == ENGINE and take_over))

    def hold(self, driven: DrivenRun) -> None:
        """This server drives ``driven`` with VM tokens: hold its run-driver lock (refused,
        naming the holder, while another driver has it)."""
        if driven.holder is not None and driven.holder.held:
            return
        try:
            driven.holder = driven.run.store.driver_lock(driven.id)
        except RunLocked as err:
            raise lock_refusal(err) from None

    @staticmethod
    def release(driven: DrivenRun) -> None:
        if driven.holder is not None:
            driven.holder.release()
            driven.holder = None

    def by_vm_token(self, token: str) -> DrivenRun:
        """The run ``token`` drives (refused unless it is that run's current VM token)."""
        rule = "the VM token drives its run; session tokens only write their own binding"
        if not isinstance(token, str) or not token.startswith(VM_PREFIX) or token.count(".") < 2:
            raise Refusal(rule, "this is not a VM token (start_run or resume_run returns one)")
        run_id = token[len(VM_PREFIX):].rsplit(".", 1)[0]
        driven = self.get(run_id)
        if driven.mode == ENGINE:
            raise Refusal("a run the engine started is not driven by a host VM token without "
                          "an explicit hand-over", f"run {run_id} was started by the engine; "
                          "call resume_run with take_over=true to drive it")
        if driven.vm_hash != digest(token):
            if driven.taken_over is not None:
                by, at = driven.taken_over
                raise Refusal("resume_run replaces a run's VM token; the old one stops working",
                              f"this VM token no longer drives run {run_id}: it was taken over "
                              f"by {by} at {at} (resume_run with take_over=true takes it back)")
            raise Refusal("resume_run replaces a run's VM token; the old one stops working",
                          f"this VM token no longer drives run {run_id} (call resume_run for "
                          "a fresh one)")
        if driven.mode == HOST and driven.status == "running":
            self.hold(driven)
        return driven

    def host_run(self, token: str) -> DrivenRun:
        """:meth:`by_vm_token` for the tools a host steps its own run with: a run an engine
        steps (guided) is refused; its sessions and statuses are that engine's."""
        driven = self.by_vm_token(token)
        if driven.mode != HOST:
            raise Refusal("a run is stepped by the driver it was started for",
                          f"run {driven.id} is a {driven.mode} run: the engine steps it "
                          "(next_step gives what it needs from you)")
        return driven

    def by_session_token(self, token: str) -> tuple[DrivenRun, SessionHandle]:
        """The run and live session handle of a session token (refused if unknown/ended)."""
        if isinstance(token, str) and token.startswith(VM_PREFIX):
            raise Refusal("a session token is what a session writes and reads with",
                          "this is a VM token, not a session token")
        last: CapabilityError | None = None
        for store in self._stores():
            try:
                handle = store.session(token)
            except CapabilityError as exc:
                last = exc
                continue
            return self.get(handle.run.id), handle
        ended = self.ended_grant(token) if isinstance(token, str) else None
        if ended is not None:
            raise Refusal("a session token ends when its session's binding is written",
                          f"the session for '{ended[1].name}' has ended")
        rule = last.rule if last is not None else "a session writes only with a live session " \
            "capability"
        detail = str(last).rsplit(" (rule:", 1)[0] if last is not None else "unknown token"
        raise Refusal(rule, detail)

    def ended_grant(self, token: str) -> tuple[DrivenRun, BindingRef] | None:
        """For a session token that has ended: its run and binding (None if unknown)."""
        token_hash = digest(token)
        for store in self._stores():
            found = store.grant(token_hash)
            if found is not None:
                run_id, grant = found
                return self.get(run_id), BindingRef(grant["name"], grant["execution_id"])
        return None

    def _stores(self) -> Iterator[Any]:
        """The project's stores, the ones already open first: a token is nearly always in
        one of them, found without reading the settings (which name the other backends)."""
        opened = self.catalog.opened()
        yield from opened
        for backend in self.catalog.backends():
            try:
                store = self.catalog.store(backend)
            except StateError:
                continue
            if store not in opened:
                yield store

    def close(self) -> None:
        for driven in self.runs.values():
            self.release(driven)
            if driven.follower is not None:  # a new server follows the run on (replay)
                driven.follower.close()
        self.runs.clear()
