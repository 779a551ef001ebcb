"""start_run: compile first, inputs, the outline with stable ids, the VM token."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.mcp_server.host import ERAS, host

from openprose.state import BindingRef, open_store

pytestmark = pytest.mark.anyio

PROGRAM = """\
input topic: "What to research"
agent writer:
  model: sonnet
  prompt: "You write clearly."
block review(draft) (max_depth: 3):
  let notes = session "Review {draft}"
parallel:
  a = session "Angle A on {topic}"
  b = session: writer
    prompt: "Angle B"
try:
  session "Risky"
catch as err:
  session "Recover"
loop until **done** (max: 3):
  session "Improve"
if **good**:
  output final = session "Finish"
    context: [a, b]
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "study.prose").write_text(PROGRAM)
    return project


@pytest.mark.parametrize("era", ERAS)
async def test_start_run_returns_token_and_outline_and_writes_inputs(
        era: dict, root: Path) -> None:
    async with host(root, era) as h:
        started = await h.call("start_run", program="study.prose", inputs={"topic": "tides"})
    assert started["vm_token"].startswith(f"vm.{started['run_id']}.")
    assert "missing_inputs" not in started  # none missing
    assert started["outputs"] == ["final"]
    items = {item["id"]: item for item in started["outline"]}
    assert {k: items["3|1"][k] for k in ("kind", "binds", "agent", "line")} == {
        "kind": "session", "binds": "b", "agent": "writer", "line": 9}
    assert items["review.0"]["block"] == "review" and items["review.0"]["binds"] == "notes"
    assert items["4.try.0"]["kind"] == "session" and "binds" not in items["4.try.0"]
    assert items["4.catch.0"]["parent"] == "4"
    assert items["5"]["kind"] == "loop" and items["5"]["judged"] is True
    assert items["6.if0"]["judged"] is True
    assert items["6.b0.0"]["binds"] == "final"
    assert started["blocks"] == [{"name": "review", "params": ["draft"], "max_depth": 3}]
    assert "3|1 session L9-10 binds b agent writer" in started["_text"]
    assert started["vm_token"] in started["_text"]
    store = open_store(root, "filesystem", home=root / "home")
    run = store.open_run(started["run_id"])
    assert run.read_binding(BindingRef("topic")).value == "tides"
    assert run.program_path == "study.prose"
    assert "# Execution State" in run.state_text()
    store.close()


@pytest.mark.parametrize("era", ERAS)
async def test_start_run_refuses_bad_programs_and_inputs_without_creating_a_run(
        era: dict, root: Path) -> None:
    async with host(root, era) as h:
        text = await h.refused("start_run", program='let x = sesion "a"\n')
        assert "<program>:1:" in text and " E0" in text
        text = await h.refused("start_run", program="study.prose", inputs={"topc": "x"})
        assert "unknown input(s) topc" in text and "declared: topic" in text
        text = await h.refused("start_run", program="missing.prose")
        assert "does not exist" in text
        text = await h.refused("start_run", program="study.prose", mode="autopilot")
        assert "'embodied' or 'guided'" in text
        started = await h.call("start_run", program="study.prose")
        assert started["missing_inputs"] == ["topic"]
    runs = list((root / ".prose" / "runs").iterdir())
    assert [r.name for r in runs] == [started["run_id"]]


@pytest.mark.parametrize("era", ERAS)
async def test_start_runs_result_carries_only_what_its_mode_reads(era: dict, root: Path) -> None:
    """A guided host never reads the outline: it is left out; an embodied host's outline
    leaves out every null, false and empty field."""
    async with host(root, era) as h:
        embodied = await h.call("start_run", program="study.prose", inputs={"topic": "t"})
        guided = await h.call("start_run", program="study.prose", inputs={"topic": "t"},
                              mode="guided")
        await h.call("cancel_run", run_id=guided["run_id"], vm_token=guided["vm_token"])
    assert "outline" not in guided and "blocks" not in guided
    assert "outline" not in guided["_text"]
    for item in embodied["outline"]:
        assert all(value not in (None, False, [], "") for value in item.values()), item
    assert "missing_inputs" not in embodied  # nothing missing: nothing said
