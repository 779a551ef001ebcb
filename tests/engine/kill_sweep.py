"""The kill/resume sweep: real `prose` processes SIGKILLed at random moments and resumed until
they finish, each compared with an uninterrupted run of the same program on the same backend.

A trial is one program run to its end through any number of kills. It matches when its
status, error, outputs and named bindings equal the uninterrupted run's (bindings of branches
a ``first``/``any`` join may drop need only agree where both runs have them). The scripted
provider's call log shows a session re-run: one that starts again after its result was
committed. Used by tests/engine/test_kill_sweep.py (a few kills) and bench/faults.py (the
long sweep over the corpus).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import CORPUS

from openprose.language import CompileError, compile_or_raise
from openprose.language import nodes as n
from openprose.state import open_store

CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]

# Corpus programs: every session answers the same, every `if` takes its else at first and
# every `until` loop runs once (as in tests/engine/test_corpus.py), each call takes a while.
CORPUS_SCRIPT = {"default_output": "yes\n- first finding\n- second finding", "latency": 0.02,
                 "conditions": [{"match": ".", "verdicts": [False, True]}]}
# Sessions that end an otherwise endless corpus program: 28-gas-town's two patrol loops run
# `loop (max: 1000)` with no condition, so their waiting step fails and each branch of that
# `parallel (on-fail: "continue")` ends after one round.
CORPUS_FAILS = {"28-gas-town": "Wait for deacon backoff period|Boot sleeping for 5 minutes"}


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    script: dict
    file: Path | None = None  # a corpus program runs from its own file (imports beside it)
    inputs: dict[str, str] = field(default_factory=dict)


OWN = {
    "reassignment": ('let x = "init"\nx = session "Fast step"\nlet y = session "Middle {x}"\n'
                     '  context: x\nlet z = "start"\nz = session "Again"\n  context: y\n'
                     'let w = session "Last"\n  context: z\noutput o = w\n'),
    "first": ('parallel ("first"):\n  a = session "Quick"\n  b = session "Sluggish"\n'
              'output o = session "Report"\n  context: { a, b }\n'),
    "any": ('parallel ("any", count: 2):\n  a = session "Quick A"\n  b = session "Quick B"\n'
            '  c = session "Sluggish C"\noutput o = session "Choose"\n  context: { a, b, c }\n'),
    "fail-fast": ('let r = "none"\ntry:\n  parallel:\n    a = session "Steady"\n'
                  '    b = session "Breaks"\n    c = session "Sluggish"\ncatch as err:\n'
                  '  r = session "Recover"\n    context: err\noutput o = r\n'),
    "recursion": ('block descend(n):\n  let step = session "Level {n}"\n  if n > 0:\n'
                  '    let below = do descend(n - 1)\n    step = session "Combine {n}"\n'
                  '      context: below\n  output step\nlet top = do descend(3)\n'
                  'output o = top\n'),
}
# Which branch wins a join must not depend on how busy the machine is: the slow sessions take
# far longer than a starved event loop stalls.
OWN_SCRIPT = {
    "latency": 0.03,
    "sessions": [
        {"match": "Quick", "output": "quick", "latency": 0.01},
        {"match": "Sluggish", "output": "sluggish", "latency": 0.8},
        {"match": "Breaks", "fail": 99, "error": "boom", "latency": 0.1},
        {"match": "(Level|Combine) (\\d+)", "output": "\\1-\\2"},
        {"match": "^([A-Za-z ]+)(.*)", "output": "\\1 done (\\2)"},
    ],
}


def own_programs() -> list[Program]:
    return [Program(name, source, OWN_SCRIPT) for name, source in OWN.items()]


COMBINED = """\
let x = "init"
x = session "Fast step"
parallel ("first"):
  a = session "Quick"
  b = session "Sluggish"
parallel ("any", count: 2):
  c = session "Quick C"
  d = session "Quick D"
  e = session "Sluggish E"
let r = "none"
try:
  parallel:
    f = session "Steady"
    g = session "Breaks"
    h = session "Sluggish H"
catch as err:
  r = session "Recover"
    context: err
block descend(n):
  let step = session "Level {n}"
  if n > 0:
    let below = do descend(n - 1)
    step = session "Combine {n}"
      context: below
  output step
let top = do descend(2)
x = session "Again"
  context: { x, a, b, c, d, e, r, top }
output o = x
"""


def combined_program() -> Program:
    """Reassignment, first/any/fail-fast joins and recursion in one run (the suite's sweep)."""
    return Program("combined", COMBINED, OWN_SCRIPT)


def corpus_programs() -> tuple[list[Program], dict[str, str]]:
    """The corpus programs the sweep can run, and the others with the reason."""
    files = sorted(CORPUS.glob("*.prose")) + sorted(CORPUS.glob("roadmap/*.prose"))
    found, skipped = [], {}
    for path in files:
        source = path.read_text(encoding="utf-8")
        try:
            program = compile_or_raise(source, str(path))
        except CompileError as err:
            skipped[path.stem] = f"does not compile: {str(err).splitlines()[0]}"
            continue
        inputs = {decl.name: f"sample {decl.name}" for decl in program.inputs}
        script = CORPUS_SCRIPT
        if path.stem in CORPUS_FAILS:
            script = {**script, "sessions": [{"match": CORPUS_FAILS[path.stem], "fail": 1000,
                                              "error": "scripted end of the loop"}]}
        found.append(Program(path.stem, source, script, path, inputs))
    return found, skipped


@dataclass
class Result:
    status: str
    error: str | None
    outputs: dict
    bindings: dict[tuple[str, str | None], str]
    reran: int
    seconds: float
    kills: int = 0
    tracebacks: list[str] = field(default_factory=list)
    last: dict | None = None  # the call log's record of the last session started


@dataclass
class Tally:
    programs: int = 0
    trials: int = 0
    kills: int = 0
    mismatches: int = 0
    reran: int = 0
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # program -> reason

    def add(self, other: Tally) -> None:
        self.programs += other.programs
        self.trials += other.trials
        self.kills += other.kills
        self.mismatches += other.mismatches
        self.reran += other.reran
        self.notes += other.notes
        self.skipped.update(other.skipped)


class TooLong(Exception):
    """The uninterrupted run took longer than the sweep allows a program."""


class Project:
    """One directory holding a program, its script and the `.prose/` state of its runs."""

    def __init__(self, root: Path, program: Program, backend: str,
                 hold: dict | None = None) -> None:
        self.root, self.program, self.backend = root, program, backend
        root.mkdir(parents=True, exist_ok=True)
        script = {**program.script, "call_log": "calls.jsonl"}
        (root / "s.json").write_text(json.dumps(script))
        if hold is not None:  # the session ``hold`` records never answers: killed waiting
            rule = {"match": f"^{re.escape(hold['text'])}(\n|$)", "output": "held",
                    "latency": 3600}
            held = {**script, "sessions": [rule, *script.get("sessions", [])]}
            (root / "hold.json").write_text(json.dumps(held))
        if program.file is None:
            (root / "p.prose").write_text(program.source)
        self.hops = 0

    @property
    def file(self) -> str:
        return str(self.program.file) if self.program.file else "p.prose"

    def start(self, run_id: str | None, script: str = "s.json") -> subprocess.Popen[str]:
        if run_id is None:
            args = ["run", self.file, *(f"--input={k}={v}"
                                        for k, v in self.program.inputs.items())]
        else:
            args = ["resume", run_id]
        args += ["--state", self.backend, "--provider", "scripted", "--script", script,
                 "--json"]
        self.hops += 1
        with open(self.root / f"err{self.hops}.txt", "w") as err:
            # user-scope agent memory stays in this project's own home
            return subprocess.Popen([*CLI, *args], cwd=self.root, stdout=subprocess.PIPE,
                                    stderr=err, text=True,
                                    env={**_env(), "HOME": str(self.root / "home")})

    def wait_started(self, proc: subprocess.Popen[str]) -> None:
        """Until this process has opened its run (or ended)."""
        err = self.root / f"err{self.hops}.txt"
        while proc.poll() is None and " started" not in err.read_text():
            time.sleep(0.005)

    def holding(self, hold: dict | None, seen: int) -> bool:
        """Whether the held session has started since the call log had ``seen`` records."""
        return hold is not None and any(
            c["kind"] == "session" and c["phase"] == "start" and c["key"] == hold["key"]
            for c in calls(self.root / "calls.jsonl")[seen:])

    def run_id(self) -> str | None:
        for hop in range(1, self.hops + 1):
            for line in (self.root / f"err{hop}.txt").read_text().splitlines():
                if line.startswith("run ") and line.endswith(" started"):
                    return line.split()[1]
        return None

    def result(self, proc: subprocess.Popen[str], seconds: float, kills: int,
               timeout: float = 300) -> Result:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return Result("hung", f"no end within {timeout:.0f} s", {}, {},
                          reran(self.root / "calls.jsonl"), seconds, kills)
        try:
            data = json.loads(out)
        except ValueError:  # refused, or a traceback: what it said is the result
            said = (self.root / f"err{self.hops}.txt").read_text().strip().splitlines()
            return Result(f"exit {proc.returncode}", said[-1] if said else "", {}, {},
                          reran(self.root / "calls.jsonl"), seconds, kills)
        return Result(data["status"], data["error"], data["outputs"],
                      self.bindings(data["run_id"]), reran(self.root / "calls.jsonl"), seconds,
                      kills, self.tracebacks())

    def tracebacks(self) -> list[str]:
        """The hops whose error output holds a Python traceback (none may)."""
        return [f"err{hop}.txt" for hop in range(1, self.hops + 1)
                if "Traceback (most recent call last)" in
                (self.root / f"err{hop}.txt").read_text(errors="replace")]

    def bindings(self, run_id: str) -> dict[tuple[str, str | None], str]:
        """Named bindings by name and the call they belong to: a block call's place in the
        run (its frame key), not its execution id, which calls racing in a ``parallel``
        (or a resume entering calls the killed drive never reached) number differently."""
        with open_store(self.root, self.backend, postgres_url=PG_URL, schema=PG_SCHEMA) as store:
            run = store.open_run(run_id)
            calls = {f.execution_id: f.key or f"#{f.execution_id}" for f in run.frames()}
            return {(b.name, None if b.execution_id is None else
                     calls.get(b.execution_id, f"#{b.execution_id}")): b.value
                    for b in run.bindings() if not b.name.startswith("anon_")}


PG_URL = os.environ.get("OPENPROSE_POSTGRES_URL") or os.environ.get("OPENPROSE_TEST_POSTGRES_URL")
PG_SCHEMA = f"sweep_{uuid.uuid4().hex[:10]}"  # a throwaway schema, dropped by sweep()


def _env() -> dict[str, str]:
    extra = {"OPENPROSE_POSTGRES_URL": PG_URL, "OPENPROSE_POSTGRES_SCHEMA": PG_SCHEMA}
    return {**os.environ, **(extra if PG_URL else {})}


def _drop_schema() -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{PG_SCHEMA}" CASCADE')


def reran(log: Path) -> int:
    """Sessions started again after their result was committed."""
    committed: set[str] = set()
    again = 0
    for entry in calls(log):
        if entry["kind"] != "session":
            continue
        if entry["phase"] == "committed":
            committed.add(entry["key"])
        elif entry["phase"] == "start" and entry["key"] in committed:
            again += 1
    return again


def reference(root: Path, program: Program, backend: str, limit: float = 300) -> Result:
    """The uninterrupted run; its ``seconds`` count from the moment the run was opened.
    Raises :class:`TooLong` (the process killed) when it takes more than ``limit`` seconds."""
    project = Project(root, program, backend)
    proc = project.start(None)
    project.wait_started(proc)
    began = time.monotonic()
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise TooLong(f"uninterrupted run longer than {limit:.0f} s") from None
    result = project.result(proc, time.monotonic() - began, 0)
    starts = [c for c in calls(project.root / "calls.jsonl")
              if c["kind"] == "session" and c["phase"] == "start"]
    result.last = starts[-1] if starts else None
    return result


def calls(log: Path) -> list[dict]:
    """The call log's records (a line a kill cut short is left out)."""
    found = []
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def trial(root: Path, program: Program, backend: str, rng: random.Random, span: float,
          max_kills: int, hold: dict | None = None) -> Result:
    """Run ``program`` to its end, SIGKILLing it up to ``max_kills`` times at moments drawn
    from the first ``span`` seconds after each process opened the run, resuming after each
    kill. With ``hold`` (the call log record of the run's last session), every drive to be
    killed waits forever in that session, and is killed when it starts if its moment has
    not come: each drive is then killed, however fast the machine."""
    project = Project(root, program, backend, hold)
    script = "s.json" if hold is None else "hold.json"
    began = time.monotonic()
    kills = 0
    proc = project.start(None, script if max_kills else "s.json")
    while kills < max_kills:
        project.wait_started(proc)
        seen = len(calls(project.root / "calls.jsonl"))
        deadline = time.monotonic() + rng.uniform(0.0, span)
        while time.monotonic() < deadline and proc.poll() is None and \
                not project.holding(hold, seen):
            time.sleep(0.005)  # the kill's moment, drawn at random, is the point of the sweep
        if proc.poll() is not None:
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        proc = project.start(project.run_id(), script if kills < max_kills else "s.json")
    # a resume replays what the killed drives recorded: far more than one run's time is a hang
    return project.result(proc, time.monotonic() - began, kills, timeout=60 + 10 * span)


def join_branch_names(program: Program) -> set[str]:
    """Names bound by branches of ``first``/``any`` joins: a run may have dropped them."""
    tree = compile_or_raise(program.source, str(program.file or "p.prose"))
    names = set()
    for node in n.walk(tree):
        if isinstance(node, n.Parallel) and node.join in ("first", "any"):
            names |= {b.name for b in node.branches if b.name}
    return names


def differences(expected: Result, got: Result, optional: set[str]) -> list[str]:
    found = [f"traceback in {name}" for name in got.tracebacks]
    for what in ("status", "error", "outputs"):
        if getattr(expected, what) != getattr(got, what):
            found.append(f"{what}: {getattr(got, what)!r} != {getattr(expected, what)!r}")
    for ref, value in expected.bindings.items():
        if ref not in got.bindings:
            if ref[0] not in optional:
                found.append(f"binding {ref} missing")
        elif got.bindings[ref] != value:
            found.append(f"binding {ref}: {got.bindings[ref]!r} != {value!r}")
    for ref in got.bindings.keys() - expected.bindings.keys():
        if ref[0] not in optional:
            found.append(f"binding {ref} extra")
    return found


def sweep(programs: list[Program], backends: list[str], trials: int, workdir: Path, *,
          seed: str = "sweep", max_kills: int = 3, reach: float = 1.1, limit: float = 300,
          report: Callable[[str, str, Tally], None] | None = None,
          hold_last: bool = False) -> Tally:
    """Each program on each backend: one uninterrupted run, then ``trials`` killed ones, each
    kill at a moment drawn from the first ``reach`` × the uninterrupted run's duration. A
    program whose uninterrupted run takes over ``limit`` seconds is skipped (counted). With
    ``hold_last``, each drive to be killed waits in the run's last session, so every trial
    has ``max_kills`` kills (for programs whose last session races no other)."""
    try:
        return _sweep(programs, backends, trials, workdir, seed, max_kills, reach, limit,
                      report, hold_last)
    finally:
        if "postgres" in backends and PG_URL:
            _drop_schema()


def _sweep(programs: list[Program], backends: list[str], trials: int, workdir: Path,
           seed: str, max_kills: int, reach: float, limit: float,
           report: Callable[[str, str, Tally], None] | None, hold_last: bool) -> Tally:
    total = Tally()
    for backend in backends:
        for program in programs:
            rng = random.Random(f"{seed}-{backend}-{program.name}")
            tally = Tally()
            base = workdir / backend / program.name
            try:
                expected = reference(base / "reference", program, backend, limit)
            except TooLong as err:
                expected, why = None, str(err)
            else:  # a run that cannot start here (a refused input, an import) is no trial
                why = (f"cannot run here: {expected.error}"
                       if expected.status.startswith("exit ") else None)
            if why is not None:
                tally.skipped[program.name] = why
                if report is not None:
                    report(backend, program.name, tally)
                total.add(tally)
                continue
            tally.programs = 1
            optional = join_branch_names(program)
            if expected.tracebacks:
                tally.mismatches += 1
                tally.notes.append(f"{backend} {program.name} uninterrupted run: traceback")
            for number in range(trials):
                got = trial(base / f"trial{number}", program, backend, rng,
                            expected.seconds * reach, max_kills,
                            expected.last if hold_last else None)
                tally.trials += 1
                tally.kills += got.kills
                tally.reran += got.reran
                wrong = differences(expected, got, optional)
                if wrong:
                    tally.mismatches += 1
                    tally.notes.append(f"{backend} {program.name} trial {number} "
                                       f"({got.kills} kills): " + "; ".join(wrong))
            if report is not None:
                report(backend, program.name, tally)
            total.add(tally)
    return total
