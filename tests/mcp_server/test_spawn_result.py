"""What ``spawn_session`` hands back: a short handle (binding, agent, token and what to do
with it) whose size depends neither on the context's values nor on the agent's role; the
session subagent reads its brief with ``get_brief``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from openprose.mcp_server.server import create_server

pytestmark = pytest.mark.anyio

# The issue's target for the bytes of a spawn_session result (JSON, text and structured).
RESULT_BUDGET = 600
# Issue 25: the handle the VM passes on (its structured content, what Claude Code shows).
HANDLE_BUDGET = 300

PROGRAM = """\
input material: "what to digest"
agent keeper:
  model: haiku
  persist: true
  prompt: "ROLE"
let digest = session "Digest the material"
  context: material
let notes = session: keeper
  prompt: "TASK"
  context: digest
"""


async def spawned(root: Path, material: str, binding: str, prompt: str, context: list[str],
                  role: str = "You keep notes.") -> tuple[dict, str, int, dict]:
    """Structured content, text and wire bytes of the spawn_session of ``binding``'s
    statement in a fresh run, and what get_brief gives its subagent."""
    async with Client(create_server(root, watch=False), mode="legacy") as client:
        source = PROGRAM.replace("ROLE", role).replace("TASK", prompt if binding == "notes"
                                                        else "Note what matters")
        started = await client.call_tool("start_run", {"program": source,
                                                       "inputs": {"material": material}})
        vm = started.structured_content["vm_token"]
        ids = {item.get("binds"): item["id"] for item in started.structured_content["outline"]}
        if binding == "notes":  # the keeper's session reads digest: write it first
            first = await client.call_tool("spawn_session", {
                "vm_token": vm, "statement": ids["digest"],
                "context": ["material"]})
            await client.call_tool("write_binding", {
                "token": first.structured_content["session_token"], "value": "a digest"})
        result = await client.call_tool("spawn_session", {
            "vm_token": vm, "statement": ids[binding], "prompt": prompt, "context": context})
        assert not result.is_error, result.content
        wire = len(result.model_dump_json(by_alias=True, exclude_none=True).encode())
        brief = await client.call_tool(
            "get_brief", {"token": result.structured_content["session_token"]})
        assert not brief.is_error, brief.content
        data = {**brief.structured_content, "_text": brief.content[0].text}
        return result.structured_content, result.content[0].text, wire, data


async def test_spawn_gives_a_handle_and_get_brief_the_brief(tmp_path: Path) -> None:
    data, text, _, brief = await spawned(tmp_path, "m", "notes", "Note what matters",
                                         ["digest"])
    token = data["session_token"]
    assert data["binding"] == "notes" and data["agent"] == "keeper"
    assert "execution_id" not in data and "get_brief(token)" in data["start"]
    assert "\n" not in text and token in text and "get_brief" in text
    assert "Note what matters" not in str(data) + text  # the task reaches only the subagent
    assert brief["token"] == token and brief["binding"] == "notes"
    assert brief["task"] == "Note what matters" and brief["role"] == "You keep notes."
    assert brief["agent"] == "keeper" and brief["model"] == "haiku"
    assert brief["context"] == [{"name": "digest", "kind": "let", "chars": 8}]
    assert "read_memory(token)" in brief["memory"] and "write_memory" in brief["memory"]
    assert "write_binding(token, value=" in brief["finish"] and brief["attempt"] == 1
    assert "You keep notes." in brief["_text"] and brief["_text"].endswith(f"token: {token}")


async def test_handle_size_depends_on_neither_values_nor_roles(tmp_path: Path) -> None:
    """Issue 25: the VM passes a handle of <= 300 bytes, however long the agent's role and
    the context's values; the role and the task reach only the subagent."""
    short = await spawned(tmp_path / "a", "m", "notes", "Note", ["digest"], role="Brief.")
    long = await spawned(tmp_path / "b", "m" * 1024 * 1024, "notes", "Note " * 2000,
                         ["digest"], role="You keep notes. " * 2000)
    assert len(json.dumps(long[0]).encode()) == len(json.dumps(short[0]).encode())
    assert len(json.dumps(long[0]).encode()) <= HANDLE_BUDGET
    assert long[3]["role"].startswith("You keep notes. You keep")


async def test_result_size_does_not_grow_with_the_context(tmp_path: Path) -> None:
    small = await spawned(tmp_path / "a", "m" * 1024, "digest", "Digest the material",
                          ["material"])
    large = await spawned(tmp_path / "b", "m" * 1024 * 1024, "digest", "Digest the material",
                          ["material"])
    assert small[2] == large[2] <= RESULT_BUDGET
    assert small[3]["context"] == [{"name": "material", "kind": "input", "chars": 1024}]
    assert large[3]["context"] == [{"name": "material", "kind": "input", "chars": 1024 * 1024}]
