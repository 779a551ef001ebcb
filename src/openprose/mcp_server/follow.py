"""The server follows an embodied run beside its host: the engine's interpreter, run as a
checker that the host's calls step forward.

The interpreter runs against an in-memory journal with the guided mode's
:class:`~openprose.mcp_server.guided.HostProvider`, so every session and judgment it reaches
parks there until the host's call answers it. The parked calls are the program's position:
``spawn_session`` is granted only for a parked session (with the prompt and context the
interpreter computed), ``record_verdict`` only for a parked judgment, ``push_frame`` only
for a block call the interpreter entered; the host's ``write_binding`` and failures resume
the interpreter, which then parks at what comes next. A call for anything else is refused
with what the program expects instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openprose.engine import EngineError, Interpreter, Options, ProgramError, Usage
from openprose.engine.events import Event, Listener
from openprose.engine.interpreter import nothing_ready
from openprose.engine.journal import Recorded, SessionSpec
from openprose.engine.values import Value, to_text
from openprose.errors import OpenProseError
from openprose.language import paths
from openprose.language.analysis import Analysis, Statement
from openprose.mcp_server.guided import (
    HostProvider,
    ItemRefused,
    JudgmentItem,
    SessionItem,
)
from openprose.mcp_server.refusal import Refusal
from openprose.state import BindingRef

if TYPE_CHECKING:
    from openprose.engine.tracing import RunTrace

#: Event-loop turns without progress after which the interpreter is taken to wait on the host
#: (every step between two of its waits is in memory: a few turns for task hand-overs).
QUIET_TURNS = 20
#: A parallel fan-out's window: every iteration parks at once, as the host may start them.
FAN_OUT = 1 << 20
RULE = "a statement starts when the program reaches it (the server follows the program)"
#: What the program computes, as opposed to what its sessions answer, the server computes.
COMPUTED = ("a value the program computes is the server's to write (the host's write is a "
            "resend of it)")


def statement_of(key: str) -> str:
    """The outline id of an interpreter step key: block call sites, iterations and judgment
    rounds removed (``3[1]>review.0`` -> ``review.0``); read with the key format's one
    definition (:func:`openprose.language.paths.tokens`)."""
    path = ""
    for kind, value, _ in paths.tokens(key):
        if kind == "call":
            path = value
        elif kind == "step":
            path = paths.child(path, value)
        elif kind == "branch":
            path = paths.branch(path, int(value))
    return path


def round_of(key: str) -> int:
    """The judgment round a verdict key ends with (0: none)."""
    rounds = [int(value) for kind, value, _ in paths.tokens(key) if kind == "judgment"]
    return rounds[-1] if rounds else 0


def frame_key(key: str) -> str | None:
    """The key of the block call whose frame the step at ``key`` runs in (None: the top
    level)."""
    calls = [paths.call(before, value) for kind, value, before in paths.tokens(key)
             if kind == "call"]
    return calls[-1] if calls else None


def same_text(a: str, b: str) -> bool:
    """Prompts compared as a model would write them again: whitespace runs are one space."""
    return " ".join(a.split()) == " ".join(b.split())


@dataclass
class FollowedCall:
    """A block call the interpreter entered, waiting for (or matched to) the host's frame."""

    key: str
    block: str
    args: dict[str, str]
    parent: int | None  # the interpreter's execution id of the caller's frame
    own: int  # the interpreter's execution id
    host: int | None = None  # the host's execution id, once it pushed the frame
    popped: bool = False  # the interpreter left the call
    closed: bool = False  # the host popped its frame


class _ParkedIO:
    """A parked session's IO: the host's subagent reads and writes through its own token."""

    def __init__(self, spec: SessionSpec) -> None:
        self.spec = spec

    def read_context(self, name: str) -> str:
        item = next((i for i in self.spec.items if i.name == name), None)
        return item.text if item is not None else ""

    def write_output(self, text: str) -> None:
        return None

    def output_location(self) -> str:
        return self.spec.binding or "(anonymous)"

    def read_memory(self) -> str | None:
        return None

    def write_memory(self, text: str) -> None:
        return None


class _Opened:
    def __init__(self, spec: SessionSpec) -> None:
        self.io = _ParkedIO(spec)

    def binding_location(self, name: str, execution_id: int | None) -> str:
        return name

    def finish(self, output: str | None, usage: Usage) -> str:
        return output or ""

    async def finish_batched(self, output: str | None, usage: Usage) -> str:
        return output or ""

    def abort(self, error: str) -> None:
        return None


@dataclass
class Replay:
    """What a followed run did before this server started, by the interpreter's keys: the
    interpreter replays it (as a resumed engine run does) to reach where the run is."""

    sessions: dict[str, Recorded] = field(default_factory=dict)
    verdicts: dict[str, Recorded] = field(default_factory=dict)
    frames: dict[str, int] = field(default_factory=dict)  # call key -> host execution id
    popped: set[int] = field(default_factory=set)  # host execution ids of popped frames


class _Journal:
    """What the interpreter records, kept in memory: the host's calls write the run."""

    writes_wait = False

    def __init__(self, follower: Follower, has_memory: Callable[[str], bool],
                 replay: Replay) -> None:
        self.follower = follower
        self.memory = has_memory
        self.replay = replay
        self.specs: dict[str, SessionSpec] = {}
        self.verdicts: dict[str, bool | str] = {}

    def session_result(self, key: str) -> Recorded | None:
        found = self.replay.sessions.get(key)
        if found is not None:
            self.follower.done.append(key)
        return found

    def open_session(self, spec: SessionSpec) -> _Opened:
        self.specs[spec.key] = spec
        if spec.binding is not None:
            self.follower.bound.setdefault(spec.binding, []).append(spec.execution_id)
        self.follower.moved()
        return _Opened(spec)

    async def open_session_batched(self, spec: SessionSpec) -> _Opened:
        return self.open_session(spec)

    def verdict(self, key: str) -> Recorded | None:
        found = self.replay.verdicts.get(key)
        if found is not None:
            self.verdicts[key] = found.value  # type: ignore[assignment]
        return found

    def decision(self, key: str, branches: int) -> None:
        return None

    def record_decision(self, key: str, decision: Any) -> None:
        return None

    def record_verdict(self, key: str, input_hash: str, value: bool | str, reason: str,
                       source: str, line: int) -> None:
        self.verdicts[key] = value

    def bind(self, name: str, value: Value, kind: str, execution_id: int | None,
             source: str) -> None:
        self.follower.bound.setdefault(name, []).append(execution_id)
        host = self.follower.host_eid(execution_id)
        # in a block frame the host has not pushed yet, the host's own write binds it
        if kind == "input" and self.follower.on_input is not None \
                and (execution_id is None or host is not None):
            self.follower.on_input(BindingRef(name, host), to_text(value), source)
        elif kind not in ("input", "param"):  # params: push_frame writes them
            self.follower.computed(name, to_text(value), kind, execution_id, source)
        self.follower.moved()

    def reuse(self, name: str, value: Value, kind: str, execution_id: int | None,
              source: str) -> None:
        return None

    def location(self, name: str, execution_id: int | None) -> str:
        return name

    def has_memory(self, agent: str, persist: str) -> bool:
        return self.memory(agent)

    def push_frame(self, block: str, args: dict[str, Value], parent: int | None,
                   max_depth: int, key: str) -> int:
        return self.follower.entered(block, args, parent, key)

    def pop_frame(self, execution_id: int) -> None:
        self.follower.calls[execution_id].popped = True
        self.follower.moved()

    def note(self, key: str, status: str, source: str, line: int) -> None:
        return None

    def child(self, handle: str, program_text: str) -> _Journal:
        raise EngineError("an embodied run does not call imported programs")

    def record_imports(self, imports: dict[str, Any]) -> None:
        return None

    def finish(self, status: str, error: str | None) -> None:
        return None


async def _no_sleep(seconds: float) -> None:
    return None


@dataclass
class Follower:
    """One embodied run's program, followed step by step."""

    outline: Analysis
    provider: HostProvider = field(default_factory=HostProvider)
    calls: dict[int, FollowedCall] = field(default_factory=dict)  # by the interpreter's execution id
    asked: dict[str, asyncio.Future[str]] = field(default_factory=dict)  # inputs it waits for
    claimed: set[str] = field(default_factory=set)  # item tokens a host session answers
    done: list[str] = field(default_factory=list)  # keys of the sessions finished
    bound: dict[str, list[int | None]] = field(default_factory=dict)  # name -> frames bound in
    progress: int = 0
    outcome: str | None = None  # completed | failed (the program's own ending)
    error: str | None = None
    failed_line: int | None = None  # where the program failed, when known
    task: asyncio.Task[None] | None = None
    journal: _Journal | None = None
    #: Called once the program has failed (the run re-renders state.md to show it).
    on_failure: Callable[[], None] | None = None
    #: Called when the program reaches an input, with its value: the run binds it then.
    on_input: Callable[[BindingRef, str, str], None] | None = None
    answers: dict[str, str] = field(default_factory=dict)  # inputs written before reached
    #: Called when the program binds a value it computes (a let, const or output no session
    #: makes), with the value: the run writes it then; the host's write is a resend.
    on_value: Callable[[BindingRef, str, str, str], None] | None = None
    #: The latest value the program bound, by name and the interpreter's frame.
    values: dict[tuple[str, int | None], str] = field(default_factory=dict)
    #: Values bound in a block frame the host has not pushed yet: written once it has.
    unwritten: dict[int, list[tuple[str, str, str, str]]] = field(default_factory=dict)

    @classmethod
    def start(cls, outline: Analysis, source: str, file: str,
              inputs: dict[str, str], has_memory: Callable[[str], bool],
              replay: Replay | None = None, on_failure: Callable[[], None] | None = None,
              on_input: Callable[[BindingRef, str, str], None] | None = None,
              on_value: Callable[[BindingRef, str, str, str], None] | None = None,
              trace: RunTrace | None = None) -> Follower:
        """Follow the program ``outline`` was made of (compiled from ``source``); ``trace``
        (when the server traces runs) gets the followed program's events."""
        program = outline.program
        assert program is not None  # an analysis of a compiled program keeps it
        follower = cls(outline, on_failure=on_failure, on_input=on_input, on_value=on_value)
        follower.journal = _Journal(follower, has_memory, replay or Replay())
        listener: Listener = follower.observe
        if trace is not None:
            def listener(event: Event) -> None:
                follower.observe(event)
                trace(event)
        options = Options(max_concurrency=FAN_OUT, sleep=_no_sleep, ask=follower.ask,
                          listener=listener)
        interpreter = Interpreter(program, source, follower.journal, follower.provider,
                                  file=file, inputs=dict(inputs), options=options)
        with trace.active() if trace is not None else contextlib.nullcontext():
            follower.task = asyncio.create_task(follower.drive(interpreter, trace),
                                                name=f"follow {file}")
        return follower

    # ------------------------------------------------------------------ the interpreter
    async def drive(self, interpreter: Interpreter, trace: RunTrace | None = None) -> None:
        try:
            await self.interpret(interpreter)
        finally:
            if trace is not None:  # the program has ended (or the follower was closed)
                trace.end(self.outcome or "interrupted", self.error, len(self.done))
                await asyncio.shield(asyncio.to_thread(trace.flush))

    async def interpret(self, interpreter: Interpreter) -> None:
        try:
            await interpreter.run()
            self.outcome = "completed"
        except ProgramError as err:
            self.outcome, self.error = "failed", err.message
            self.failed_line = err.span.line if err.span is not None else None
        except OpenProseError as err:  # the engine's, or the state's (a persist path refused)
            self.outcome, self.error = "failed", str(err)
        finally:
            self.provider.close("the program has ended")
            self.moved()
        if self.outcome == "failed" and self.on_failure is not None:
            with contextlib.suppress(OpenProseError):  # state.md is shown again later
                self.on_failure()

    def failed_at(self) -> Statement | None:
        """The outline statement the program failed at (None: not failed, or unknown)."""
        if self.outcome != "failed" or self.failed_line is None:
            return None
        return next((s for s in self.outline.statements.values()
                     if s.line == self.failed_line), None)

    def failure(self) -> str | None:
        """The program's failure in one line, for run_status and state.md (None: it has
        not failed)."""
        if self.outcome != "failed":
            return None
        statement = self.failed_at()
        where = f" at statement {statement.id} (line {statement.line})" if statement \
            else f" at line {self.failed_line}" if self.failed_line else ""
        return f"the program failed{where}: {self.error}"

    def observe(self, event: Any) -> None:
        self.progress += 1
        self.provider.observe(event)

    def moved(self) -> None:
        self.progress += 1

    def ask(self, name: str, prompt: str) -> asyncio.Future[str]:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if name in self.answers:  # the host wrote it before the program reached it
            future.set_result(self.answers[name])
        self.asked[name] = future
        self.moved()
        return future

    def entered(self, block: str, args: dict[str, Value], parent: int | None, key: str) -> int:
        own = len(self.calls) + 1
        host = self.journal.replay.frames.get(key) if self.journal else None
        self.calls[own] = FollowedCall(key, block, {k: to_text(v) for k, v in args.items()}, parent, own,
                               host, closed=host is not None and host in self.journal.replay.popped)
        self.moved()
        return own

    def computed(self, name: str, value: str, kind: str, own: int | None,
                 source: str) -> None:
        """The program bound ``name`` to a value it computed: the run holds that value."""
        self.values[(name, own)] = value
        host = self.host_eid(own)
        if own is not None and host is None:
            self.unwritten.setdefault(own, []).append((name, value, kind, source))
        elif self.on_value is not None:
            self.on_value(BindingRef(name, host), value, kind, source)

    def pushed(self, call: FollowedCall) -> None:
        """The host pushed ``call``'s frame: the values its block bound so far are written."""
        for name, value, kind, source in self.unwritten.pop(call.own, []):
            if self.on_value is not None:
                self.on_value(BindingRef(name, call.host), value, kind, source)

    async def vm_write(self, statement: Statement, name: str, host_eid: int | None,
                       value: str) -> None:
        """A host's write of a value the program computes: a resend of what the server
        wrote when the program bound it, refused when the program has not bound it yet or
        computed another value."""
        await self.quiet()
        where = f" in frame {host_eid}" if host_eid else ""
        computed = self.values.get((name, self.own_eid(host_eid)))
        if computed is None:
            raise self.refuse(statement, f"the program has not reached a statement binding "
                              f"'{name}'{where}")
        if not same_text(value, computed) and not any(
                self.in_parallel(w) for w in self.outline.writers_of(name, statement.block)):
            raise Refusal(COMPUTED, f"the program computes '{name}'{where} as "
                          f"{computed[:80]!r}, not the value written", statement)

    def in_parallel(self, statement: Statement) -> bool:
        """Whether ``statement`` runs inside a parallel construct, where a value gathered
        from its branches depends on the order they ended in: the host's order may differ
        from the server's, whose value stands (the host's write of a name bound there
        changes nothing)."""
        parent = statement.parent
        while parent is not None:
            owner = self.outline.statements.get(parent)
            if owner is None:
                return False
            if owner.kind in ("parallel", "parallel_for"):
                return True
            parent = owner.parent
        return False

    async def quiet(self) -> None:
        """Let the interpreter run until it waits on the host (or has ended): a turn without
        progress after which the event loop has nothing else ready to run (nothing in memory
        can move: an answer, I/O or a timer must come first) is enough; a loop that does not
        say what is ready takes :data:`QUIET_TURNS` turns."""
        stable = 0
        while stable < QUIET_TURNS and self.task is not None and not self.task.done():
            before = self.progress
            await asyncio.sleep(0)
            stable = stable + 1 if self.progress == before else 0
            if stable and nothing_ready():
                return

    def close(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    # ------------------------------------------------------------------ frames
    def own_eid(self, host: int | None) -> int | None:
        if host is None:
            return None
        return next((c.own for c in self.calls.values() if c.host == host), -1)

    def host_eid(self, own: int | None) -> int | None:
        return self.calls[own].host if own is not None and own in self.calls else None

    def context_frames(self, name: str, own: int | None, session_frame: int | None
                       ) -> list[int | None]:
        """The host's frames to resolve a session's context name from, best first: where
        the program's scope has it, else the session's frame, then where it was bound, the
        latest first (a name a finished block call left in its frame)."""
        if own:
            return [self.host_eid(own)]
        return [session_frame, *(self.host_eid(f) for f in reversed(self.bound.get(name, []))
                                 if f and self.host_eid(f) is not None)]

    def _frame_of(self, key: str) -> int | None:
        call = frame_key(key)
        if call is None:
            return None
        return next((c.own for c in self.calls.values() if c.key == call), -1)

    # ------------------------------------------------------------------ what comes next
    def sessions(self) -> list[SessionItem]:
        return [i for i in self.provider.pending.values()
                if isinstance(i, SessionItem) and not i.future.done()]

    def judgments(self) -> list[JudgmentItem]:
        return [i for i in self.provider.pending.values()
                if isinstance(i, JudgmentItem) and not i.future.done()]

    def expected(self) -> str:
        """What the program expects next, in the words of the tools."""
        parts = []
        for call in self.calls.values():
            if call.host is None:
                parent = self.host_eid(call.parent)
                parts.append(f"push_frame {call.block}(" + ", ".join(
                    f"{k}={v[:40]!r}" for k, v in call.args.items()) + ")"
                    + (f" from frame {parent}" if parent else ""))
        for item in self.sessions():
            if item.token in self.claimed:
                continue
            spec = self.journal.specs.get(item.key) if self.journal else None
            host = self.host_eid(spec.execution_id) if spec else None
            parts.append(f"spawn_session {statement_of(item.key)}"
                         + (f" in frame {host}" if host else ""))
        for judgment in self.judgments():
            host = self.host_eid(self._frame_of(judgment.key))
            parts.append(f"record_verdict {statement_of(judgment.key)} iteration "
                         f"{round_of(judgment.key)}" + (f" in frame {host}" if host else ""))
        for name, future in self.asked.items():
            if not future.done():
                parts.append(f"write_binding of input '{name}'")
        for item in self.sessions():
            if item.token in self.claimed:
                parts.append(f"write_binding of '{item.request.binding or '(anonymous)'}' by "
                             f"its pending session (statement {statement_of(item.key)})")
        if self.outcome == "completed":
            parts.append("complete_run (the program has finished)")
        elif self.outcome == "failed":
            parts.append(f"complete_run with status 'failed' (the program failed: "
                         f"{self.error}), or resume_run(run_id, take_over=true) to follow it "
                         "again from the journal")
        popped = [call for call in self.calls.values()
                  if call.popped and call.host is not None and not call.closed]
        if popped:  # only the innermost frame can be popped; the others follow it
            parts.append(f"pop_frame {max(call.host for call in popped)}")
        return "; ".join(parts) or "nothing yet (a pending session has not finished)"

    def refuse(self, statement: Statement, detail: str) -> Refusal:
        why = self._why(statement)
        return Refusal(RULE, f"{detail}{why}; next: {self.expected()}", statement)

    def _why(self, statement: Statement) -> str:
        """The verdicts recorded for the constructs around ``statement``, and whether it
        has run already: why it is not next."""
        notes = []
        if any(statement_of(key) == statement.id for key in self.done):
            notes.append(f"statement {statement.id} has already run here")
        parent = statement.parent
        while parent is not None:
            owner = self.outline.statements.get(parent)
            if owner is None:
                break
            for key, value in (self.journal.verdicts.items() if self.journal else ()):
                judged = statement_of(key)
                if judged == owner.id or judged.startswith(owner.id + ".if"):
                    notes.append(f"the verdict recorded for {judged} (iteration "
                                 f"{round_of(key)}) is {value!r}")
            parent = owner.parent
        return ("; " + "; ".join(notes[-3:])) if notes else ""

    # ------------------------------------------------------------------ host calls
    async def session_for(self, statement: Statement, host_eid: int | None
                          ) -> tuple[SessionItem, SessionSpec]:
        """The parked session ``statement`` starts in frame ``host_eid``, claimed."""
        await self.quiet()
        own = self.own_eid(host_eid)
        where = f" in frame {host_eid}" if host_eid else ""
        for item in self.sessions():
            spec = self.journal.specs[item.key] if self.journal else None
            if spec is None or statement_of(item.key) != statement.id \
                    or spec.execution_id != own:
                continue
            if item.token in self.claimed:
                continue
            self.claimed.add(item.token)
            return item, spec
        if any(statement_of(i.key) == statement.id and i.token in self.claimed
               for i in self.sessions()):
            raise self.refuse(statement, f"statement {statement.id}{where} has started "
                              "already (its session is pending; a statement does not start "
                              "twice)")
        raise self.refuse(statement, f"statement {statement.id}{where} is not next")

    async def parked(self, key: str) -> SessionItem | None:
        """The parked session at interpreter key ``key``, claimed (a session granted before
        this server started, found again)."""
        await self.quiet()
        for item in self.sessions():
            if item.key == key and item.token not in self.claimed:
                self.claimed.add(item.token)
                return item
        return None

    def release(self, token: str) -> None:
        """A claimed session whose grant was refused after all: it is next again."""
        self.claimed.discard(token)

    async def written(self, token: str, value: str, summary: str) -> None:
        item = self.provider.pending.get(token)
        key = item.key if item is not None else None
        with contextlib.suppress(ItemRefused):  # its branch was cancelled (a join settled)
            await self.provider.complete_session(token, value, summary)
        if key is not None:
            self.done.append(key)
        self.claimed.discard(token)
        await self.quiet()

    async def failed(self, token: str, error: str) -> None:
        item = self.provider.pending.get(token)
        if item is not None:
            self.done.append(item.key)  # it ran (a retry is parked as a new item)
        with contextlib.suppress(ItemRefused):  # its branch was cancelled (a join settled)
            await self.provider.fail_session(token, error)
        self.claimed.discard(token)
        await self.quiet()

    async def judgment_for(self, statement: Statement, host_eid: int | None, iteration: int,
                           recorded: bool) -> JudgmentItem | None:
        """The parked judgment a verdict answers; None for a resend of one recorded."""
        await self.quiet()
        own = self.own_eid(host_eid)
        for item in self.judgments():
            if statement_of(item.key) == statement.id and round_of(item.key) == iteration \
                    and self._frame_of(item.key) == own:
                return item
        if recorded:
            return None
        raise self.refuse(statement, f"no verdict for statement {statement.id} iteration "
                          f"{iteration}" + (f" in frame {host_eid}" if host_eid else "")
                          + " is wanted now")

    async def judged(self, item: JudgmentItem, value: bool | str, reason: str) -> None:
        try:
            await self.provider.submit_verdict(item.token, value, reason)
        except ItemRefused as err:
            raise Refusal("a verdict answers the judgment the program asks", str(err)) \
                from None
        await self.quiet()

    async def frame_for(self, block: str, args: dict[str, str], host_parent: int | None,
                        statement: Statement | None) -> FollowedCall:
        """The block call the host's ``push_frame`` enters: one the interpreter entered
        and nobody pushed yet, with the same block, caller and arguments."""
        await self.quiet()
        parent = self.own_eid(host_parent)
        waiting = [c for c in self.calls.values()  # a call may have ended with no session
                   if c.host is None and c.block == block and c.parent == parent]
        for call in waiting:
            if all(same_text(args.get(k, ""), v) for k, v in call.args.items()):
                return call
        detail = (f"the call of block '{block}' expects arguments " + ", ".join(
            f"{k}={v[:60]!r}" for k, v in waiting[0].args.items())) if waiting else \
            f"no call of block '{block}'" + (f" from frame {host_parent}" if host_parent
                                              else "") + " is next"
        raise Refusal(RULE, f"{detail}; next: {self.expected()}", statement)

    async def pop_allowed(self, host_eid: int) -> None:
        await self.quiet()
        call = next((c for c in self.calls.values() if c.host == host_eid), None)
        if call is not None and not call.popped:
            raise Refusal(RULE, f"frame {host_eid} (block '{call.block}') has statements "
                          f"still to run; next: {self.expected()}")
        if call is not None:
            call.closed = True

    async def input_written(self, name: str, value: str) -> None:
        """An input's value from the host or the caller: the program's ask for it is
        answered, now or when the program reaches it."""
        self.answers[name] = value
        future = self.asked.get(name)
        if future is not None and not future.done():
            future.set_result(value)
            await self.quiet()

    async def finish_refusal(self, status: str) -> Refusal | None:
        """Why ``complete_run`` may not complete the run yet (None: it may): 'completed'
        once the program has finished."""
        await self.quiet()
        if status != "completed" or self.outcome == "completed":
            return None
        detail = "the program has not finished" if self.outcome is None else \
            f"the program failed: {self.error}"
        return Refusal("a run completes when its program has finished",
                       f"{detail}; next: {self.expected()}")

__all__ = ["FollowedCall", "Follower", "Replay", "frame_key", "round_of", "same_text",
           "statement_of"]
