"""``prose run`` and ``prose resume``: execute a program, or continue an interrupted run.

The program is a file, ``-`` (read from stdin), an ``https://`` URL or registry shorthand
``handle/slug`` (fetched once and cached by content hash, as ``use`` imports are).

Exit status: 0 the run completed, 1 the program failed, 2 usage problems or compile errors
(diagnostics shown), 3 the run paused at an ``input`` nobody could answer (resume it with the
value), 4 the run stopped at its budget (resumable with a higher one), 130 interrupted (the
run stays consistent and resumable).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn

import click

from openprose.language import compile as compile_program
from openprose.state import BACKENDS
from openprose.terminal import printable

PROVIDERS = ["anthropic", "scripted"]
CONCURRENCY = 16


def _read_input_file(name: str, path: str, command: str) -> str:
    """The text of ``--input NAME=@PATH``: UTF-8, at most a value's limit in bytes."""
    from openprose.state.models import MAX_VALUE_BYTES

    limit = f"{MAX_VALUE_BYTES // (1024 * 1024)} MiB"
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_VALUE_BYTES + 1)
    except OSError as err:
        _refuse(command, f"--input {name}: cannot read {path}: {err.strerror}")
    if len(data) > MAX_VALUE_BYTES:
        _refuse(command, f"--input {name}: {path} is larger than the {limit} limit for an "
                         "input file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        _refuse(command, f"--input {name}: {path} is not UTF-8 text (byte {err.start})")


def _refuse(command: str, message: str, status: str = "refused", **details: Any) -> NoReturn:
    """One line naming the problem and where; exit 2. Under ``--json`` stdout gets a JSON
    result as well (no run id: nothing was run)."""
    context = click.get_current_context(silent=True)
    if context is not None and context.params.get("as_json"):
        click.echo(json.dumps({"run_id": None, "status": status, "error": message, **details},
                              ensure_ascii=False))
    click.echo(f"prose {command}: {message}", err=True)
    sys.exit(2)


def parse_inputs(pairs: tuple[str, ...], command: str = "run") -> dict[str, str]:
    from openprose.engine.inputs import placeholder_refusal

    inputs: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            _refuse(command, f"--input takes NAME=VALUE or NAME=@FILE, got {pair!r}")
        if value.startswith("@"):
            value = _read_input_file(name.strip(), value[1:], command)
        elif (why := placeholder_refusal(name.strip(), value)) is not None:
            _refuse(command, why)
        inputs[name.strip()] = value
    return inputs


def _project(project: str, command: str) -> Path:
    """The project root: it must exist (it is never created), and so must be usable."""
    root = Path(project)
    if not root.is_dir():
        _refuse(command, f"--project {project}: "
                         f"{'not a directory' if root.exists() else 'no such directory'}")
    dot = root / ".prose"
    if dot.exists() and not dot.is_dir():
        _refuse(command, f"{dot} is a file; the project's state needs a .prose directory there")
    return root


_SHORTHAND = re.compile(r"^@?[A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _read_program(spec: str, root: Path, command: str) -> tuple[str, str]:
    """(source, file) of the program named on the command line."""
    from openprose.engine.errors import EngineError
    from openprose.engine.runner import decode_source, fetch_program, read_source

    try:
        if spec == "-":
            if sys.stdin is None:
                _refuse(command, "stdin is closed: there is no program to read from '-'")
            return decode_source(sys.stdin.buffer.read(), "<stdin>"), "<stdin>"
        if spec.startswith(("http://", "https://")) or (
                _SHORTHAND.match(spec) and not Path(spec).exists()):
            fetched = fetch_program(spec, root)
            if fetched is not None:
                return fetched
        return read_source(Path(spec)), spec
    except EngineError as err:
        _refuse(command, str(err))


def cli_provider(name: str, script: str | None, project: str, command: str = "run") -> Any:
    """The provider named on the command line (see :func:`engine.runner.make_provider`),
    or a refusal naming what is missing."""
    from openprose.engine.errors import ProviderUnavailable
    from openprose.engine.runner import make_provider

    if name == "scripted" and script is None:
        _refuse(command, "--provider scripted needs --script FILE (YAML or JSON; see "
                         "examples/hello.script.yaml)")
    try:
        return make_provider(name, Path(script) if script else None, Path(project))
    except ProviderUnavailable as err:
        _refuse(command, str(err))


def _common(fn: Any) -> Any:
    options = [
        click.option("--state", "backend", type=click.Choice(BACKENDS), default=None,
                     help="State backend (default: filesystem; resume: the run's own)."),
        click.option("--provider", type=click.Choice(PROVIDERS), default=None,
                     help="Who runs sessions and judges conditions (default: anthropic; "
                          "resume: the run's own)."),
        click.option("--script",
                     help="Script file for --provider scripted (resume: the run's own)."),
        click.option("--max-concurrency", type=click.IntRange(1, 1000), default=None,
                     help=f"Most model calls in flight at once (default: {CONCURRENCY}; "
                          "resume: the run's own)."),
        click.option("--json", "as_json", is_flag=True,
                     help="Print one JSON result: run_id, status, outputs, sessions, tokens."),
        click.option("--project", default=".", show_default=True,
                     help="Project root holding .prose/ (an existing directory)."),
        click.option("--allow-bash", is_flag=True,
                     help="Let sessions run shell commands (in the OS sandbox) without asking, "
                          "where their program says bash: prompt (the default)."),
        click.option("--allow-network", is_flag=True,
                     help="Let sessions use the network without asking, where their program "
                          "says network: prompt (the default)."),
        click.option("--max-tokens", type=click.IntRange(1), default=None,
                     help="Stop the run before a new session once it has used this many "
                          "tokens (resume: the run's own unless given; OPENPROSE_MAX_TOKENS)."),
        click.option("--max-cost", type=click.FloatRange(0, min_open=True), default=None,
                     help="Stop the run before a new session once it has cost this many US "
                          "dollars (needs OPENPROSE_PRICE_*; OPENPROSE_MAX_COST)."),
        click.option("--allow-unsandboxed-bash", "allow_unsandboxed", is_flag=True,
                     help="Where no OS sandbox exists (no bubblewrap or sandbox-exec), run "
                          "permitted shell commands unconfined."),
        click.option("--trace", is_flag=True,
                     help="Send an OpenTelemetry trace of the run over OTLP/HTTP (on anyway "
                          "when OTEL_EXPORTER_OTLP_ENDPOINT is set; needs openprose[otel])."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.command("run")
@click.argument("file")
@click.option("--input", "inputs", multiple=True, metavar="NAME=VALUE|NAME=@FILE",
              help="Value for a program input (repeatable).")
@click.option("--dry-run", is_flag=True,
              help="Walk the program without a model: sessions and judgments per construct.")
@click.option("--detach", is_flag=True,
              help="Queue the run for `prose worker` processes and print its id (needs "
                   "--state postgres and the workers extra).")
@click.option("--queue", default="runs", show_default=True,
              help="With --detach: the queue the run goes to.")
@_common
def run_command(file: str, inputs: tuple[str, ...], dry_run: bool, detach: bool, queue: str,
                backend: str | None, provider: str | None, script: str | None,
                max_concurrency: int | None, as_json: bool, project: str,
                **grants: Any) -> None:
    """Run an OpenProse program (a file, - for stdin, a URL or handle/slug)."""
    root = _project(project, "run")
    source, file = _read_program(file, root, "run")
    result = compile_program(source, file)
    if not result.ok or result.program is None:
        for diagnostic in result.diagnostics:
            click.echo(diagnostic.format(source), err=True)
        if result.omitted_note:
            click.echo(result.omitted_note, err=True)
        if as_json:
            click.echo(json.dumps({"run_id": None, "status": "invalid", "file": file,
                                   "errors": [d.format(source).splitlines()[0]
                                              for d in result.errors]}, ensure_ascii=False))
        sys.exit(2)
    from openprose.engine import runner
    from openprose.engine.errors import ImportFailed
    from openprose.engine.inputs import undeclared

    try:
        imports = runner.load_imports(
            result.program, file if file == "<stdin>" or "://" in file
            else str(Path(file).absolute()), root)
    except ImportFailed as err:
        _refuse("run", str(err))
    if dry_run:
        _print_plan(runner.dry_run(result.program, imports), as_json)
        return
    values = parse_inputs(inputs, "run")
    _check_declared(undeclared(result.program, values), result.program, "run")
    job = runner.Job(source=source, file=file, program=result.program, imports=imports,
                     inputs=values, project_root=root, backend=backend or "filesystem")
    _how(job, provider or "anthropic", script, max_concurrency or CONCURRENCY)
    _budget(job, grants.pop("max_tokens"), grants.pop("max_cost"), root, "run")
    chosen = cli_provider(job.settings["provider"], script, project)
    if detach:
        _detach(job, queue, as_json, grants)
        return
    execute(job, chosen, as_json, project, grants)


def _detach(job: Any, queue: str, as_json: bool, grants: dict[str, bool]) -> None:
    """Queue ``job`` for the workers, its consent (flags and settings) recorded with it;
    print its id."""
    from openprose.cli.worker_cmd import check_queue
    from openprose.engine.inputs import missing
    from openprose.engine.permissions import Grants
    from openprose.errors import OpenProseError
    from openprose.state import settings

    if job.backend != "postgres":
        _refuse("run", "--detach queues the run in PostgreSQL for workers: add --state postgres")
    check_queue("run", queue)
    absent = missing(job.program, job.inputs)
    if absent:
        _refuse("run", "--detach: nobody can answer inputs: give "
                       + ", ".join(f"--input {name}=..." for name, _ in absent))
    given = Grants.from_settings(settings(job.project_root),
                                 bash=grants.get("allow_bash", False),
                                 network=grants.get("allow_network", False),
                                 unsandboxed=grants.get("allow_unsandboxed", False))
    from openprose.workers.queue import enqueue

    try:
        run_id, job_id = enqueue(job, given, queue)
    except OpenProseError as err:
        _refuse("run", str(err))
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "status": "queued", "queue": queue,
                               "job": job_id}))
    else:
        click.echo(run_id)
        click.echo(f"run {run_id} queued on {queue!r}; follow it with prose watch {run_id}",
                   err=True)


def _check_declared(unknown: list[str], program: Any, command: str) -> None:
    if unknown:
        declared = ", ".join(decl.name for decl in program.inputs) or "none"
        _refuse(command, f"--input {unknown[0]}: the program declares no such input "
                         f"(its inputs: {declared})")


@click.command("resume")
@click.argument("run_id")
@click.option("--input", "inputs", multiple=True, metavar="NAME=VALUE|NAME=@FILE",
              help="Supply an input the run paused on (repeatable).")
@click.option("--program", "program_file",
              help="Resume against this (possibly edited) program instead of the run's copy; "
                   "refused where a recorded step no longer matches.")
@_common
def resume_command(run_id: str, inputs: tuple[str, ...], program_file: str | None,
                   backend: str | None, provider: str | None,
                   script: str | None, max_concurrency: int | None, as_json: bool,
                   project: str, **grants: Any) -> None:
    """Continue an interrupted or failed run: finished sessions are not called again.
    Provider, script, state backend and concurrency are the run's own unless given."""
    from openprose.engine import runner
    from openprose.engine.errors import EngineError
    from openprose.engine.inputs import undeclared

    root = _project(project, "resume")
    try:
        job = runner.resume_job(run_id, root, backend, program_file)
    except EngineError as err:
        _refuse("resume", str(err))
    given = parse_inputs(inputs, "resume")
    _check_declared(undeclared(job.program, given), job.program, "resume")
    job.inputs.update(given)
    was = job.recorded
    provider = provider or was.get("provider") or "anthropic"
    if script is None and provider == was.get("provider"):
        script = was.get("script")
    _how(job, provider, script, max_concurrency or was.get("max_concurrency") or CONCURRENCY)
    try:
        _budget(job, grants.pop("max_tokens") or was.get("max_tokens"),
                grants.pop("max_cost") or was.get("max_cost"), root, "resume")
        chosen = cli_provider(provider, script, project, "resume")
    except BaseException:
        if job.driver is not None:
            job.driver.release()
        raise
    execute(job, chosen, as_json, project, grants)


def _how(job: Any, provider: str, script: str | None, max_concurrency: int) -> None:
    """How the job runs, to be recorded in the run (a script by its absolute path, so the
    resume hint works from anywhere)."""
    job.max_concurrency = max_concurrency
    job.settings = {"provider": provider,
                    "script": str(Path(script).resolve()) if script else None,
                    "max_concurrency": max_concurrency}


def _budget(job: Any, max_tokens: int | None, max_cost: float | None, root: Path,
            command: str) -> None:
    """The run's budget: flags, else (resume) what the run recorded, else the settings."""
    from openprose.engine.errors import EngineError
    from openprose.engine.runner import set_budget

    try:
        set_budget(job, max_tokens, max_cost)
    except EngineError as err:
        _refuse(command, str(err))


def resume_hint(run_id: str, project: str = ".") -> str:
    """The command that resumes ``run_id``, as typed where this process was started."""
    import shlex

    command = f"prose resume {run_id}"
    if Path(project).resolve() != Path.cwd().resolve():
        command += f" --project {shlex.quote(str(Path(project).resolve()))}"
    return command


def _asker(as_json: bool, progress: Any) -> Any:
    """Ask for a missing input on the terminal; ``None`` when there is none to ask on.

    The prompt runs on a thread of its own, so Ctrl-C interrupts the run at once, and the
    live progress display steps aside while the user types."""
    if as_json or sys.stdin is None or not sys.stdin.isatty():
        return None
    from openprose.engine.inputs import is_optional

    async def ask(name: str, description: str) -> str | None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str | None] = loop.create_future()

        def settle(value: str | None) -> None:
            if not answer.done():
                answer.set_result(value)

        def prompt() -> None:
            text = f"{name} ({description})" if description else name
            value = _read_line(text)
            while value == "" and not is_optional(description):
                value = _read_line(text)
            loop.call_soon_threadsafe(settle, value)

        with progress.paused() if progress is not None else nullcontext():
            threading.Thread(target=prompt, name=f"ask-{name}", daemon=True).start()
            return await answer

    return ask


def _read_line(prompt: str) -> str | None:
    """One line from the terminal (``None`` at end of input: the run pauses). Read from the
    file descriptor, not ``sys.stdin``: a prompt abandoned by Ctrl-C then holds no lock the
    interpreter needs to exit."""
    sys.stderr.write(f"{printable(prompt)}: ")
    sys.stderr.flush()
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(sys.stdin.fileno(), 4096)
        if not chunk:
            return None
        data += chunk
    return data.decode("utf-8", errors="replace").rstrip("\r\n")


class _Stop:
    """Ctrl-C and SIGTERM end a run alike: the first cancels it (the engine records what
    finished, marks the run interrupted and releases it), a second while it winds down says
    so, a third leaves at once. The signals are taken over for the whole run, so none lands
    in the middle of the wind-down or of the closing message.

    The kernel may deliver a signal to any thread, such as the one waiting at an input
    prompt; Python then runs the handler only once the main thread next executes bytecode,
    and an idle event loop sleeps on. So the signal also writes a byte to a socket the loop
    watches (``signal.set_wakeup_fd``, from whichever thread the kernel chose): the loop
    wakes, and the handler runs."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_force: Any) -> None:
        self.count = 0
        self.on_force = on_force
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.previous: dict[int, Any] = {}
        self.wakeup = socket.socketpair()
        self.previous_wakeup = -1

    def __enter__(self) -> _Stop:
        for end in self.wakeup:
            end.setblocking(False)
        self.previous_wakeup = signal.set_wakeup_fd(self.wakeup[1].fileno(),
                                                    warn_on_full_buffer=False)
        for sig in self.SIGNALS:
            self.previous[sig] = signal.signal(sig, self._signalled)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            # Leaving with status 130: a late signal must not cut that short.
            signal.signal(sig, signal.SIG_IGN if self.count else handler)
        signal.set_wakeup_fd(self.previous_wakeup)
        for end in self.wakeup:
            end.close()

    def attach(self, task: asyncio.Task[Any]) -> None:
        """The task running the run (a signal that came earlier cancels it now); the loop
        running it wakes at every signal. :meth:`detach` when the task ends."""
        self.loop, self.task = asyncio.get_running_loop(), task
        self.loop.add_reader(self.wakeup[0].fileno(), self._drain)
        if self.count:
            task.cancel()

    def detach(self) -> None:
        if self.loop is not None:
            self.loop.remove_reader(self.wakeup[0].fileno())

    def _drain(self) -> None:
        """Empty the wakeup socket: waking the loop was its whole purpose."""
        with contextlib.suppress(OSError):
            while self.wakeup[0].recv(512):
                pass

    def _signalled(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            if self.loop is not None and self.task is not None and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self.task.cancel)
        elif self.count == 2:
            os.write(2, b"\nstopping: saving the run's state (interrupt again to quit now)\n")
        else:
            self.on_force()
            os._exit(130)


def _consent(as_json: bool, progress: Any) -> Any:
    """Ask on the terminal whether an agent may do what its program left to ``prompt``:
    yes, no, or always (this agent, this run). ``None`` without a terminal (nobody can
    answer: the call is refused, naming the flag that allows it). One question at a time,
    on a thread of its own, the live progress display stepping aside."""
    if as_json or sys.stdin is None or not sys.stdin.isatty():
        return None
    from openprose.engine.permissions import shown

    lock = asyncio.Lock()

    async def consent(request: Any) -> str | None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str | None] = loop.create_future()
        what = "run a shell command" if request.tool == "bash" else "use the network"
        statement = shown(request.statement.strip().splitlines()[0]) if request.statement \
            else ""

        def prompt() -> None:
            sys.stderr.write(f"\nagent '{request.agent}' wants to {what}\n")
            if statement:
                sys.stderr.write(f"  statement: {statement}\n")
            if request.tool == "bash":
                sys.stderr.write(f"  command:   {shown(request.subject)}\n")
            while True:
                line = _read_line("allow? [y]es / [n]o / [a]lways for this agent in this run")
                word = None if line is None else line.strip().lower()
                choice = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "a": "always",
                          "always": "always"}.get(word or "")
                if line is None or choice is not None:
                    loop.call_soon_threadsafe(settle, choice)
                    return

        def settle(choice: str | None) -> None:
            if not answer.done():
                answer.set_result(choice)

        async with lock:
            with progress.paused() if progress is not None else nullcontext():
                threading.Thread(target=prompt, name="consent", daemon=True).start()
                return await answer

    return consent


def execute(job: Any, provider: Any, as_json: bool, project: str,
             grants: dict[str, bool] | None = None) -> None:
    from openprose.engine import runner
    from openprose.engine.errors import MissingInput
    from openprose.state import StateError

    def started(run_id: str) -> None:
        click.echo(f"run {run_id} started", err=True)
        sys.stderr.flush()

    def interrupted() -> None:
        if job.run_id is None:
            click.echo("\ninterrupted before the run started", err=True)
        else:
            click.echo(f"\ninterrupted; the run is consistent: "
                       f"{resume_hint(job.run_id, project)}", err=True)
        sys.stderr.flush()

    async def drive(listener: Any) -> Any:
        task = asyncio.current_task()
        assert task is not None
        stop.attach(task)
        try:
            return await runner.execute(job, provider, listener, started)
        finally:
            stop.detach()

    live = not as_json and sys.stderr.isatty()
    progress = None
    if live:  # the live display needs rich: a piped or --json run never loads it
        from openprose.engine.progress import ProgressLine
        progress = ProgressLine(job.source)
    job.ask = _asker(as_json, progress)
    from openprose.engine.skills import resolve_skills
    from openprose.engine.work_tools import default_setup
    from openprose.state import settings

    grants = dict(grants or {})
    _tracing(job, grants.pop("trace", False), "run" if job.run_id is None else "resume")
    env = settings(Path(project))  # read once: .prose/.env, and git when it sets trust keys
    job.work = default_setup(Path(project), env, consent=_consent(as_json, progress),
                             bash=grants.get("allow_bash", False),
                             network=grants.get("allow_network", False),
                             unsandboxed=grants.get("allow_unsandboxed", False))
    job.work.skills, skill_warnings = resolve_skills(job.program, job.file, Path(project), env)
    for warning in skill_warnings:  # at the start, before any session runs
        click.echo(f"warning: {warning}", err=True)
    with _Stop(interrupted) as stop:
        try:
            if progress is not None:
                with progress:
                    outcome = asyncio.run(drive(progress))
            else:
                outcome = asyncio.run(drive(None))
        except (KeyboardInterrupt, asyncio.CancelledError):
            if as_json:
                click.echo(json.dumps({"run_id": job.run_id, "status": "interrupted"}))
            interrupted()
            sys.exit(130)
        except MissingInput as err:
            _refuse("run", str(err), "missing_inputs",
                    missing_inputs=[{"name": name, "description": text}
                                    for name, text in err.missing])
        except StateError as err:
            _refuse("run" if job.run_id is None else "resume", str(err))
    if as_json:
        outcome.warnings[:0] = skill_warnings
        click.echo(json.dumps(outcome.to_dict(), ensure_ascii=False, default=str))
    else:
        _print_outcome(outcome, project)
    sys.exit(outcome.exit_code)


def _tracing(job: Any, flag: bool, command: str) -> None:
    """Trace the run when asked (``--trace``, or an OTLP endpoint in the environment) and
    the ``openprose[otel]`` extra is there: without it ``--trace`` is refused and an endpoint
    alone gets a warning (the environment may be set for other programs)."""
    from openprose.engine.runner import tracing_wanted

    job.trace = flag
    if not tracing_wanted(flag):
        return
    from importlib.util import find_spec

    if find_spec("opentelemetry.sdk") and find_spec("opentelemetry.exporter.otlp.proto.http"):
        return
    if flag:
        _refuse(command, "--trace needs OpenTelemetry: pip install 'openprose[otel]'")
    click.echo("warning: OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not "
               "installed (pip install 'openprose[otel]'); the run is not traced", err=True)


def _print_outcome(outcome: Any, project: str) -> None:
    from openprose.engine.inputs import flag

    cost = f", ${outcome.cost_usd:.4f}" if outcome.cost_usd else ""
    click.echo(f"run {outcome.run_id}: {outcome.status} ({outcome.sessions} sessions, "
               f"{outcome.reused} reused, {outcome.tokens} tokens{cost})", err=True)
    for warning in outcome.warnings:
        click.echo(f"warning: {printable(warning)}", err=True)
    if outcome.waiting_for is not None:
        name, prompt = outcome.waiting_for
        shown = f" ({prompt})" if prompt else ""
        click.echo(f"paused at input '{name}'{printable(shown)}; continue with: "
                   f"{resume_hint(outcome.run_id, project)} {flag(name)}", err=True)
    elif outcome.status == "over_budget":
        click.echo(f"stopped: {printable(outcome.error or '')}", err=True)
        click.echo(f"resume with a higher budget: {resume_hint(outcome.run_id, project)} "
                   "--max-tokens N (or --max-cost USD)", err=True)
    elif outcome.error:
        click.echo(f"error: {printable(outcome.error)}", err=True)
        if not outcome.usage_error:
            click.echo(f"resume with: {resume_hint(outcome.run_id, project)}", err=True)
    from openprose.engine.values import to_text

    tty = sys.stdout.isatty()  # on a terminal, control characters written out; piped, exact
    for name, value in outcome.outputs.items():
        text = printable(to_text(value)) if tty else to_text(value)
        click.echo(f"── {name}\n{text}", color=True)


def _print_plan(plan: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(plan.to_dict(), ensure_ascii=False))
        return
    for step in plan.steps:
        times = "?" if step.times is None else str(step.times)
        why = f"  ({step.why})" if step.why else ""
        text = step.text.replace("\n", " ")[:60]
        click.echo(f"line {step.line:>4}  {step.kind:<8} ×{times:<5} {text}{why}")
    more = " (plus data-dependent counts, marked ?)" if plan.data_dependent else ""
    click.echo(f"at most {plan.sessions} sessions and {plan.judgments} judgments{more}; "
               f"about {plan.estimated_tokens():,} tokens")
