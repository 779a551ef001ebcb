"""`bash: prompt` in a run delegated over MCP: the person behind the client is asked through
elicitation while run_program waits; a client that cannot be asked gets the command refused,
naming the setting that allows it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp import Client
from mcp_types import ElicitResult

from openprose.engine.sandbox import detect
from openprose.mcp_server.server import create_server
from openprose.state import open_store

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(
    not detect().confined and not os.environ.get("CI"),
    reason="no OS sandbox here (install bubblewrap)")]

PROGRAM = '''\
agent builder:
  prompt: "You build."
  permissions:
    write: ["out/**"]

output r = session: builder
  prompt: "Build it"
'''


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text("sessions:\n  - match: Build\n"
                                     "    tools: [{bash: \"echo built > out/log\"}]\n")
    (tmp_path / "out").mkdir()
    return tmp_path


def _calls(root: Path, run_id: str) -> list[tuple[str, str]]:
    with open_store(root, "filesystem") as store:
        return [(c.status, c.meta["rule"]) for c in store.open_run(run_id).tool_calls()]


@pytest.mark.parametrize("answer", ["yes", "no"])
async def test_the_client_is_asked_through_elicitation(root, answer):
    asked = []

    async def elicit(context, params) -> ElicitResult:
        asked.append(params.message)
        assert params.requested_schema["properties"]["answer"]["enum"] == [
            "yes", "no", "always"]
        return ElicitResult(action="accept", content={"answer": answer})

    async with Client(create_server(root, watch=False), elicitation_callback=elicit,
                      mode="legacy") as client:
        result = await client.call_tool("run_program", {
            "program": "p.prose", "provider": "scripted", "script": "s.yaml"})
    report = result.structured_content
    assert report["status"] == "completed", result.content[0].text
    assert asked == ["OpenProse: agent 'builder' wants to run the shell command: echo built > "
                     "out/log\n(statement: output r = session: builder)"]
    if answer == "yes":
        assert (root / "out" / "log").read_text() == "built\n"
        assert _calls(root, report["run_id"]) == [("allowed", "bash: prompt, allowed by the user")]
    else:
        assert not (root / "out" / "log").exists()
        assert _calls(root, report["run_id"]) == [
            ("refused", "bash: prompt, declined by the user")]


async def test_without_elicitation_the_command_is_refused_naming_the_setting(root):
    async with Client(create_server(root, watch=False), mode="legacy") as client:
        result = await client.call_tool("run_program", {
            "program": "p.prose", "provider": "scripted", "script": "s.yaml"})
    report = result.structured_content
    assert report["status"] == "completed"
    assert not (root / "out" / "log").exists()
    assert _calls(root, report["run_id"]) == [("refused", "bash: prompt")]
    with open_store(root, "filesystem") as store:
        [binding] = [b for b in store.open_run(report["run_id"]).bindings() if b.name == "r"]
    assert "allow it with --allow-bash or OPENPROSE_ALLOW_BASH=1" in binding.value
