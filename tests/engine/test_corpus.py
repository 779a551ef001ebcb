"""The corpus programs run to completion on the scripted provider with filesystem state, or
fail only with the error their text asks for (a ``throw``, ``resume:`` before any memory); every
key such a run journals names a statement of the program's analysis (the engine and the analysis
label construct bodies alike: stored runs resume by these keys). Programs in ``BOUNDED`` run
here with smaller loop bounds; ``bench/corpus.py`` runs them at full size with the same checks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.conftest import CORPUS, no_sleep

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise, paths
from openprose.language.analysis import Analysis, analyze
from openprose.mcp_server.results import run_outputs
from openprose.state import open_store

FILES = sorted(CORPUS.glob("*.prose")) + sorted(CORPUS.glob("roadmap/*.prose"))
INTENDED = {
    "22-error-handling.prose": "22-error-handling.prose:51:1: ThrownError: Validation failed",
    "48-habit-miner.prose": "48-habit-miner.prose:252:22: MemoryMissing: E018",
}
#: Loop bounds the suite lowers, as text replaced in the program: 28-gas-town's two patrol
#: loops (`loop (max: 1000)`, no condition) make about 19,000 sessions at full size (90 s).
#: Three rounds take the same statements, first, later and last round alike.
BOUNDED = {"28-gas-town.prose": ("loop (max: 1000):", "loop (max: 3):")}
# Conditions: false on the first judgment, true on the next — every `if` takes its else,
# every `until` loop runs once, every `while` loop stops at once.
SCRIPT = {"default_output": "yes\n- first finding\n- second finding",
          "conditions": [{"match": ".", "verdicts": [False, True]}]}


#: the labels of expression parts that run sessions without being statements (``0.a1``)
EXPRESSION_PARTS = {label(path="", i=i) for label in (paths.item, paths.entry) for i in range(99)}
# Every construct with a labelled body, and the expressions that label their parts.
LABELS_PROGRAM = """\
block review(draft):
  session "Review {draft}"

let xs = [session "one", session "two"]
let o = { first: session "f", second: session "g" }
let seq = session "a" -> session "b" -> session "c"
let ys = xs | map: session "m {item}" | filter: session "keep {item}?"
if **the first is good**:
  session "then"
elif **a zebra is here**:
  session "elif"
if **this holds**:
  session "then"
else:
  session "else"
choice **which way**:
  option "Left":
    session "left"
  option "Right":
    session "right"
try:
  session "try"
  throw "boom"
catch as err:
  session "caught {err}"
finally:
  session "finally"
parallel:
  a = session "pa"
  b = session "pb"
repeat 2:
  do review("draft")
output result = session "done {xs} {o} {seq} {ys}"
"""


def unplaced(key: str, analysis: Analysis) -> str | None:
    """Why the static part of journal ``key`` (iterations and judgment rounds dropped, a block
    call read on in the block's body) names no statement of ``analysis``; None when it does,
    or is a part of one's expression (an array item, an object entry)."""
    path, found = "", ""
    for kind, value, _before in paths.tokens(key):
        if kind == "call":
            if value not in analysis.blocks:  # an imported program: its own run's keys
                return None
            path = found = value
        elif kind in ("branch", "step"):
            path = paths.branch(path, int(value)) if kind == "branch" else paths.child(path, value)
            if path in analysis.statements:
                found = path
    rest = [value for _kind, value, _before in paths.tokens(path[len(found):])]
    if found and all(value in EXPRESSION_PARTS for value in rest):
        return None
    return f"{key}: static path {path} is no statement (nearest {found or 'none'})"


def journal_keys(project: Path, run_id: str) -> list[str]:
    with open_store(project) as store:
        return sorted({e.key for e in store.open_run(run_id).journal_entries()
                       if ":" not in e.key})  # namespaced keys (run:inputs) are no steps


def bounded(path: Path) -> str:
    """The program's text, its loop bounds lowered when it is in ``BOUNDED``."""
    source = path.read_text(encoding="utf-8")
    if path.name in BOUNDED:
        full, small = BOUNDED[path.name]
        assert full in source, f"{path.name} no longer has {full!r}: update BOUNDED"
        source = source.replace(full, small)
    return source


def check_program_run(path: Path, source: str, root: Path) -> int:
    """Run corpus program ``path`` (as ``source``) into ``root`` and check it ends as the
    module says; the sessions it ran."""
    program = compile_or_raise(source, str(path))
    job = runner.Job(
        source=source, file=str(path), program=program, project_root=root,
        inputs={decl.name: f"sample {decl.name}" for decl in program.inputs},
        imports=runner.load_imports(program, str(path), root),
        options=Options(sleep=no_sleep, loop_limit=50))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(SCRIPT)))
    if path.name in INTENDED:
        assert outcome.status == "failed" and INTENDED[path.name] in outcome.error
        return outcome.sessions
    assert outcome.status == "completed", outcome.error
    assert outcome.sessions > 0
    declared = {s.name for s in program.body if type(s).__name__ == "Output" and s.name}
    assert declared <= set(outcome.outputs)
    with open_store(root) as store:
        run = store.open_run(outcome.run_id)
        names = {b.name for b in run.bindings()}
        # guided and delegated runs report by this rule: prose run --json says the same
        reported = [o.name for o in run_outputs(run, analyze(program, source))]
    assert declared <= names
    assert sorted(reported) == sorted(outcome.outputs)
    analysis = analyze(program, source)
    keys = journal_keys(root, outcome.run_id)
    assert keys and [why for key in keys if (why := unplaced(key, analysis))] == []
    return outcome.sessions


@pytest.mark.skipif(not FILES, reason="corpus not present")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_program_runs(path, tmp_path):
    check_program_run(path, bounded(path), tmp_path)


def test_every_body_label_of_the_engine_is_the_analysis_label(tmp_path):
    program = compile_or_raise(LABELS_PROGRAM, "labels.prose")
    job = runner.Job(source=LABELS_PROGRAM, file="labels.prose", program=program,
                     project_root=tmp_path, inputs={}, imports={},
                     options=Options(sleep=no_sleep))
    script = {"default_output": "done", "conditions": [{"match": "zebra", "verdicts": [True]},
                                                 {"match": ".", "verdicts": [False]}]}
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(script)))
    assert outcome.status == "completed", outcome.error
    analysis = analyze(program, LABELS_PROGRAM)
    keys = journal_keys(tmp_path, outcome.run_id)
    assert [why for key in keys if (why := unplaced(key, analysis))] == []
    # every label was journalled, spelled as stored runs have it (the elif's body, the else
    # after a false condition, a choice's first option)
    labels = {value for key in keys for kind, value, _ in paths.tokens(key) if kind == "step"
              and not value.isdigit()}
    assert labels >= {"a0", "a1", "o0", "o1", "s0", "s2", "p0", "p1", "if0", "if1", "b1",
                      "else", "try", "catch", "finally"}
