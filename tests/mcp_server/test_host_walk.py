"""Corpus programs stepped through the tools, in both protocol eras, leave the run the
engine leaves for the same program and answers: the same bindings (names, frames, kinds,
values), agent memory and segments, outcome and files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.mcp_server.host import ERAS, corpus
from tests.mcp_server.tool_host import engine_run, walk

from openprose.language import compile_or_raise
from openprose.mcp_server.server import create_server
from openprose.state import Run, open_store

# Each session answers with its prompt's first line and a two-item list; conditions are
# false when first judged and true after (every `if` takes its else, `until` loops run once).
SCRIPT = {"sessions": [{"match": "^[^\n]*", "output": "did: \\g<0>\n- first\n- second"}],
          "conditions": [{"match": ".", "verdicts": [False, True]}]}

# Sessions that fail (no retries: the statement's session fails and a catch takes over).
FAILING = [{"match": "^(Attempt to fetch|Perform risky inner|Service B)", "fail": 9,
            "error": "scripted outage"}]

PROGRAMS = {
    "16-parallel-reviews.prose": "a parallel block of agent sessions",
    "22-error-handling.prose": "try/catch/finally, failing sessions, a rethrow and a throw",
    "33-pr-review-autofix.prose": "judged loops and a persistent agent resumed",
    "36-bug-hunter.prose": "a persistent agent resumed in judged loops, parallel",
    "40-rlm-self-refine.prose": "a recursive block returning values",
    "41-rlm-divide-conquer.prose": "a recursive block in a parallel for",
}


def snapshot(run: Run) -> dict[str, object]:
    """The run's content, independent of scheduling: parallel branches may enter blocks and
    start anonymous sessions in another order, so a frame is named by its call path (block and
    arguments under its parent's name) and anonymous bindings by their frame and value."""
    names: dict[int | None, str] = {None: ""}
    for frame in run.frames():  # parents come first: their ids are smaller
        args = ",".join(f"{k}={v}" for k, v in sorted(frame.args.items()))
        names[frame.execution_id] = f"{names[frame.parent]}>{frame.block}({args})"
    bindings = sorted((("(anonymous)" if b.kind == "anonymous" else b.name),
                       names[b.execution_id], b.kind, b.value) for b in run.bindings())
    anonymous = sorted(b.name for b in run.bindings() if b.kind == "anonymous")
    agents = {agent.name: (run.memory(agent), run.segments(agent)) for agent in run.agents()}
    return {
        "status": run.status,
        "bindings": bindings,
        "anonymous": anonymous,
        "frames": sorted((names[f.execution_id], f.depth, f.status) for f in run.frames()),
        "agents": agents,
    }


def files(root: Path, run_id: str) -> list[str]:
    """The run's files; binding files named without the execution ids and anonymous numbers
    that scheduling decides (the snapshot compares what they hold)."""
    base = root / ".prose" / "runs" / run_id
    return sorted(re.sub(r"__\d+\.md$", "__N.md", re.sub(r"anon_\d+", "anon_N", str(
        p.relative_to(base)))) for p in base.rglob("*") if p.is_file())


def assert_same_run(host_root: Path, run_id: str, engine_root: Path, engine_run_id: str) -> None:
    """The host's run equals the engine's: bindings, journal and status, and the same files."""
    with open_store(engine_root) as store:
        expected = snapshot(store.open_run(engine_run_id))
    with open_store(host_root) as store:
        actual = snapshot(store.open_run(run_id))
    assert actual == expected
    assert files(host_root, run_id) == files(engine_root, engine_run_id)


# 41 is the longest walk by far and nothing in it depends on the era (the handshake is walked
# by the others): it is walked in the current era only.
ONE_ERA = {"41-rlm-divide-conquer.prose"}
WALKS = [pytest.param(name, era.values[0], id=f"{name}-{era.id}") for name in PROGRAMS
         for era in ERAS if name not in ONE_ERA or era.id != "handshake"]


@pytest.mark.parametrize(("name", "era"), WALKS)
def test_a_host_walk_leaves_the_run_the_engine_leaves(name: str, era: dict,
                                                     tmp_path: Path) -> None:
    source = corpus(name)
    engine_root, host_root = tmp_path / "engine", tmp_path / "host"
    for root in (engine_root, host_root):
        root.mkdir()
        (root / name).write_text(source)
    program = compile_or_raise(source, name)
    inputs = {decl.name: f"sample {decl.name}" for decl in program.inputs}

    script = dict(SCRIPT, sessions=FAILING + SCRIPT["sessions"])
    outcome = engine_run(engine_root, source, name, inputs, script)
    server = create_server(host_root, home=tmp_path / "home", watch=False)
    run_id, status, calls = walk(server, era, source, name, inputs, script)

    assert status == outcome.status
    assert_same_run(host_root, run_id, engine_root, outcome.run_id)
    assert "spawn_session" in calls and "write_binding" in calls
