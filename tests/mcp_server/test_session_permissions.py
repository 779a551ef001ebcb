"""Host-driven sessions carry their permissions: an embodied spawn_session's brief names them
(a session's own block over its agent's, consts resolved) and its grant records them for a
host's hook; a guided session's brief names them too. Without a permissions block the brief
has no such line (the documented defaults apply)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from mcp import Client

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.language import compile_or_raise
from openprose.mcp_server.guided import HostProvider
from openprose.mcp_server.server import create_server
from openprose.state import open_store

PROGRAM = """\
const DOCS = "docs/**"
agent writer:
  prompt: "You write docs."
  permissions:
    write: [DOCS]
    bash: deny
let plain = session "Say hi"
let docs = session: writer
  prompt: "Write the docs"
  permissions:
    network: ["https://example.com/spec"]
"""
PERMISSIONS = {"read": "**", "write": "docs/**", "bash": "deny",
               "network": "only https://example.com/spec", "never": ".prose/"}
LINE = ("Permissions: read: **; write: docs/**; bash: deny; network: only "
        "https://example.com/spec; never: .prose/")


@pytest.mark.anyio
async def test_spawn_session_brief_and_grant_carry_the_permissions(tmp_path: Path) -> None:
    async with Client(create_server(tmp_path, watch=False), mode="legacy") as client:
        started = await client.call_tool("start_run", {"program": PROGRAM})
        vm = started.structured_content["vm_token"]
        ids = {item["binds"]: item["id"] for item in started.structured_content["outline"]}
        plain = await client.call_tool("spawn_session", {
            "vm_token": vm, "statement": ids["plain"], "prompt": "Say hi"})
        plain_brief = await client.call_tool("get_brief", {
            "token": plain.structured_content["session_token"]})
        await client.call_tool("write_binding", {
            "token": plain.structured_content["session_token"], "value": "hi"})
        docs = await client.call_tool("spawn_session", {
            "vm_token": vm, "statement": ids["docs"], "prompt": "Write the docs"})
        docs_brief = await client.call_tool("get_brief", {
            "token": docs.structured_content["session_token"]})
    assert "permissions" not in plain_brief.structured_content
    assert "Permissions:" not in plain_brief.content[0].text
    assert docs_brief.structured_content["permissions"] == PERMISSIONS
    assert LINE in docs_brief.content[0].text.splitlines()
    with open_store(tmp_path, "filesystem") as store:
        run_id = started.structured_content["run_id"]
        _, grant = store.token_grant(docs.structured_content["session_token"])
        assert store.token_grant(plain.structured_content["session_token"])[1]["work"] == {
            "agent": "(no agent)", "key": grant["work"]["key"].replace(ids["docs"], ids["plain"]),
            "line": 7,
            "permissions": {"read": ["**"], "write": ["**"], "execute": [], "bash": "prompt",
                            "network": "prompt", "never": [".prose/"]}}
    assert grant["work"]["agent"] == "writer" and run_id
    assert grant["work"]["permissions"]["write"] == ["docs/**"]
    assert grant["work"]["permissions"]["network"] == ["https://example.com/spec"]


def test_a_guided_sessions_brief_names_its_permissions(tmp_path: Path) -> None:
    provider = HostProvider()
    program = compile_or_raise(PROGRAM, "p.prose")
    job = runner.Job(source=PROGRAM, file="p.prose", program=program, project_root=tmp_path,
                     options=Options())

    async def drive() -> list[str]:
        task = asyncio.create_task(runner.execute(job, provider, provider.observe))
        briefs = []
        while len(briefs) < 2:
            for item in await provider.wait_for_items(5):
                briefs.append(item.brief)
                await provider.complete_session(item.token, "done")
        await task
        return briefs

    plain, docs = asyncio.run(drive())
    assert plain.permissions is None
    assert docs.permissions == PERMISSIONS


def _grant_lines(root: Path) -> list[dict]:
    """The grant records of the one run's capabilities.jsonl (not its ends or blocks)."""
    (log,) = (root / ".prose" / "runs").glob("*/capabilities.jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in records if "hash" in r and set(r) != {"hash", "alive"}]


def test_a_guided_sessions_grant_records_its_item_token_in_the_same_write(
        tmp_path: Path) -> None:
    """The token a host knows a guided session by is hashed into the session's grant when
    the grant is written: one grant line per session, not a second one tagging it (it was
    a write of its own per statement); a retry's attempt gets a new token, which the host's
    hook finds as well."""
    source = 'let draft = session "Write the draft"\n  retry: 1\n'
    provider = HostProvider()
    job = runner.Job(source=source, file="p.prose", program=compile_or_raise(source, "p.prose"),
                     project_root=tmp_path, options=Options())

    async def drive() -> tuple[list[dict], bool, bool]:
        task = asyncio.create_task(runner.execute(job, provider, provider.observe))
        (first,) = await provider.wait_for_items(5)
        lines = _grant_lines(tmp_path)
        with open_store(tmp_path, "filesystem") as store:
            first_found = store.host_grant(first.token) is not None
        await provider.fail_session(first.token, "try again")
        (second,) = [i for i in await provider.wait_for_items(5) if i.token != first.token]
        with open_store(tmp_path, "filesystem") as store:
            second_found = store.host_grant(second.token) is not None
        await provider.complete_session(second.token, "done")
        await task
        return lines, first_found, second_found

    lines, first_found, second_found = asyncio.run(drive())
    assert len(lines) == 1 and "host_token" in lines[0]["work"]
    assert first_found and second_found
