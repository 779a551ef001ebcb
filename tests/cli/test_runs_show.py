"""`prose runs` and `prose show` on runs the engine made with the scripted provider, on every
backend, and the state.md they share a rendering with."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
from starlette.testclient import TestClient
from tests.cli.conftest import Project, run_id_of

from openprose.state import open_store
from openprose.ui import create_app

PROGRAM = """\
input topic: "What to research"
let research = session "Collect facts about {topic}"
parallel:
  a = session "Analyze A"
  b = session "Analyze B"
loop until **done** (max: 3):
  session "Refine"
    context: { a, b }
output summary = session "Summarize"
  context: research
"""
SCRIPT = """\
default_output: ok
sessions:
  - match: Collect facts about (.+)
    output: "facts about \\\\1"
conditions:
  - match: done
    verdicts: [false, true]
    reason: the draft reads well now
"""
FAILING = """\
let research = session "Collect facts"
if **risky**:
  throw "too risky to continue"
output summary = session "Summarize"
"""
FAILING_SCRIPT = """\
default_output: ok
conditions:
  - match: risky
    verdicts: [true]
    reason: risk found
"""


def fits(text: str) -> None:
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "\x1b[" not in text  # no colour when not writing to a terminal


def test_runs_lists_runs_newest_first_with_sessions_and_tokens(project: Project) -> None:
    first = run_id_of(project.run(PROGRAM, SCRIPT, "--input", "topic=tides"))
    second = run_id_of(project.run(FAILING, FAILING_SCRIPT))
    listed = project.prose("runs", "--project", str(project.root))
    assert listed.exit_code == 0, listed.output
    fits(listed.stdout)
    lines = listed.stdout.splitlines()
    as_json = json.loads(project.prose("runs", "--json", "--project",
                                       str(project.root)).stdout)["runs"]
    by_id = {row["run_id"]: row for row in as_json}
    # newest first: by start (to the second), then by id (the id's own second can be the
    # one before its start's, so ids alone do not give the order)
    assert by_id[first]["started"] <= by_id[second]["started"]
    newest_first = sorted([first, second], reverse=True,
                          key=lambda run: (by_id[run]["started"], run))
    assert [line.split()[0] for line in lines if line[:2] == "20"] == newest_first
    assert [row["run_id"] for row in as_json] == newest_first
    assert by_id[first]["status"] == "completed" and by_id[first]["sessions"] == 5
    assert by_id[first]["tokens"] > 0 and by_id[first]["backend"] == project.backend
    assert by_id[second]["status"] == "failed" and by_id[second]["sessions"] == 1


def test_show_has_status_timeline_verdicts_bindings_and_tokens(project: Project) -> None:
    run_id = run_id_of(project.run(PROGRAM, SCRIPT, "--input", "topic=tides"))
    shown = project.prose("show", run_id, "--project", str(project.root))
    assert shown.exit_code == 0, shown.output
    fits(shown.stdout)
    text = shown.stdout
    assert f"run {run_id}  completed" in text
    assert "sessions 5" in text
    assert "the draft reads well now" in text  # the verdict's reason
    assert "→ research" in text and "→ summary" in text
    assert "facts about tides" in text  # a binding's preview
    data = json.loads(project.prose("show", run_id[:17], "--json", "--project",
                                    str(project.root)).stdout)
    assert data["run_id"] == run_id and data["status"] == "completed"
    verdicts = [s for s in data["steps"] if s["kind"] == "verdict"]
    assert [v["verdict"] for v in verdicts] == [False, True]
    assert all(v["line"] == 6 for v in verdicts)
    sessions = [s for s in data["steps"] if s["kind"] == "session"]
    assert [s["line"] for s in sessions] == [2, 4, 5, 7, 9]
    assert all(s["status"] == "complete" and s["duration_s"] >= 0 for s in sessions)
    assert {b["name"]: b["kind"] for b in data["bindings"]}["topic"] == "input"


def test_show_binding_prints_its_value(project: Project) -> None:
    run_id = run_id_of(project.run(PROGRAM, SCRIPT, "--input", "topic=tides"))
    value = project.prose("show", run_id, "research", "--project", str(project.root))
    assert value.exit_code == 0 and value.stdout == "facts about tides\n"
    data = json.loads(project.prose("show", "latest", "summary", "--json", "--project",
                                    str(project.root)).stdout)
    assert data["value"] == "ok" and data["kind"] == "output"
    missing = project.prose("show", run_id, "nothing", "--project", str(project.root))
    assert missing.exit_code == 2 and "no binding 'nothing'" in missing.stderr
    bad = project.prose("show", run_id, "../etc", "--project", str(project.root))
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_show_of_a_failed_run_names_the_statement_line_and_error(project: Project) -> None:
    run_id = run_id_of(project.run(FAILING, FAILING_SCRIPT))
    shown = project.prose("show", run_id, "--project", str(project.root)).stdout
    fits(shown)
    assert f"run {run_id}  failed" in shown
    assert "too risky to continue" in shown
    assert 'failed at line 3: throw "too risky to continue"' in shown
    state = project.prose("show", run_id, "--json", "--project", str(project.root)).stdout
    assert json.loads(state)["failed_line"] == 3


def test_state_md_carries_status_error_and_binding_annotations(project: Project) -> None:
    from openprose.state import open_store

    run_id = run_id_of(project.run(FAILING, FAILING_SCRIPT))
    with open_store(project.root, project.backend) as store:
        text = store.open_run(run_id).state_text()
    assert "status: failed" in text
    assert "error: " in text and "too risky to continue" in text
    assert "failed at: line 3" in text
    lines = text.splitlines()
    assert any(line.startswith('let research = session "Collect facts"') and
               line.endswith("# --> bindings/research.md (complete)") for line in lines)
    assert any(line.startswith('  throw "too risky') and "# <-- FAILED" in line
               for line in lines)


def test_unknown_run_is_a_clear_error(project: Project) -> None:
    result = project.prose("show", "20990101-000000-zzzzzz", "--project", str(project.root))
    assert result.exit_code == 2  # not found is a usage error, as for prose resume
    assert "no run '20990101-000000-zzzzzz'" in result.stderr
    assert "Traceback" not in result.output


def _state(project: Project, run_id: str) -> str:
    from openprose.state import open_store

    with open_store(project.root, project.backend) as store:
        return store.open_run(run_id).state_text()


def test_a_cancelled_branch_reads_cancelled_not_failed(project: Project) -> None:
    program = 'parallel:\n  a = session "Fail fast"\n  b = session "Slow"\n'
    script = ("sessions:\n  - match: Fail fast\n    fail: 9\n    error: overloaded\n"
              "  - match: Slow\n    output: late\n    latency: 5\n")
    run_id = run_id_of(project.run(program, script))
    lines = _state(project, run_id).splitlines()
    assert any(line.startswith('  a = session "Fail fast"') and "# <-- FAILED: overloaded"
               in line for line in lines)
    assert any(line.startswith('  b = session "Slow"') and line.endswith("# (cancelled)")
               for line in lines)
    shown = project.prose("show", run_id, "--json", "--project", str(project.root)).stdout
    statuses = {s["line"]: s["status"] for s in json.loads(shown)["steps"]}
    assert statuses == {2: "failed", 3: "cancelled"}


def test_a_big_run_is_summarized_not_listed(project: Project) -> None:
    # 60 rounds: more than `prose show` lists of anything (MAX_BINDING_ROWS, 40)
    program = 'repeat 60:\n  session "Step"\noutput done = session "Wrap up"\n'
    run_id = run_id_of(project.run(program))
    text = _state(project, run_id)
    assert "# (60 complete)" in text
    assert "| anon_* (60 bindings) | anonymous |" in text
    assert text.count("anon_") < 10 and len(text) < 4000
    shown = project.prose("show", run_id, "--project", str(project.root)).stdout
    fits(shown)
    assert 'session "Step" ×60' in shown and "60 complete" in shown
    assert len(shown.splitlines()) < 40


def test_show_of_a_binding_in_an_execution_past_the_databases_is_refused(
        project: Project) -> None:
    """`prose show RUN name@99999999999999999999999` ended in an OverflowError traceback on
    SQLite."""
    result = project.run('input topic: "t"\noutput o = session "x {topic}"\n', "default_output: ok\n",
                         "--input", "topic=t")
    run_id = run_id_of(result)
    shown = project.prose("show", run_id, "topic@99999999999999999999999", "--project",
                          str(project.root), "--state", project.backend)
    assert shown.exit_code == 2 and "Traceback" not in shown.output
    assert "is not an integer from 0 to" in shown.stderr


IMPORTING = """\
use "./lib.prose" as lib
let draft = session "Write a draft"
let first = lib(text: draft)
let second = lib(text: draft)
output both = { first, second }
"""
LIB = """\
input text: "What to condense"
let short = session "Condense {text}"
output summary = session "Title for {short}"
"""


def test_sessions_of_imported_programs_count_everywhere(project: Project) -> None:
    """One count of a run's sessions and tokens: the run's result, `prose runs` and `prose
    show` (its timeline too) all include the imported program's sessions."""
    project.write("lib.prose", LIB)
    ran = project.run(IMPORTING, "default_output: ok\n", "--json")
    outcome = json.loads(ran.stdout)
    assert outcome["sessions"] == 5
    where = ("--project", str(project.root))
    (listed,) = json.loads(project.prose("runs", "--json", *where).stdout)["runs"]
    shown = json.loads(project.prose("show", outcome["run_id"], "--json", *where).stdout)
    assert listed["sessions"] == shown["sessions"] == 5
    assert listed["tokens"] == shown["tokens"] == outcome["tokens"]
    assert len([s for s in shown["steps"] if s["kind"] == "session"]) == 5
    text = project.prose("show", outcome["run_id"], *where).stdout
    assert "sessions 5" in text and text.count("lib(text: draft)") == 4
    # get_run over MCP and the web view's runs list count them too
    report = anyio.run(_get_run, project.root, outcome["run_id"])
    assert (report["sessions"], report["tokens"]) == (5, outcome["tokens"])
    with open_store(project.root, project.backend) as store:
        client = TestClient(create_app([store], "t", 8765), base_url="http://127.0.0.1:8765")
        listing = client.get("/?token=t").text
    row = listing.split(f'href="/runs/{outcome["run_id"]}"')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', row)[:2] == ["5", str(outcome["tokens"])]


async def _get_run(root: Path, run_id: str) -> dict:
    from tests.mcp_server.host import host

    async with host(root, {}, watch=False) as h:
        return await h.call("get_run", run_id=run_id)


def test_durations_below_a_second_are_in_milliseconds() -> None:
    from openprose.cli.runs_cmd import human_duration, run_time

    assert [human_duration(s) for s in (0.0004, 0.042, 0.9, 3.25, 42)] == [
        "0ms", "42ms", "900ms", "3.2s", "42s"]
    # a run's start and end are stamped to the second: under one is not "0ms"
    assert run_time("2026-01-01T10:00:00Z", "2026-01-01T10:00:00Z", False) == "<1s"
    assert run_time("2026-01-01T10:00:00Z", "2026-01-01T10:01:05Z", False) == "1m05s"
