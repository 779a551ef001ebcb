"""What ``spawn_session`` hands back: the brief in the structured content (Claude Code shows
its model that, not the text), a one-line grant naming the token as text, nothing twice, and
the same small size whatever the size of the context it names."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from openprose.mcp_server.server import create_server

pytestmark = pytest.mark.anyio

# The target for the bytes of a spawn_session result (JSON, text and structured).
RESULT_BUDGET = 600

PROGRAM = """\
input material: "what to digest"
agent keeper:
  model: haiku
  persist: true
  prompt: "You keep notes."
let digest = session "Digest the material"
  context: material
let notes = session: keeper
  prompt: "Note what matters"
  context: digest
"""


async def spawned(root: Path, material: str, binding: str, prompt: str, context: list[str]
                  ) -> tuple[dict, str, int]:
    """Structured content, text and wire bytes of the spawn_session of ``binding``'s
    statement in a fresh run."""
    async with Client(create_server(root, watch=False), mode="legacy") as client:
        started = await client.call_tool("start_run", {"program": PROGRAM,
                                                       "inputs": {"material": material}})
        vm = started.structured_content["vm_token"]
        ids = {item["binds"]: item["id"] for item in started.structured_content["outline"]}
        if binding == "notes":  # the keeper's session reads digest: write it first
            first = await client.call_tool("spawn_session", {
                "vm_token": vm, "statement": ids["digest"], "prompt": "Digest",
                "context": ["material"]})
            await client.call_tool("write_binding", {
                "token": first.structured_content["session_token"], "value": "a digest"})
        result = await client.call_tool("spawn_session", {
            "vm_token": vm, "statement": ids[binding], "prompt": prompt, "context": context})
        assert not result.is_error, result.content
        wire = len(result.model_dump_json(by_alias=True, exclude_none=True).encode())
        return result.structured_content, result.content[0].text, wire


async def test_brief_is_structured_and_text_is_one_line(tmp_path: Path) -> None:
    data, text, _ = await spawned(tmp_path, "m", "notes", "Note what matters", ["digest"])
    token, brief = data["session_token"], data["brief"]
    assert data["binding"] == "notes" and "execution_id" not in data
    assert "Task:\nNote what matters" in brief
    assert "agent 'keeper' (model haiku)" in brief and "You keep notes." in brief
    assert "read_binding(token, name): digest." in brief
    assert "read_memory(token)" in brief and "write_memory(token, memory)" in brief
    assert "write_binding(token, value=" in brief and brief.endswith(f"token: {token}")
    assert "\n" not in text and token in text and "write_binding" in text
    assert "Note what matters" not in text  # the brief is not sent twice


async def test_result_size_does_not_grow_with_the_context(tmp_path: Path) -> None:
    small = await spawned(tmp_path / "a", "m" * 1024, "digest", "Digest the material",
                          ["material"])
    large = await spawned(tmp_path / "b", "m" * 1024 * 1024, "digest", "Digest the material",
                          ["material"])
    assert small[2] == large[2] <= RESULT_BUDGET
