"""Rules the engine, the guided mode and the delegated mode share, held to one definition: a
run's outputs (docs/architecture.md), which inputs must be given before a run starts, one
journal write per input, and a persistent agent's memory named in every mode."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client
from tests.mcp_server.guided_host import GuidedHost, scripted
from tests.mcp_server.host import Host
from tests.mcp_server.tool_host import Bridge, walk

from openprose.cli import cli
from openprose.mcp_server.server import create_server

pytestmark = pytest.mark.anyio

# A named output inside a block definition (the block's), one under an `if` (the program's),
# and one in the branch the run does not take.
OUTPUTS = """\
input topic: "what to write about"
block helper(x):
  output inner = session "Inner {x}"
let h = do helper(topic)
if **the topic is worth it**:
  output final = session "Final"
    context: h
else:
  output other = session "Other"
"""
SCRIPT = {"conditions": [{"match": ".", "verdicts": [True]}]}


def _project(tmp_path: Path, program: str) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "p.prose").write_text(program)
    (root / "s.json").write_text(json.dumps({"default_output": "done: first point", **SCRIPT}))
    return root


def _prose_run_outputs(root: Path) -> list[str]:
    result = CliRunner().invoke(cli, ["run", str(root / "p.prose"), "--provider", "scripted",
                                      "--script", str(root / "s.json"), "--json", "--project",
                                      str(root), "--input", "topic=tides"])
    assert result.stdout, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "completed", report
    return sorted(report["outputs"])


def test_prose_run_guided_and_delegated_report_the_same_outputs(tmp_path):
    root = _project(tmp_path, OUTPUTS)
    assert _prose_run_outputs(root) == ["final"]  # in the test's thread: prose run owns signals

    async def guided_and_delegated() -> tuple[dict, dict, dict]:
        mcp = create_server(root, home=tmp_path / "home", watch=False)
        async with Client(mcp) as client:
            host = GuidedHost(client, mcp, scripted(SCRIPT))
            run_id, vm_token = await host.start("p.prose", {"topic": "tides"})
            final = await host.walk(vm_token)
            got = await host.call("get_run", run_id=run_id)
            delegated = await host.call("run_program", program="p.prose",
                                        inputs={"topic": "tides"}, provider="scripted",
                                        script="s.json")
        return final, got, delegated

    final, got, delegated = anyio.run(guided_and_delegated)
    assert final["status"] == delegated["status"] == "completed"
    assert sorted(o["name"] for o in final["outputs"]) == ["final"]
    assert sorted(o["name"] for o in got["outputs"]) == ["final"]
    assert sorted(o["name"] for o in delegated["outputs"]) == ["final"]


def test_an_embodied_run_completes_without_the_output_of_a_branch_not_taken(tmp_path):
    """complete_run reports the outputs the run wrote, as prose run does; it refused before
    ("output 'other' has not been written": that output is in the branch not taken)."""
    root = _project(tmp_path, OUTPUTS)
    completed: list[dict] = []

    class Completing(Bridge):
        async def _call(self, tool: str, arguments: dict) -> dict:
            result = await super()._call(tool, arguments)
            if tool == "complete_run":
                completed.append(result)
            return result

    mcp = create_server(root, home=tmp_path / "home", watch=False)
    _, status, _ = walk(mcp, {}, OUTPUTS, "p.prose", {"topic": "tides"},
                        {"default_output": "done", **SCRIPT}, bridge_type=Completing)
    assert status == completed[0]["status"] == "completed"
    assert [o["name"] for o in completed[0]["outputs"]] == _prose_run_outputs(root) == ["final"]


# An input declared deep in the program, one in the branch the run takes and one in the
# branch it does not: every mode binds each when the run reaches it (engine.inputs).
DEEP = """\
input topic: "what to plan"
let plan = session "Plan {topic}"
if **the plan is good**:
  input approval: "Approve {plan}?"
  output shipped = session "Ship {approval}"
else:
  input reason: "Why not?"
  output reworked = session "Rework {reason}"
"""
GIVEN = {"topic": "tides", "approval": "yes", "reason": "none"}


def _record(root: Path, run_id: str) -> tuple[list, list[str]]:
    """The run's given inputs and the bindings it wrote, in the order it wrote them."""
    entries = [json.loads(line) for line in
               (root / ".prose" / "runs" / run_id / "journal.jsonl").read_text().splitlines()]
    given = [e["value"] for e in entries if e.get("key") == "run:inputs"]
    return given, [e["binding"][0] for e in entries if e.get("binding")]


def test_every_mode_binds_an_input_when_the_run_reaches_it(tmp_path):
    """start_run bound every given input at once before (``reason``, in the branch not
    taken, too, and ``approval`` ahead of the session before it)."""
    root = _project(tmp_path, DEEP)
    given = [arg for name, value in GIVEN.items() for arg in ("--input", f"{name}={value}")]
    ran = CliRunner().invoke(cli, ["run", str(root / "p.prose"), "--provider", "scripted",
                                   "--script", str(root / "s.json"), "--json", "--project",
                                   str(root), *given])
    assert json.loads(ran.stdout)["status"] == "completed", ran.output
    [engine_run] = [p.name for p in (root / ".prose" / "runs").iterdir()]
    script = {"default_output": "done: first point", **SCRIPT}
    mcp = create_server(root, home=tmp_path / "home", watch=False)
    embodied, status, _ = walk(mcp, {}, DEEP, "p.prose", GIVEN, script)
    assert status == "completed"

    async def guided() -> str:
        server = create_server(root, home=tmp_path / "home", watch=False)
        async with Client(server) as client:
            host = GuidedHost(client, server, scripted(SCRIPT))
            run_id, vm_token = await host.start("p.prose", GIVEN)
            assert (await host.walk(vm_token))["status"] == "completed"
        return run_id

    guided_run = anyio.run(guided)
    expected = ([GIVEN], ["topic", "plan", "approval", "shipped"])
    assert _record(root, engine_run) == expected
    assert _record(root, embodied) == expected
    assert _record(root, guided_run) == expected


async def test_an_embodied_input_written_before_the_program_reaches_it_is_kept(tmp_path):
    """A host that asks the user for every missing input at the start writes ``approval``
    before the program reaches it: the follower takes it when it gets there (before, it
    waited for a write that had already happened and granted nothing more)."""
    root = _project(tmp_path, DEEP)
    async with Client(create_server(root, home=tmp_path / "home", watch=False)) as client:
        host = Host(client)
        started = await host.call("start_run", program="p.prose", inputs={"topic": "tides"})
        vm = started["vm_token"]
        await host.call("write_binding", token=vm, name="approval", value="yes")
        plan = await host.call("spawn_session", vm_token=vm, statement="1")
        await host.call("write_binding", token=plan["session_token"], value="a plan")
        await host.call("record_verdict", vm_token=vm, statement="2.if0", value=True,
                        reason="good")
        ship = await host.call("spawn_session", vm_token=vm, statement="2.b0.1")
        brief = await host.call("get_brief", token=ship["session_token"])
    assert brief["task"] == "Ship yes"


OPTIONAL = """\
input topic: "what to write about"
input notes: "Optional: anything the writer should know"
output summary = session "Summarize {topic} {notes}"
"""


async def test_an_optional_input_holds_neither_a_guided_nor_a_delegated_run(tmp_path):
    root = _project(tmp_path, OPTIONAL)
    mcp = create_server(root, home=tmp_path / "home", watch=False)
    async with Client(mcp) as client:
        host = GuidedHost(client, mcp, scripted({}))
        started = await host.call("start_run", program="p.prose", inputs={"topic": "tides"},
                                  mode="guided")
        assert "waiting for inputs" not in started["_text"]
        final = await host.walk(started["vm_token"])
        delegated = await host.call("run_program", program="p.prose", inputs={"topic": "tides"},
                                    provider="scripted", script="s.json")
    assert final["status"] == "completed", final
    assert delegated["status"] == "completed", delegated


async def test_a_guided_run_journals_each_input_once(tmp_path):
    root = _project(tmp_path, 'input topic: "t"\noutput o = session "About {topic}"\n')
    mcp = create_server(root, home=tmp_path / "home", watch=False)
    async with Client(mcp) as client:
        host = GuidedHost(client, mcp, scripted({}))
        run_id, vm_token = await host.start("p.prose", {"topic": "tides"})
        assert (await host.walk(vm_token))["status"] == "completed"
    journal = (root / ".prose" / "runs" / run_id / "journal.jsonl").read_text()
    writes = [json.loads(line) for line in journal.splitlines()
              if json.loads(line).get("kind") == "write"]
    assert [w["binding"][0] for w in writes].count("topic") == 1


MEMORY = """\
agent keeper:
  model: sonnet
  persist: project
  prompt: "You keep notes"
output o = session: keeper
  prompt: "Note something"
"""


async def test_a_guided_session_names_its_agent_and_memory_location(tmp_path):
    root = _project(tmp_path, MEMORY)
    mcp = create_server(root, home=tmp_path / "home", watch=False)
    async with Client(mcp) as client:
        host = GuidedHost(client, mcp, scripted({}))
        _, vm_token = await host.start("p.prose", {})
        step = await host.call("next_step", vm_token=vm_token, wait_s=5.0)
        [item] = step["pending"]
        wrote = await host.call("write_memory", token=item["token"], memory="remember tides")
        read = await host.call("read_memory", token=item["token"])
    for answer in (wrote, read):
        assert answer["agent"] == "keeper"
        assert answer["location"] and "keeper" in answer["location"]
    assert read["memory"] == "remember tides"
