"""Starting and resuming runs: compile, open state, interpret, report the outcome.

This is the engine's public entry point for the CLI (``prose run``/``prose resume``) and,
later, the MCP server when a host delegates a whole program.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openprose import state
from openprose.engine import inputs as input_rules
from openprose.engine.errors import (
    BudgetExhausted,
    EngineError,
    InputPaused,
    MissingInput,
    ProgramError,
    ProgramFailed,
    ProviderUnavailable,
    ResumeMismatch,
)
from openprose.engine.events import Event, Listener
from openprose.engine.imports import Imported, ImportLoader, resolve
from openprose.engine.interpreter import Interpreter, Options, RunBudget
from openprose.engine.plan import Plan, plan
from openprose.engine.provider import Provider, Usage
from openprose.engine.state_journal import RENDER_INTERVAL, StateJournal, recorded_inputs
from openprose.engine.values import Value
from openprose.engine.work_tools import WorkSetup, default_setup
from openprose.language import compile as compile_program
from openprose.language import nodes as n
from openprose.state.view import run_journal, usage_of


@dataclass
class Job:
    """One run to start (``run_id`` None) or to resume."""

    source: str
    file: str
    program: n.Program
    project_root: Path
    backend: str = "filesystem"
    inputs: dict[str, Value] = field(default_factory=dict)
    imports: dict[str, Imported] = field(default_factory=dict)
    max_concurrency: int = 16
    ask: Callable[[str, str], str | None] | None = None
    run_id: str | None = None
    options: Options | None = None
    #: The run's driver lock, once taken (``resume_job`` takes it; ``execute`` otherwise).
    driver: state.DriverLock | None = None
    #: How this run is driven (provider name, script path, max_concurrency; never a key or
    #: secret), recorded in the run with its backend, so a resume needs no flags.
    settings: dict[str, Any] = field(default_factory=dict)
    #: How the run was last driven, as recorded (``resume_job`` reads it).
    recorded: dict[str, Any] = field(default_factory=dict)
    #: The store to drive the run in, closed at the end (a worker's ``StateStore.fresh``,
    #: sharing its connections); None: ``execute`` opens the project's on ``backend``.
    store: state.StateStore | None = None
    #: Work tools for sessions and their permission policy (default: the project's, with
    #: the default permissions and nobody to ask).
    work: WorkSetup | None = None
    #: The run's token and cost limits.
    budget: RunBudget | None = None
    #: Trace the run with OpenTelemetry even without an OTLP endpoint in the environment
    #: (``prose run --trace``; see :mod:`openprose.engine.tracing`).
    trace: bool = False
    #: How the run is driven, as its trace names it: run, guided or delegated.
    mode: str = "run"
    #: Seconds at least between renders of state.md while the run goes (a worker, driving
    #: many runs at once, renders less often than one ``prose run``).
    render_interval: float = RENDER_INTERVAL


@dataclass
class Outcome:
    run_id: str
    #: completed | failed | interrupted | paused (waiting for an input) | over_budget
    status: str
    outputs: dict[str, Value] = field(default_factory=dict)
    sessions: int = 0
    reused: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None
    usage_error: bool = False
    warnings: list[str] = field(default_factory=list)
    #: The input a paused run waits for: (name, prompt as shown).
    waiting_for: tuple[str, str] | None = None

    @property
    def exit_code(self) -> int:
        if self.status == "completed":
            return 0
        if self.status == "interrupted":
            return 130
        if self.status == "paused":
            return 3
        if self.status == "over_budget":
            return 4
        return 2 if self.usage_error else 1

    def to_dict(self) -> dict[str, Any]:
        data = {"run_id": self.run_id, "status": self.status, "outputs": self.outputs,
                "sessions": self.sessions, "reused": self.reused, "tokens": self.tokens,
                "cost_usd": round(self.cost_usd, 6),
                "error": self.error, "warnings": self.warnings}
        if self.waiting_for is not None:
            data["waiting_for"] = {"input": self.waiting_for[0], "prompt": self.waiting_for[1]}
        return data


#: Journal key of the record of how a run was driven (``ns:`` keys are not program steps).
SETTINGS_KEY = "run:settings"
#: Journal key of the input values a run was given (its value: name -> value), so a resume
#: has them though the run was stopped before reaching their ``input`` statements.
INPUTS_KEY = "run:inputs"


def load_imports(program: n.Program, file: str | None, project_root: Path
                 ) -> dict[str, Imported]:
    """``program``'s imports; ``file`` (None: the program is no file) is where it is, a
    relative path being the project's: imports resolve from there, never from the working
    directory of whoever runs it (a server may be started anywhere)."""
    return ImportLoader(project_root / ".prose" / "cache" / "imports",
                        roots=[project_root], base=project_root).load(program, file)


def fetch_program(spec: str, project_root: Path) -> tuple[str, str] | None:
    """The source and URL of a program named by URL or ``handle/slug`` (ruling 6), fetched
    and cached by content hash as ``use`` imports are; ``None`` when ``spec`` is neither."""
    location = resolve(spec, None)
    if not location.is_url:
        return None
    loader = ImportLoader(project_root / ".prose" / "cache" / "imports")
    return loader.fetch(location), location.where


def dry_run(program: n.Program, imports: dict[str, Imported] | None = None) -> Plan:
    return plan(program, imports)


def resume_job(run_id: str, project_root: Path, backend: str | None,
               program_file: str | None = None, store: state.StateStore | None = None,
               **settings: Any) -> Job:
    """Prepare a resume: the run's own program copy (or an edited file) and its inputs.
    The run's driver lock is taken first (a run another process drives is refused before
    anything is read or repaired) and handed to the job, which :func:`execute` releases.
    ``store``: the store to read the run from, handed on to the job, so that :func:`execute`
    drives the run it read here without reading it again (and closes it); None: the
    project's, opened and closed here."""
    given = store
    try:
        store = store or state.open_store(project_root,
                                          backend or _find_backend(project_root, run_id))
    except state.StateError as err:
        raise EngineError(f"cannot resume {run_id}: {err}") from err
    driver: state.DriverLock | None = None
    try:
        driver = store.driver_lock(run_id)
        run = store.open_run(run_id)
        if program_file is not None:
            source, file = read_source(Path(program_file)), program_file
            where: str | None = str(Path(program_file).absolute())
        else:
            source, file = run.program_source, run.program_path or f"{run_id}/program.prose"
            where = run.program_path
        result = compile_program(source, file,
                                 root=project_root if program_file is None else None)
        if not result.ok or result.program is None:
            raise ResumeMismatch(f"the program of run {run_id} no longer compiles")
        imports = load_imports(result.program, where, project_root)
        inputs = run_inputs(run, result.program)
        recorded = run_settings(run)
    except BaseException as err:
        if driver is not None:
            driver.release()
        store.close()
        if isinstance(err, state.StateError):
            raise EngineError(f"cannot resume {run_id}: {err}") from err
        raise
    if given is None:
        store.close()
    return Job(source=source, file=file, program=result.program, project_root=project_root,
               backend=store.kind, inputs=inputs, imports=imports, run_id=run_id,
               driver=driver, recorded=recorded, store=given, **settings)


def set_budget(job: Job, max_tokens: int | None = None, max_cost: float | None = None
               ) -> None:
    """``job``'s budget: the limits given, else the settings' (a bad one raises
    :class:`EngineError` naming it); recorded with the run so a resume or a worker keeps it
    unless raised."""
    from openprose.state.config import MAX_COST_SETTING, MAX_TOKENS_SETTING

    env = state.settings(job.project_root)
    try:
        max_tokens = max_tokens or (int(env[MAX_TOKENS_SETTING])
                                    if env.get(MAX_TOKENS_SETTING) else None)
        max_cost = max_cost or (float(env[MAX_COST_SETTING])
                                if env.get(MAX_COST_SETTING) else None)
    except ValueError as err:
        raise EngineError(f"{MAX_TOKENS_SETTING} / {MAX_COST_SETTING}: not a number "
                          f"({err})") from None
    if max_tokens is None and max_cost is None:
        return
    job.budget = RunBudget(max_tokens, max_cost)
    job.settings.update({key: value for key, value in
                         (("max_tokens", max_tokens), ("max_cost", max_cost)) if value})


def run_settings(run: state.Run) -> dict[str, Any]:
    """How ``run`` was last driven (empty when it never said)."""
    entry = run.journal(SETTINGS_KEY)
    if entry is None:
        return {}
    return {key: value for key, value in entry.meta.items() if key != "at"}


_UNSET = object()


def given_inputs(run: state.Run) -> dict[str, Value]:
    """The input values ``run`` was given when started or resumed (recorded as given)."""
    entry = run.journal(INPUTS_KEY)
    return dict(entry.value) if entry is not None and isinstance(entry.value, dict) else {}


def record_given(run: state.Run, inputs: dict[str, Value]) -> None:
    """Record ``inputs`` as given to ``run`` (added to those given before). Every mode gives
    inputs this way and none binds them here: each input is bound when execution reaches its
    declaration (:mod:`openprose.engine.inputs`)."""
    given = given_inputs(run)
    if any(given.get(name, _UNSET) != value for name, value in inputs.items()):
        run.record_result(INPUTS_KEY, status="inputs", value={**given, **inputs})


def run_inputs(run: state.Run, program: n.Program) -> dict[str, Value]:
    """The input values ``run`` has for ``program``: those given (bound or not yet reached)
    and those bound from an answer."""
    declared = {decl.name for decl in program.inputs}
    inputs = {name: value for name, value in given_inputs(run).items() if name in declared}
    inputs.update(recorded_inputs(run, program))
    return inputs


def read_source(path: Path) -> str:
    """A program file's text; unreadable or non-UTF-8 files raise :class:`EngineError`
    naming the file (and the line and column of the first bad byte)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise EngineError(f"{path}: cannot read ({err.strerror})") from None
    return decode_source(data, str(path))


def decode_source(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise EngineError(f"{where}:{line}:{column}: not UTF-8 text (byte "
                          f"0x{data[err.start]:02x}); save the program as UTF-8") from None


def _find_backend(project_root: Path, run_id: str) -> str:
    """Where a run lives: a local run directory says filesystem or SQLite; otherwise it is on
    PostgreSQL when the project has one configured (its directory holds only copies)."""
    runs = project_root / ".prose" / "runs" / run_id
    if (runs / "state.db").exists():
        return "sqlite"
    if (runs / "run.json").exists() or not state.postgres_url(project_root.resolve()):
        return "filesystem"
    return "postgres"


async def execute(job: Job, provider: Provider, listener: Listener | None = None,
                  on_start: Callable[[str], None] | None = None) -> Outcome:
    """Run (or resume) ``job`` to the end; never raises for program failures.

    ``on_start`` gets the run id as soon as the run exists (before any session). A new run
    whose up-front inputs are missing (and nobody can be asked) raises :class:`MissingInput`
    naming all of them before any run is created.
    """
    ask = job.options.ask if job.options is not None else job.ask
    if job.run_id is None and ask is None:
        missing = input_rules.missing(job.program, job.inputs)
        if missing:
            raise MissingInput(*missing)
    store = job.store or state.open_store(job.project_root, job.backend)
    try:
        resumed = job.run_id is not None
        if job.run_id is None:
            run_id = state.new_run_id()
            job.driver = store.driver_lock(run_id, new=True)
            run = store.create_run(job.source, job.file, run_id=run_id)
            job.run_id = run.id
        else:
            if job.driver is None or not job.driver.held:
                job.driver = store.driver_lock(job.run_id)
            run = store.open_run(job.run_id)
            run.end_abandoned_sessions()  # the lock is held: no other driver is alive
            run.begin()
    except BaseException:
        store.close()
        _release(job)
        raise
    try:
        return await _drive(job, store, run, provider, listener, on_start, resumed)
    finally:
        _release(job)


def _release(job: Job) -> None:
    if job.driver is not None:
        job.driver.release()


async def _drive(job: Job, store: state.StateStore, run: state.Run, provider: Provider,
                 listener: Listener | None, on_start: Callable[[str], None] | None,
                 resumed: bool) -> Outcome:
    """Interpret the run, traced when tracing is wanted (:mod:`openprose.engine.tracing`,
    imported only then)."""
    if not tracing_wanted(job.trace):
        return await _interpret(job, store, run, provider, listener, on_start, resumed)
    from openprose.engine import tracing

    previous = run.journal(tracing.TRACE_KEY)
    try:
        trace = tracing.start(run.id, job.file, provider.name,
                              getattr(provider, "default_model", None),
                              previous.meta if previous is not None and resumed else None,
                              job.mode)
    except ImportError:  # no openprose[otel]: the command line said so already
        return await _interpret(job, store, run, provider, listener, on_start, resumed)
    run.record_result(tracing.TRACE_KEY, status="trace", meta=trace.carrier())
    outcome: Outcome | None = None
    try:
        with trace.active():
            outcome = await _interpret(job, store, run, provider, _both(trace, listener),
                                       on_start, resumed)
        return outcome
    finally:
        if outcome is None:
            trace.end("interrupted", "interrupted")
        else:
            trace.end(outcome.status, outcome.error, outcome.sessions, outcome.tokens)
        await asyncio.shield(asyncio.to_thread(trace.flush))


def tracing_wanted(flag: bool = False) -> bool:
    """Whether a run is traced (``flag``: ``--trace``); cheap, imports nothing."""
    return flag or any(os.environ.get(name) for name in TRACE_ENDPOINTS)


#: Environment variables that turn tracing on (the OTLP exporter's own endpoint settings).
TRACE_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


async def _interpret(job: Job, store: state.StateStore, run: state.Run, provider: Provider,
                     listener: Listener | None, on_start: Callable[[str], None] | None,
                     resumed: bool) -> Outcome:
    if job.settings:
        how = {**job.settings, "backend": store.kind}
        if how != job.recorded:
            run.record_result(SETTINGS_KEY, status="settings", meta=how)
            job.recorded = how
    record_given(run, job.inputs)
    if on_start is not None:
        on_start(run.id)
    # A resumed run's state.md changes from its first new session or verdict on: replaying
    # finished work (and a refusal found while replaying) leaves it as it was.
    journal = StateJournal(run, getattr(provider, "record_commit", None),
                           render_interval=job.render_interval, hold_renders=resumed)
    options = job.options or Options(max_concurrency=job.max_concurrency, ask=job.ask)
    if options.work is None:
        options.work = job.work or default_setup(job.project_root)
    if options.budget is None and job.budget is not None:
        options.budget = job.budget
    if options.budget is not None:  # what it spent before, in the programs it imported too
        spent = usage_of(run_journal(store, run.id))
        options.budget.spent = Usage(spent.input_tokens, spent.output_tokens, spent.cost_usd)
    outcome = Outcome(run.id, "failed")

    def record(event: Event) -> None:
        journal.on_event(event)
        if event.kind == "warning" and event.text not in outcome.warnings:
            outcome.warnings.append(event.text)  # once per statement, not per iteration

    options.listener = _both(record, listener)
    interpreter = Interpreter(job.program, job.source, journal, provider, file=job.file,
                              inputs=job.inputs, imports=job.imports, options=options)
    refused = False
    try:
        with _young_objects_only():
            outcome.outputs = await interpreter.run()
        outcome.status = "completed"
    except ProgramError as err:
        outcome.error = str(ProgramFailed(err))
    except InputPaused as err:
        outcome.status, outcome.error = "paused", str(err)
        outcome.waiting_for = (err.name, err.prompt)
    except BudgetExhausted as err:  # stopped, resumable with a higher budget
        outcome.status, outcome.error = "over_budget", str(err)
    except ResumeMismatch as err:  # a refusal: the run stays exactly as it was
        outcome.error, outcome.usage_error, refused = str(err), True, True
    except MissingInput as err:
        outcome.error, outcome.usage_error = str(err), True
    except EngineError as err:
        outcome.error = f"{type(err).__name__}: {err}"
    except state.StateError as err:  # a full disk, state damaged under the run
        return _stopped_by_state(journal, store, outcome, err)
    except (asyncio.CancelledError, KeyboardInterrupt):
        await journal.settle()
        journal.finish("interrupted", "interrupted")
        store.close()
        raise
    finally:
        await provider.aclose()
    await journal.settle()
    totals = interpreter.totals
    outcome.sessions, outcome.reused = totals.sessions, totals.reused
    outcome.tokens = totals.usage.input_tokens + totals.usage.output_tokens
    outcome.cost_usd = totals.usage.cost_usd
    if not refused:  # a paused run is recorded as interrupted: resumable, waiting for input
        journal.finish("interrupted" if outcome.status in ("paused", "over_budget")
                       else outcome.status, outcome.error)
    store.close()
    return outcome


def _stopped_by_state(journal: StateJournal, store: state.StateStore, outcome: Outcome,
                      err: state.StateError) -> Outcome:
    """The state could not be written (or read): the run stops, interrupted with the reason,
    as far as the state still takes it. What was committed before stays."""
    outcome.status, outcome.error = "interrupted", str(err)
    try:
        journal.finish("interrupted", str(err))
    except state.StateError as also:
        outcome.error += f" (and its status could not be recorded: {also})"
    store.close()
    return outcome


@contextmanager
def _young_objects_only() -> Iterator[None]:
    """Leave the objects alive when the run starts (modules, the program, its state) out of
    the garbage collector's scans while it runs: a full scan of them stalls the event loop
    for tens of milliseconds, and every session in flight waits. They are scanned again
    afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _both(first: Listener, second: Listener | None) -> Listener:
    if second is None:
        return first

    def both(event: Event) -> None:
        first(event)
        second(event)

    return both


def make_provider(name: str, script: Path | None, project_root: Path) -> Provider:
    """The provider a command line or a tool call names: ``scripted`` plays ``script`` (its
    call log kept in the project); ``anthropic`` reads its key and settings from the
    environment and the project's ``.prose/.env`` (the file wins, as for the state backend's settings). Raises
    :class:`ProviderUnavailable` saying what is missing."""
    if name == "scripted":
        from openprose.engine.scripted import ScriptedProvider

        if script is None:
            raise ProviderUnavailable("the scripted provider needs a script file")
        return ScriptedProvider.from_file(script, project_root.resolve())
    from openprose.engine.anthropic_provider import AnthropicProvider  # its SDK loads slowly
    from openprose.state import settings

    return AnthropicProvider(env=settings(project_root))
