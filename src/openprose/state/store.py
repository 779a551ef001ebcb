"""The state contract: runs, bindings, frames, capabilities and the durable journal.

Who may write what is enforced here, once, above the backends:
- the **VM capability** (held by whoever created or opened the run) writes state, execution
  records and frames, grants sessions and writes values that are not session outputs;
- a **session capability** writes exactly its one binding and reads the bindings it was given;
  a persistent agent's session may also read/write that agent's memory and append a segment;
- a token dies when its session ends. Anything else raises :class:`CapabilityError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from openprose.language.nodes import DEFAULT_MAX_DEPTH
from openprose.state.backends.base import Backend, CommitStep
from openprose.state.driver import DriverHolder, DriverLock
from openprose.state.errors import (
    CapabilityError,
    DamagedState,
    DepthLimitExceeded,
    InvalidNameError,
    NotFoundError,
    StateError,
)
from openprose.state.models import (
    AGENT_SCOPES,
    AgentRef,
    Binding,
    BindingRef,
    Completion,
    Frame,
    ImportRecord,
    JournalEntry,
    RunInfo,
    SessionGrant,
    SessionStart,
    StateSnapshot,
    Usage,
    final_result,
    utc_now,
)
from openprose.state.names import (
    check_name,
    check_new_binding_name,
    check_run_id,
    check_slug,
    contained_path,
    new_run_id,
)
from openprose.state.records import RunRecord

ANON_PREFIX = "anon_"


def _stamp() -> float:
    """When a journal record was made (seconds since the epoch), for durations."""
    return round(time.time(), 3)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_token(kind: str) -> str:
    return f"{kind}_{secrets.token_urlsafe(24)}"


#: The largest execution id: SQLite's and PostgreSQL's integers end there.
MAX_EXECUTION_ID = 2**63 - 1


def _check_ref(ref: BindingRef, what: str = "name", *, new: bool = False) -> None:
    """A binding's name and execution id both become part of its path or key (``new``: a
    name about to be written, held to the stricter rule of names bindings get)."""
    (check_new_binding_name if new else check_name)(ref.name, what)
    eid = ref.execution_id
    if eid is not None and (type(eid) is not int or not 0 <= eid <= MAX_EXECUTION_ID):
        raise InvalidNameError(f"execution id {eid!r} of '{ref.name}' is not an integer from 0 "
                               f"to {MAX_EXECUTION_ID} (the largest the databases keep)")


Renderer = Callable[["Run", StateSnapshot], str]
Digester = Callable[["Run", str, "str | None"], str]


class StateStore:
    """A project's state on one backend. Create or open runs; resolve session tokens.
    ``render`` makes a run's state.md and ``digest`` an ended run's digest: both sit above
    the contract (state.render, state.view), so the store is handed them rather than
    importing them."""

    def __init__(self, backend: Backend, project_root: Path, home: Path,
                 render: Renderer, digest: Digester, *, owns_backend: bool = True) -> None:
        self.backend = backend
        self.owns_backend = owns_backend
        self.render = render
        self.digest = digest
        self.project_root = project_root
        self.home = home
        self._runs: dict[str, Run] = {}
        self._grants: dict[str, tuple[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.taken_over: set[str] = set()  # runs whose abandoned sessions this store ended

    @property
    def kind(self) -> str:
        return self.backend.name

    @property
    def writes_wait(self) -> bool:
        """Whether small writes (intents, grants) may wait on other writers or the network;
        a caller with other work in flight should then make them off its event loop."""
        return self.backend.writes_wait

    def create_run(self, program_source: str, program_path: str | None = None, *,
                   run_id: str | None = None, queued: bool = False) -> Run:
        """A new run, running (its creator drives it) or ``queued`` for a worker."""
        if run_id:
            check_run_id(run_id)
            try:
                self.backend.load_run(run_id)
            except NotFoundError:
                pass
            else:
                raise StateError(f"run {run_id} already exists in the {self.kind} store")
        else:
            run_id = new_run_id()
        token = _new_token("vm")
        now = utc_now()
        record = RunRecord(run_id, program_path, program_source,
                           "queued" if queued else "running", now, now, _hash(token))
        self.backend.create_run(record)
        run = Run(self, record, token)
        self._runs[run_id] = run
        return run

    def driver_lock(self, run_id: str, *, new: bool = False) -> DriverLock:
        """Take the right to drive ``run_id`` (execute its program), or be refused at once
        with :class:`~openprose.state.driver.RunLocked` naming who holds it. Take it before
        opening the run; hold it until done. It is independent of this store: closing the
        store does not release it; the holder's process ending does. ``new``: the run is
        about to be created under this id (lock first, so nobody drives it in between)."""
        check_run_id(run_id)
        if not new:
            # RunNotFound before anything is created; a damaged record is a run that
            # exists (open_run rebuilds the record or says what is wrong)
            with contextlib.suppress(DamagedState):
                self.backend.load_run(run_id)
        holder = DriverHolder.this_process()
        return DriverLock(run_id, holder, self.backend.lock_driver(run_id, holder))

    def open_run(self, run_id: str, *, vm_token: str | None = None) -> Run:
        """Open an existing run with the VM capability.

        Local trusted callers (``prose resume``) may omit ``vm_token``; remote callers (the
        MCP server's clients) must present it.
        """
        check_run_id(run_id)
        cached = self._runs.get(run_id)
        if cached is not None:
            record = cached.record
        else:
            try:
                record = self.backend.load_run(run_id)
            except DamagedState as damage:
                record = self.backend.rebuild_run(run_id, damage)
        if vm_token is not None and _hash(vm_token) != record.vm_token_hash:
            raise CapabilityError("only the VM capability may drive a run",
                                  f"token does not hold the VM capability for run {run_id}")
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                run = Run(self, record, vm_token)
                self._runs[run_id] = run
        return run

    def list_runs(self) -> list[RunInfo]:
        return [RunInfo(r.id, r.status, r.program_path, r.started, r.updated)
                for r in self.backend.list_runs()]

    def delete_run(self, run_id: str, *, keep_shared: bool = False) -> None:
        """Remove a finished top-level run with everything it holds (bindings, journal,
        import runs, its execution-scoped agents). Refused (:class:`StateError`) for a run
        marked running and, with :class:`RunLocked`, for one whose driver lock is held; the
        lock is held while the run is removed, so nobody starts driving it meanwhile.
        ``keep_shared``: a copy of the run (same id) lives on another backend, so files the
        copies share stay."""
        check_run_id(run_id)
        if "/imports/" in run_id:
            raise StateError(f"{run_id} is an import run: it goes with its parent run")
        with self.driver_lock(run_id):
            if self.backend.load_run(run_id).status == "running":
                raise StateError(f"run {run_id} is marked running but no process drives it "
                                 "(its driver ended); prose resume it, or let it finish, "
                                 "before removing it")
            self._runs.pop(run_id, None)
            self.backend.delete_run(run_id, keep_shared=keep_shared)

    # ------------------------------------------- reading a run without opening it
    def run_records(self) -> list[RunRecord]:
        """Every run's record as stored, a damaged one listed with status "damaged"."""
        return self.backend.list_runs()

    def read_journal(self, run_id: str) -> list[JournalEntry]:
        """A run's journal, read without opening the run (safe while another drives it)."""
        return self.backend.read_journal(run_id)

    def stored_binding(self, run_id: str, ref: BindingRef) -> Binding | None:
        """One binding of a run, read without opening the run."""
        _check_ref(ref)
        return self.backend.get_binding(run_id, ref)

    def segment_count(self, run_id: str, agent: AgentRef) -> int:
        """Segments are numbered from 1 and never removed: their count without reading
        them (an agent of 3,000 segments)."""
        return self.backend.next_segment(run_id, agent) - 1

    def run_location(self, run_id: str) -> str:
        """Where a run's state lives (a directory, or a database and schema)."""
        return self.backend.run_location(run_id)

    def session(self, token: str) -> SessionHandle:
        """The handle for a session-capability token (raises if unknown or ended)."""
        if not isinstance(token, str) or "_" not in token:
            raise CapabilityError("a session writes only with a live session capability",
                                  "malformed capability token")
        found = self.grant(_hash(token))
        if found is None:
            raise CapabilityError("a session writes only with a live session capability",
                                  "unknown capability token")
        run_id, grant = found
        if not grant.get("alive", False):
            raise CapabilityError("a token dies when its session completes",
                                  f"the session for binding '{grant['name']}' has ended")
        run = self.open_run(run_id)
        return SessionHandle(run, token, grant)

    def token_grant(self, token: str) -> tuple[str, dict[str, Any]] | None:
        """The run and grant of a session token, read without opening the run (so another
        process may look while the run's driver writes it); ``None`` when unknown."""
        return self.grant(_hash(token), fresh=True)

    def host_grant(self, host_token: str) -> tuple[str, dict[str, Any]] | None:
        """The live grant a host's own session token (a guided run's) is recorded with (in
        the grant's own write, or by :meth:`Run.tag_grant` for a retry's), searched in the
        running runs without opening them."""
        wanted = _hash(host_token)
        for record in self.backend.list_runs():
            if record.status != "running":
                continue
            for grant in self.backend.list_capabilities(record.id):
                if grant.get("alive") and (grant.get("work") or {}).get("host_token") == wanted:
                    return record.id, grant
        return None

    def grant(self, token_hash: str, *, fresh: bool = False) -> tuple[str, dict[str, Any]] | None:
        """The grant behind a token hash: this store's cache first, then storage. ``fresh``
        asks storage whether a live grant has ended since (in another process, say); an
        ended grant never comes back to life, so it is not asked again."""
        found = self._grants.get(token_hash)
        if found is None or (fresh and found[1].get("alive")):
            stored = self.backend.find_capability(token_hash,
                                                  None if found is None else found[0])
            if stored is not None and (found is None or not stored[1].get("alive")):
                found = self._grants[token_hash] = stored
        return found

    def remember_grant(self, run_id: str, grant: dict[str, Any]) -> None:
        self._grants[grant["hash"]] = (run_id, grant)

    def end_grant(self, token_hash: str, run_id: str) -> dict[str, Any]:
        """Mark a live grant of ``run_id`` ended, once: a second end (from any thread) is
        refused. Returns the ended grant."""
        with self._lock:
            found = self.grant(token_hash)
            if found is None or found[0] != run_id:
                raise CapabilityError("a token dies when its session completes",
                                      "no such session in this run")
            if not found[1].get("alive", False):
                raise CapabilityError("a token dies when its session completes",
                                      f"the session for binding '{found[1]['name']}' has "
                                      "already ended")
            grant = dict(found[1], alive=False)
            self.remember_grant(run_id, grant)
        return grant

    def fresh(self) -> StateStore:
        """A store over this one's backend (its connection pool) with no run cached, whose
        :meth:`close` leaves the backend open: a process driving many runs (a worker) opens
        the backend once, and each run reads its state afresh, as another process may have
        driven it meanwhile."""
        return StateStore(self.backend, self.project_root, self.home, self.render,
                          self.digest, owns_backend=False)

    def close(self) -> None:
        if self.owns_backend:
            self.backend.close()

    def release(self, run_id: str) -> None:
        """Close the files and connections this store holds open for ``run_id`` (see
        :meth:`Backend.release`)."""
        self.backend.release(run_id)

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Run:
    """One run, driven with the VM capability."""

    def __init__(self, store: StateStore, record: RunRecord, vm_token: str | None) -> None:
        self.store = store
        self.backend = store.backend
        self.record = record
        self.vm_token = vm_token
        self._lock = threading.Lock()
        self._journal: dict[tuple[str, str], JournalEntry] = {}
        self._frames: dict[int, Frame] = {}
        self._frame_keys: dict[str, int] = {}  # call key -> execution id of an earlier drive
        self._cancelled: set[str] = set()  # steps cancelled in this drive, not started since
        self._live: dict[BindingRef, str] = {}
        self._index: dict[BindingRef, str] = {}
        self._next_eid = 1
        self._next_anon = 1
        self._usage = Usage()
        self._agents: dict[AgentRef, None] = {}
        self._tools: list[JournalEntry] = []
        self._steps: list[JournalEntry] = []  # every intent, result and verdict, in order
        self._load()

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        journal = self.backend.repair(self.id)
        for entry in self.backend.read_journal(self.id) if journal is None else journal:
            self._remember(entry)
        for frame in self.backend.list_frames(self.id):
            self._frames[frame.execution_id] = frame
            self._next_eid = max(self._next_eid, frame.execution_id + 1)
            if frame.key is not None:
                self._frame_keys[frame.key] = frame.execution_id
        for binding in self.backend.list_bindings(self.id):
            self._index[binding.ref] = binding.kind
            if binding.name.startswith(ANON_PREFIX) and binding.name[5:].isdigit():
                self._next_anon = max(self._next_anon, int(binding.name[5:]) + 1)
        for grant in self.backend.list_capabilities(self.id):
            if grant.get("agent"):
                self._agents[AgentRef(*grant["agent"])] = None
            if grant.get("alive"):
                self._live[BindingRef(grant["name"], grant["execution_id"])] = grant["hash"]

    def _remember(self, entry: JournalEntry) -> None:
        if entry.kind == "tool":  # an audit record: never a step's outcome
            self._tools.append(entry)
            return
        if entry.kind in ("intent", "result", "verdict"):
            with self._lock:
                self._steps.append(entry)
        slot = entry.kind if entry.kind in ("verdict", "decision") else "step"
        previous = self._journal.get((slot, entry.key))
        if previous is not None and previous.kind == "result" and entry.kind == "intent":
            return
        if final_result(previous, entry):
            return
        self._journal[(slot, entry.key)] = entry
        if entry.kind == "result" and entry.status == "completed":
            self._usage = self._usage + replace(entry.usage, sessions=1)

    # ------------------------------------------------------------------ identity
    @property
    def id(self) -> str:
        return self.record.id

    @property
    def status(self) -> str:
        return self.backend.load_run(self.id).status

    @property
    def program_source(self) -> str:
        return self.record.program_source

    @property
    def program_path(self) -> str | None:
        return self.record.program_path

    @property
    def location(self) -> str:
        return self.backend.run_location(self.id)

    # ------------------------------------------------------------------ frames
    def push_frame(self, block: str, args: dict[str, str] | None = None,
                   parent: int | None = None, max_depth: int = DEFAULT_MAX_DEPTH,
                   key: str | None = None) -> Frame:
        """Enter a block call. ``key`` names the call's place in the run: a call an earlier
        drive of the run entered at the same place (same block, same parent) is entered
        again under its execution id, where its bindings are."""
        check_name(block, "block name")
        with self._lock:
            depth = 1
            if parent is not None:
                if parent not in self._frames:
                    raise NotFoundError(f"no frame with execution_id {parent}")
                depth = self._frames[parent].depth + 1
            if depth > max_depth:
                raise DepthLimitExceeded(block, max_depth)
            earlier = self._frames.get(self._frame_keys.pop(key, -1)) if key else None
            if earlier is not None and (earlier.block, earlier.parent) == (block, parent):
                frame = replace(earlier, status="executing", args=dict(args or {}))
            else:
                frame = Frame(self._next_eid, block, depth, parent, dict(args or {}), key=key)
                self._next_eid += 1
            self._frames[frame.execution_id] = frame
        self.backend.put_frame(self.id, frame)
        return frame

    def pop_frame(self, execution_id: int) -> None:
        with self._lock:
            frame = self._frames.get(execution_id)
            if frame is None:
                raise NotFoundError(f"no frame with execution_id {execution_id}")
            frame = replace(frame, status="completed")
            self._frames[execution_id] = frame
        self.backend.put_frame(self.id, frame)

    def frame(self, execution_id: int) -> Frame:
        try:
            return self._frames[execution_id]
        except KeyError:
            raise NotFoundError(f"no frame with execution_id {execution_id}") from None

    def frames(self) -> list[Frame]:
        return sorted(self._frames.values(), key=lambda f: f.execution_id)

    def call_stack(self, execution_id: int | None) -> list[Frame]:
        """The frame chain from ``execution_id`` outward (innermost first)."""
        chain: list[Frame] = []
        current = execution_id
        while current is not None:
            frame = self.frame(current)
            chain.append(frame)
            current = frame.parent
        return chain

    # ------------------------------------------------------------------ bindings
    def resolve(self, name: str, execution_id: int | None = None) -> Binding | None:
        """Walk the frame chain outward, then root; the first binding found wins."""
        check_name(name)
        for frame in self.call_stack(execution_id):
            found = self.backend.get_binding(self.id, BindingRef(name, frame.execution_id))
            if found is not None:
                return found
        return self.backend.get_binding(self.id, BindingRef(name))

    def read_binding(self, ref: BindingRef) -> Binding:
        _check_ref(ref)
        found = self.backend.get_binding(self.id, ref)
        if found is None:
            where = f" in execution {ref.execution_id}" if ref.execution_id else ""
            raise NotFoundError(f"binding '{ref.name}'{where} does not exist in run {self.id}")
        return found

    def bindings(self) -> list[Binding]:
        return self.backend.list_bindings(self.id)

    def binding_index(self) -> list[tuple[BindingRef, str]]:
        """Every binding of the run with its kind, without reading values."""
        with self._lock:
            items = list(self._index.items())
        return sorted(items, key=lambda item: (item[0].name, item[0].eid))

    def binding_location(self, ref: BindingRef) -> str:
        _check_ref(ref)
        return self.backend.binding_location(self.id, ref)

    def next_anonymous(self) -> str:
        """A fresh name for a session whose output is not captured: anon_001, anon_002..."""
        with self._lock:
            number = self._next_anon
            self._next_anon += 1
        return f"{ANON_PREFIX}{number:03d}"

    def write_binding(self, ref: BindingRef, value: str, kind: str, source: str, *,
                      durable: bool = False) -> Binding:
        """The VM writes a value that no session produces (inputs, literals, copies)."""
        _check_ref(ref, new=True)
        if ref in self._live:
            raise CapabilityError("a session's binding is written by that session",
                                  f"binding '{ref.name}' belongs to a session in flight")
        binding = Binding(ref.name, ref.execution_id, kind, source, value)
        self.backend.put_binding(self.id, binding, durable=durable)
        self.index_binding(ref, kind)
        return binding

    def index_binding(self, ref: BindingRef, kind: str) -> None:
        """Note a binding written (by the VM or a session) for :meth:`binding_index`."""
        with self._lock:
            self._index[ref] = kind

    # ------------------------------------------------------------------ sessions
    def grant_session(self, ref: BindingRef, kind: str, source: str,
                      context: list[BindingRef] | None = None,
                      agent: AgentRef | None = None) -> SessionGrant:
        """Issue a session capability for exactly one binding (and the agent's memory)."""
        token, grant = self._new_grant(ref, kind, source, tuple(context or ()), agent)
        self.backend.put_capability(self.id, grant)
        return self._session_grant(token, grant)

    def start_sessions(self, starts: list[SessionStart]) -> list[SessionGrant | StateError]:
        """Record the intent of many sessions and grant their capabilities in one write.
        Each result is the grant, or the error that kept that session from starting."""
        prepared: list[tuple[SessionStart, str, dict[str, Any]] | StateError] = []
        for start in starts:
            try:
                work = start.work if start.host_token is None else \
                    {**(start.work or {}), "host_token": _hash(start.host_token)}
                prepared.append((start, *self._new_grant(start.binding, start.kind, start.source,
                                                         start.context, start.agent, work)))
            except StateError as err:
                prepared.append(err)
        ok = [item for item in prepared if not isinstance(item, StateError)]
        at = _stamp()
        intents = [JournalEntry(start.key, "intent", start.input_hash, "started",
                                meta={**(start.meta or {}), "at": at}) for start, _, _ in ok]
        try:
            self.backend.start_sessions(self.id, intents, [grant for _, _, grant in ok])
        except BaseException:
            for _, _, grant in ok:  # never stored: these sessions did not start
                self._set_alive(grant, False)
            raise
        for entry in intents:
            self._remember(entry)
            self._cancelled.discard(entry.key)
        return [item if isinstance(item, StateError) else self._session_grant(*item[1:])
                for item in prepared]

    def _new_grant(self, ref: BindingRef, kind: str, source: str,
                   context: tuple[BindingRef, ...], agent: AgentRef | None,
                   work: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        _check_ref(ref, new=True)
        for item in context:
            _check_ref(item, "context name")
        if agent is not None:
            self._check_agent(agent)
        token = _new_token("ses")
        grant: dict[str, Any] = {
            "hash": _hash(token), "name": ref.name, "execution_id": ref.execution_id,
            "kind": kind, "source": source, "alive": True,
            "context": [[c.name, c.execution_id] for c in context],
            "agent": None if agent is None else [agent.name, agent.scope, agent.path],
        }
        if work is not None:
            grant["work"] = work
        with self._lock:
            self._live[ref] = grant["hash"]
            if agent is not None:
                self._agents[agent] = None
        self.store.remember_grant(self.id, grant)
        return token, grant

    def tag_grant(self, token: str, host_token: str) -> None:
        """Record with a live session's grant the token a host knows it by (a guided run's
        item token), hashed, so the host's hook can find the session's permissions: for a
        token drawn after the grant was written (a retry's attempt; the first attempt's is
        written with the grant, see :attr:`SessionStart.host_token`)."""
        found = self.store.grant(_hash(token))
        if found is None or found[0] != self.id or not found[1].get("alive"):
            return
        grant = dict(found[1], work={**(found[1].get("work") or {}),
                                     "host_token": _hash(host_token)})
        self.backend.put_capability(self.id, grant)
        self.store.remember_grant(self.id, grant)

    def _set_alive(self, grant: dict[str, Any], alive: bool) -> None:
        """Undo a grant or an end that storage never received."""
        ref = BindingRef(grant["name"], grant["execution_id"])
        with self._lock:
            if alive:
                self._live[ref] = grant["hash"]
            else:
                self._live.pop(ref, None)
        self.store.remember_grant(self.id, dict(grant, alive=alive))

    def _session_grant(self, token: str, grant: dict[str, Any]) -> SessionGrant:
        ref = BindingRef(grant["name"], grant["execution_id"])
        context = [BindingRef(name, eid) for name, eid in grant["context"]]
        agent = AgentRef(*grant["agent"]) if grant["agent"] else None
        return SessionGrant(
            token, ref, self.backend.binding_location(self.id, ref),
            {c.name: self.backend.binding_location(self.id, c) for c in context},
            None if agent is None else self.backend.memory_location(self.id, agent),
            None if agent is None else self.backend.segment_location(
                self.id, agent, self.backend.next_segment(self.id, agent)))

    def end_session(self, token: str) -> None:
        """The session completed (or was abandoned): its token stops working."""
        grant = self._ended(token)
        self.backend.put_capability(self.id, grant)

    def end_abandoned_sessions(self) -> int:
        """End the session capabilities an earlier driver of this run left live: it died
        (or stopped) before their sessions finished, and a capability never outlives its
        driver. Their bindings go back to the VM; their steps, never completed, run again.
        Call it when taking over a run, before anything else. Returns how many ended."""
        with self._lock:
            hashes = list(self._live.values())
        self.store.taken_over.add(self.id)
        ended = []
        for token_hash in hashes:
            try:
                grant = self.store.end_grant(token_hash, self.id)
            except CapabilityError:  # ended meanwhile
                continue
            with self._lock:
                self._live.pop(BindingRef(grant["name"], grant["execution_id"]), None)
            ended.append(grant)
        for grant in ended:
            self.backend.put_capability(self.id, grant)
        return len(ended)

    def _ended(self, token: str) -> dict[str, Any]:
        grant = self.store.end_grant(_hash(token), self.id)
        with self._lock:
            self._live.pop(BindingRef(grant["name"], grant["execution_id"]), None)
        return grant

    def complete_session(self, token: str, key: str, *, input_hash: str = "",
                         value: str | None = None, usage: Usage | None = None,
                         meta: dict[str, Any] | None = None) -> Binding:
        """Finish a session in one durable step: its binding (``value``, or what the session
        wrote itself) and its result record, then end the token."""
        result = self.complete_sessions([Completion(token, key, input_hash, value, usage,
                                                    meta)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def complete_sessions(self, completions: list[Completion]) -> list[Binding | StateError]:
        """Finish many sessions with one durable write. Each result is the committed binding,
        or the error that kept that session out of the batch (the others still commit)."""
        results: list[Binding | StateError] = []
        steps: list[CommitStep] = []
        for done in completions:
            try:
                step = self._commit_step(done)
            except StateError as err:
                results.append(err)
                continue
            steps.append(step)
            results.append(step.binding)
        if steps:
            try:
                self.backend.commit(self.id, steps)
            except BaseException:
                for step in steps:  # not committed: the sessions are still in flight
                    self._set_alive(step.ended_grant, True)
                raise
        for step in steps:
            self._index[step.binding.ref] = step.binding.kind
            self._remember(step.entry)
        return results

    def _commit_step(self, done: Completion) -> CommitStep:
        handle = self.store.session(done.token)
        if handle.run.id != self.id:
            raise CapabilityError("a token dies when its session completes",
                                  "no such session in this run")
        if done.key in self._cancelled:  # nothing arriving after a cancellation changes it
            self.end_session(done.token)
            raise CapabilityError("a cancelled session's result is not recorded",
                                  f"step {done.key} was cancelled before its result arrived")
        ref = handle.binding
        value = done.value
        if value is None:
            staged = self.backend.get_binding(self.id, ref)
            if staged is None:
                raise NotFoundError(f"session for '{ref.name}' finished without writing it")
            value = staged.value
        binding = Binding(ref.name, ref.execution_id, handle.kind, handle.source, value,
                          self.backend.binding_location(self.id, ref))
        entry = JournalEntry(done.key, "result", done.input_hash, "completed", ref, value,
                             usage=done.usage or Usage(),
                             meta={**(done.meta or {}), "at": _stamp()})
        return CommitStep(binding, entry, self._ended(done.token), stored=done.value is None)

    # ------------------------------------------------------------------ journal
    def record_intent(self, key: str, input_hash: str, meta: dict[str, Any] | None = None) -> None:
        entry = JournalEntry(key, "intent", input_hash, "started",
                             meta={**(meta or {}), "at": _stamp()})
        self.backend.append_journal(self.id, entry, durable=False)
        self._remember(entry)
        self._cancelled.discard(key)

    def record_result(self, key: str, *, input_hash: str = "", binding: BindingRef | None = None,
                      value: Any = None, usage: Usage | None = None, status: str = "completed",
                      error: str | None = None, meta: dict[str, Any] | None = None) -> None:
        """A step's outcome, durable, except a cancelled step's: resume runs that step again
        anyway, so its record rides on the next flush (a failing fan-out cancels hundreds)."""
        entry = JournalEntry(key, "result", input_hash, status, binding, value, "", error,
                             usage or Usage(), {**(meta or {}), "at": _stamp()})
        self.backend.append_journal(self.id, entry, durable=status != "cancelled")
        self._remember(entry)
        if status == "cancelled":
            self._cancelled.add(key)

    def record_note(self, key: str, meta: dict[str, Any]) -> None:
        """A note (a "state" result record) that only counts beside a durable record written
        after it in the same journal: it rides on that record's flush (an fsync covers every
        line before it; SQLite's WAL and PostgreSQL's log are ordered alike), so it costs no
        flush of its own. A crash that loses it loses the record it serves too."""
        entry = JournalEntry(key, "result", status="state", meta={**meta, "at": _stamp()})
        self.backend.append_journal(self.id, entry, durable=False)
        self._remember(entry)

    def journal(self, key: str) -> JournalEntry | None:
        return self._journal.get(("step", key))

    def journal_entries(self) -> list[JournalEntry]:
        return list(self._journal.values())

    def step_entries(self) -> list[JournalEntry]:
        """The run's intents, results and verdicts in the order they were recorded."""
        with self._lock:
            return list(self._steps)

    def record_tool(self, key: str, call: dict[str, Any]) -> None:
        """A session's work-tool call (allowed or refused, with its rule), durable: the
        audit of what agents did to the project outlives any crash after it."""
        entry = JournalEntry(key, "tool", status="allowed" if call.get("allowed") else
                             "refused", meta={**call, "at": _stamp()})
        self.backend.append_journal(self.id, entry, durable=True)
        self._remember(entry)

    def tool_calls(self) -> list[JournalEntry]:
        """The work-tool calls recorded in this run, in order."""
        return list(self._tools)

    def record_verdict(self, key: str, input_hash: str, value: bool | str, reason: str) -> None:
        entry = JournalEntry(key, "verdict", input_hash, "completed", value=value, reason=reason,
                             meta={"at": _stamp()})
        self.backend.append_journal(self.id, entry, durable=True)
        self._remember(entry)

    def verdict(self, key: str) -> JournalEntry | None:
        return self._journal.get(("verdict", key))

    def record_decision(self, key: str, value: dict[str, Any]) -> None:
        """A construct's decision that timing made (which ``parallel`` branches won), durable:
        a resumed run replays it instead of deciding again. The first one recorded stands."""
        if self.decision(key) is not None:
            return
        entry = JournalEntry(key, "decision", status="completed", value=value,
                             meta={"at": _stamp()})
        self.backend.append_journal(self.id, entry, durable=True)
        self._remember(entry)

    def decision(self, key: str) -> JournalEntry | None:
        return self._journal.get(("decision", key))

    def usage_totals(self) -> Usage:
        return self._usage

    # ------------------------------------------------------------------ agents
    def _check_agent(self, agent: AgentRef) -> None:
        check_name(agent.name, "agent name")
        if agent.scope not in AGENT_SCOPES:
            raise ValueError(f"unknown agent scope {agent.scope!r}")
        if agent.scope == "custom":
            contained_path(agent.path or "", [self.store.project_root,
                                              self.store.home / ".prose"],
                           self.store.project_root, home=self.store.home)
        self.backend.memory_location(self.id, agent)  # refuses a place outside the roots

    def agents(self) -> list[AgentRef]:
        """The persistent agents this run's sessions were granted, for state.md's index."""
        with self._lock:
            agents = list(self._agents)
        return sorted(agents, key=lambda a: (a.name, a.scope, a.path or ""))

    def has_memory(self, agent: AgentRef) -> bool:
        self._check_agent(agent)
        return self.backend.read_memory(self.id, agent) is not None

    def memory(self, agent: AgentRef) -> str | None:
        """The VM may read an agent's memory (to inline it for providers that cannot read)."""
        self._check_agent(agent)
        return self.backend.read_memory(self.id, agent)

    def segments(self, agent: AgentRef) -> list[tuple[int, str]]:
        self._check_agent(agent)
        return self.backend.list_segments(self.id, agent)

    # ------------------------------------------------------------------ state and lifecycle
    def update_state(self, snapshot: StateSnapshot) -> None:
        text = self.store.render(self, snapshot)
        self.backend.write_state(self.id, text, snapshot)

    def state_text(self) -> str:
        return self.backend.read_state(self.id)

    def begin(self) -> None:
        """A queued run's driver has taken it: it is running."""
        if self.record.status == "queued":
            self.backend.update_run(self.id, status="running", error=None)
            self.record = replace(self.record, status="running")

    def finish(self, status: str, error: str | None = None,
               snapshot: StateSnapshot | None = None) -> None:
        """End the run as ``status``. With ``snapshot`` (its driver's statuses), its last
        state.md is rendered as ended and written with the status, in one write."""
        if status not in ("completed", "failed", "interrupted"):
            raise ValueError(f"unknown run status {status!r}")
        if status == "completed":  # calls an earlier drive left and this one never entered
            with self._lock:
                left = [f for f in self._frames.values() if f.status == "executing"]
            for frame in left:
                self._frames[frame.execution_id] = replace(frame, status="cancelled")
                self.backend.put_frame(self.id, self._frames[frame.execution_id])
        self.backend.write_digest(self.id, self.store.digest(self, status, error))
        ended = replace(self.record, status=status, error=error, updated=utc_now())
        if snapshot is None:
            self.backend.update_run(self.id, status=status, error=error)
        else:
            running, self.record = self.record, ended  # state.md shows the end
            try:
                self.backend.end_run(self.id, status=status, error=error,
                                     text=self.store.render(self, snapshot), snapshot=snapshot)
            except BaseException:
                self.record = running
                raise
        self.record = ended

    def record_import(self, record: ImportRecord) -> None:
        """Register a program this run imports (the VM does, when the run starts)."""
        check_name(record.alias, "import alias")
        if not record.fetched_at:
            record = replace(record, fetched_at=utc_now())
        self.backend.put_import(self.id, record)

    def imports(self) -> list[ImportRecord]:
        return self.backend.list_imports(self.id)

    def child(self, handle: str, slug: str, program_source: str,
              program_path: str | None = None) -> Run:
        """The nested run of an imported program: imports/{handle}--{slug}/ (same layout)."""
        check_slug(handle.lstrip("@"))
        if "--" in handle:  # the folder is {handle}--{slug}: the first "--" must split it
            raise InvalidNameError(f"import handle {handle!r} must not contain '--'")
        check_slug(slug, "import slug")
        child_id = f"{self.id}/imports/{handle.lstrip('@')}--{slug}"
        try:
            record = self.backend.load_run(child_id)
        except NotFoundError:
            pass
        else:
            child = Run(self.store, record, self.vm_token)
            if child_id not in self.store.taken_over:  # first opened by this driver
                child.end_abandoned_sessions()
            return child
        now = utc_now()
        record = RunRecord(child_id, program_path, program_source, "running", now, now,
                           self.record.vm_token_hash)
        self.backend.create_run(record)
        self.store.taken_over.add(child_id)
        return Run(self.store, record, self.vm_token)


class SessionHandle:
    """What a session capability allows: its binding, its context, its agent's memory."""

    def __init__(self, run: Run, token: str, grant: dict[str, Any]) -> None:
        self.run = run
        self.token = token
        self._grant = grant
        self.binding = BindingRef(grant["name"], grant["execution_id"])
        self.kind: str = grant["kind"]
        self.source: str = grant["source"]
        self.context = {name: BindingRef(name, eid) for name, eid in grant["context"]}
        raw_agent = grant.get("agent")
        self.agent = AgentRef(*raw_agent) if raw_agent else None

    def _alive(self) -> None:
        found = self.run.store.grant(_hash(self.token), fresh=True)
        if found is None or not found[1].get("alive"):
            raise CapabilityError("a token dies when its session completes",
                                  f"the session for binding '{self.binding.name}' has ended")

    def write_output(self, value: str) -> Binding:
        """Write this session's own binding (the only binding it may write)."""
        self._alive()
        binding = Binding(self.binding.name, self.binding.execution_id, self.kind, self.source,
                          value)
        self.run.backend.put_binding(self.run.id, binding, durable=False)
        self.run.index_binding(self.binding, self.kind)
        return binding

    def write_binding(self, name: str, value: str, execution_id: int | None = None) -> Binding:
        if BindingRef(name, execution_id) != self.binding:
            raise CapabilityError("a session may write only its assigned binding",
                                  f"this session writes '{self.binding.name}', not '{name}'")
        return self.write_output(value)

    def read_context(self, name: str) -> str:
        """Read a binding this session was given as context."""
        self._alive()
        ref = self.context.get(name)
        if ref is None:
            raise CapabilityError("a session reads only the bindings it was given as context",
                                  f"'{name}' is not in this session's context")
        return self.run.read_binding(ref).value

    def _agent(self) -> AgentRef:
        self._alive()
        if self.agent is None:
            raise CapabilityError("only a persistent agent's session touches its memory",
                                  f"the session for '{self.binding.name}' has no agent memory")
        return self.agent

    def read_memory(self) -> str | None:
        return self.run.backend.read_memory(self.run.id, self._agent())

    def memory_location(self) -> str:
        """Where this session's agent keeps its memory."""
        return self.run.backend.memory_location(self.run.id, self._agent())

    def write_memory(self, text: str) -> None:
        self.run.backend.write_memory(self.run.id, self._agent(), text)

    def append_segment(self, text: str) -> int:
        return self.run.backend.append_segment(self.run.id, self._agent(), text)
