"""The five prompts through a real in-process MCP client, in both protocol eras."""

from __future__ import annotations

import json
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
WARNS = 'session ""\n'
TOOLS = ("start_run", "spawn_session", "write_binding", "read_binding", "update_state",
         "push_frame", "pop_frame", "record_verdict", "read_memory", "write_memory",
         "complete_run", "run_status", "resume_run")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("OPENPROSE_POSTGRES_URL", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "project"
    root.mkdir()
    (root / "good.prose").write_text(GOOD)
    (root / "bad.prose").write_text("let x =\n")
    (root / "warns.prose").write_text(WARNS)
    (tmp_path / "outside.prose").write_text(GOOD)
    return root


@pytest.fixture
def server(root: Path) -> MCPServer:
    mcp = MCPServer("prompts-test")
    register(mcp, root)
    return mcp


async def _get(server: MCPServer, era: dict, name: str, arguments: dict | None = None) -> str:
    async with Client(server, **era) as client:
        result = await client.get_prompt(name, arguments)
    messages = result.messages
    assert len(messages) == 1 and messages[0].role == "user"
    return messages[0].content.text


async def _refusal(server: MCPServer, era: dict, name: str, arguments: dict | None) -> str:
    async with Client(server, **era) as client:
        with pytest.raises(MCPError) as caught:
            await client.get_prompt(name, arguments)
    assert str(caught.value).startswith(f"{name}: ")
    return str(caught.value)


@pytest.mark.parametrize("era", ERAS)
async def test_prompts_are_listed_with_their_arguments(era: dict, server: MCPServer) -> None:
    async with Client(server, **era) as client:
        listed = {p.name: p for p in (await client.list_prompts()).prompts}
    arguments = {name: {a.name: a.required for a in prompt.arguments or ()}
                 for name, prompt in listed.items()}
    assert arguments == {"prose-run": {"program": True, "inputs": False, "state": False},
                         "prose-compile": {"program": True, "inputs": False}, "prose-help": {},
                         "prose-examples": {"name": False}, "prose-update": {}}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("state", [None, "filesystem", "sqlite"])
async def test_prose_run_in_a_backend_teaches_the_tools(era: dict, server: MCPServer,
                                                        state: str | None) -> None:
    arguments = {"program": "good.prose"} | ({"state": state} if state else {})
    text = await _get(server, era, "prose-run", arguments)
    backend = state or "filesystem"
    assert text.startswith(prompts.load("run-tools"))
    assert f"State backend: `{backend}`" in text
    assert (f'call `start_run(program="good.prose", inputs={{}}, backend="{backend}")`'
            in text)
    assert text.endswith(f"## Program: good.prose\n\n```prose\n{GOOD}```\n")
    for tool in TOOLS:
        assert f"`{tool}`" in text, tool
    for construct in ("parallel", "loop until", "try:", "retry:", "persist:", "do name(args)"):
        assert construct in text, construct


@pytest.mark.parametrize("era", ERAS)
async def test_prose_run_inline_and_in_context(era: dict, server: MCPServer) -> None:
    inline = await _get(server, era, "prose-run", {"program": GOOD})
    narrated = await _get(server, era, "prose-run", {"program": "good.prose",
                                                     "state": "in-context"})
    assert 'start_run(program=<the source below>, inputs={}, backend="filesystem")' in inline
    assert "## Program: (inline program)" in inline and GOOD in inline
    assert narrated.startswith(prompts.load("run-in-context"))
    assert narrated.endswith(f"## Program: good.prose\n\n```prose\n{GOOD}```\n")
    for marker in ("[Position]", "[Binding]", "[Frame+]", "[Frame-]", "[Judgment]"):
        assert marker in narrated
    assert "start_run" not in narrated


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("arguments", [
    {"program": "good.prose topic=tides sqlite"},  # a host that passes the words as one
    {"program": "good.prose", "inputs": "topic=tides", "state": "sqlite"},
    {"program": "good.prose", "inputs": "sqlite", "state": "topic=tides"},  # words in order
    {"program": "good.prose", "inputs": "'topic=tides' sqlite"},
])
async def test_the_run_command_takes_the_programs_inputs(era: dict, server: MCPServer,
                                                         arguments: dict) -> None:
    text = await _get(server, era, "prose-run", arguments)
    assert 'start_run(program="good.prose", inputs={"topic": "tides"}, backend="sqlite")' \
        in text
    narrated = await _get(server, era, "prose-run", {"program": "good.prose topic=tides",
                                                     "state": "in-context"})
    assert "[Input] topic = tides" in narrated
    compiled = await _get(server, era, "prose-compile", {"program": "good.prose",
                                                         "inputs": "topic=tides"})
    assert "good.prose compiles" in compiled
    unknown = await _refusal(server, era, "prose-run", {"program": "good.prose depth=3"})
    assert "unknown input(s) depth (declared: topic)" in unknown


@pytest.mark.parametrize("era", ERAS)
async def test_prose_run_postgres_when_configured(era: dict, server: MCPServer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    refused = await _refusal(server, era, "prose-run", {"program": "good.prose",
                                                        "state": "postgres"})
    monkeypatch.setenv("OPENPROSE_POSTGRES_URL", "postgresql://db.invalid/x")
    text = await _get(server, era, "prose-run", {"program": "good.prose", "state": "postgres"})
    assert "needs OPENPROSE_POSTGRES_URL" in refused
    assert "State backend: `postgres`" in text


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("arguments", "reason"), [
    ({"program": "bad.prose"}, "bad.prose:1:8: E005"),
    ({"program": "../outside.prose"}, "is outside the project"),
    ({"program": "missing.prose"}, "'missing.prose' does not exist"),
    ({"program": "good.prose", "state": "memory"}, "state mode 'memory' is not offered"),
])
async def test_prose_run_refuses_with_the_reason(era: dict, server: MCPServer,
                                                 arguments: dict, reason: str) -> None:
    assert reason in await _refusal(server, era, "prose-run", arguments)


@pytest.mark.parametrize("era", ERAS)
async def test_prose_compile_reports_findings(era: dict, server: MCPServer) -> None:
    good = await _get(server, era, "prose-compile", {"program": "good.prose"})
    bad = await _get(server, era, "prose-compile", {"program": "bad.prose"})
    warns = await _get(server, era, "prose-compile", {"program": WARNS})
    assert good.startswith(prompts.load("compile"))
    assert "## Result: good.prose compiles: no errors, 0 warning(s)" in good
    assert "## Result: bad.prose: 1 error(s), 0 warning(s)" in bad
    assert "bad.prose:1:8: E005" in bad and "let x =\n" in bad and "^" in bad
    assert "(inline program) compiles: no errors, 1 warning(s)" in warns and "W001" in warns
    outside = await _refusal(server, era, "prose-compile", {"program": "../outside.prose"})
    assert "is outside the project" in outside


@pytest.mark.parametrize("era", ERAS)
async def test_prose_examples_lists_and_shows(era: dict, server: MCPServer, root: Path) -> None:
    empty = await _get(server, era, "prose-examples")
    (root / "examples").mkdir()
    (root / "examples" / "hello.prose").write_text("# Say hello to someone\n" + GOOD)
    (root / "examples" / "bare.prose").write_text(GOOD)
    listed = await _get(server, era, "prose-examples")
    shown = await _get(server, era, "prose-examples", {"name": "hello"})
    unknown = await _refusal(server, era, "prose-examples", {"name": "nope"})
    assert "has no example programs" in empty
    assert listed.startswith(prompts.load("examples"))
    assert "- `hello` (examples/hello.prose): Say hello to someone" in listed
    assert "- `bare` (examples/bare.prose): (no description)" in listed
    assert "program `examples/hello.prose`" in shown and GOOD in shown
    assert "no example named 'nope' (examples: bare, hello)" in unknown


@pytest.mark.parametrize("era", ERAS)
async def test_prose_update_finds_legacy_files(era: dict, server: MCPServer, root: Path) -> None:
    current = await _get(server, era, "prose-update")
    prose = root / ".prose"
    (prose / "execution" / "20250101-000000-aaaaaa").mkdir(parents=True)
    (prose / "state.json").write_text(json.dumps({"OPENPROSE_POSTGRES_URL": "secret-value"}))
    (prose / "runs" / "handwritten").mkdir(parents=True)
    (prose / "runs" / "ours").mkdir()
    (prose / "runs" / "ours" / "run.json").write_text("{}")
    found = await _get(server, era, "prose-update")
    assert "Nothing to update" in current
    assert found.startswith(prompts.load("update"))
    assert "1. `.prose/state.json` holds settings (`OPENPROSE_POSTGRES_URL`)" in found
    assert "2. `.prose/execution/` holds 1 run(s)" in found
    assert "3. `.prose/runs/` has run directories the server did not write (`handwritten`)" \
        in found
    assert "secret-value" not in found and "`ours`" not in found


@pytest.mark.parametrize("era", ERAS)
async def test_prose_help_lists_every_command(era: dict, server: MCPServer) -> None:
    text = await _get(server, era, "prose-help")
    assert text == prompts.load("help")
    for command in ("prose-run", "prose-compile", "prose-examples", "prose-update", "prose-help"):
        assert f"`{command}`" in text
