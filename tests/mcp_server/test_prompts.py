"""prose-help and prose-run through a real in-process MCP client, in both protocol eras."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from openprose import prompts
from openprose.mcp_server.prompts import register

pytestmark = pytest.mark.anyio
ERAS = [pytest.param({"mode": "legacy"}, id="handshake"), pytest.param({}, id="2026-07-28")]
GOOD = 'input topic: "what to research"\nlet notes = session "Research {topic}"\n'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server(tmp_path: Path) -> MCPServer:
    root = tmp_path / "project"
    root.mkdir()
    (root / "good.prose").write_text(GOOD)
    (root / "bad.prose").write_text("let x =\n")
    (tmp_path / "outside.prose").write_text(GOOD)
    mcp = MCPServer("prompts-test")
    register(mcp, root)
    return mcp


def _text(result: object) -> str:
    messages = result.messages  # type: ignore[attr-defined]
    assert len(messages) == 1 and messages[0].role == "user"
    return messages[0].content.text


@pytest.mark.parametrize("era", ERAS)
async def test_prompts_are_listed_with_their_arguments(era: dict, server: MCPServer) -> None:
    async with Client(server, **era) as client:
        listed = {p.name: p for p in (await client.list_prompts()).prompts}
    assert set(listed) == {"prose-help", "prose-run"}
    arguments = {a.name: a.required for a in listed["prose-run"].arguments}
    assert arguments == {"program": True, "state": False}


@pytest.mark.parametrize("era", ERAS)
async def test_prose_run_returns_the_vm_text_with_the_program(era: dict, server: MCPServer) -> None:
    async with Client(server, **era) as client:
        by_path = _text(await client.get_prompt("prose-run", {"program": "good.prose"}))
        by_source = _text(await client.get_prompt(
            "prose-run", {"program": GOOD, "state": "in-context"}))
        help_text = _text(await client.get_prompt("prose-help"))
    assert by_path.startswith(prompts.load("run-in-context"))
    assert by_path.endswith(f"## Program: good.prose\n\n```prose\n{GOOD}\n```\n")
    assert "## Program: (inline program)" in by_source and GOOD in by_source
    for marker in ("[Position]", "[Binding]", "[Frame+]", "[Frame-]", "[Judgment]"):
        assert marker in by_path
    assert help_text == prompts.load("help") and "prose-run" in help_text


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("arguments", "reason"), [
    ({"program": "bad.prose"}, "bad.prose:1:8: E005"),
    ({"program": "../outside.prose"}, "is outside the project"),
    ({"program": "missing.prose"}, "'missing.prose' does not exist"),
    ({"program": "good.prose", "state": "filesystem"}, "state mode 'filesystem' is not offered"),
])
async def test_prose_run_refuses_with_the_reason(era: dict, server: MCPServer,
                                                 arguments: dict, reason: str) -> None:
    async with Client(server, **era) as client:
        with pytest.raises(MCPError) as caught:
            await client.get_prompt("prose-run", arguments)
    assert str(caught.value).startswith("prose-run: ") and reason in str(caught.value)

