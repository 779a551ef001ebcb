"""The server's promise tried from outside: a careless or prompt-injected host reaches only
what the program allows. Each test is an attempt that once succeeded."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from tests.mcp_server.host import ERAS, Host, Refused, host

from openprose.mcp_server.server import create_server

pytestmark = pytest.mark.anyio

PROGRAM = """\
input topic: "what to look into"
let notes = session "Research {topic}"
output summary = session "Summarize"
  context: notes
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "p.prose").write_text(PROGRAM)
    return project


async def _started(h: Host) -> tuple[str, dict[str, str]]:
    started = await h.call("start_run", program="p.prose", inputs={"topic": "tides"})
    ids = {item["binds"]: item["id"] for item in started["outline"] if item.get("binds")}
    return started["vm_token"], ids


# ------------------------------------------------------------------ unknown arguments

@pytest.mark.parametrize("era", ERAS)
async def test_unknown_arguments_are_refused_naming_them_and_the_accepted_ones(root, era):
    async with host(root, era, watch=False) as h:
        vm, ids = await _started(h)
        spawned = await h.call("spawn_session", vm_token=vm, statement=ids["notes"],
                               prompt="Research tides")
        token = spawned["session_token"]
        text = await h.refused("write_binding", token=token, value="notes",
                               target_binding="merged")
        assert "'target_binding'" in text and "copy_of" in text and "value" in text
        text = await h.refused("spawn_session", vm_token=vm, statement=ids["summary"],
                               prompt="Summarize", contexts=["notes"])
        assert "'contexts'" in text and "context" in text.split("takes:")[1]
        # nothing happened: the session is still pending, the second never started
        status = await h.call("run_status", vm_token=vm)
        assert [p["binding"] for p in status["pending"]] == ["notes"]
        assert not status["bindings"] or all(b["name"] == "topic" for b in status["bindings"])


async def test_every_listed_input_schema_admits_only_its_properties(root):
    async with Client(create_server(root, watch=False)) as client:
        tools = (await client.list_tools()).tools
    assert tools and all(tool.input_schema.get("additionalProperties") is False
                         for tool in tools)


async def test_a_tool_registered_later_is_closed_too(root):
    mcp = create_server(root, watch=False)

    @mcp.tool()
    async def echo(text: str) -> str:
        """Echo."""
        return text

    async with Client(mcp) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["echo"].input_schema["additionalProperties"] is False
        result = await client.call_tool("echo", {"text": "a", "txt": "b"})
        assert result.is_error and "'txt'" in result.content[0].text


# ------------------------------------------------------------------ spent session tokens

@pytest.mark.parametrize("era", ERAS)
async def test_a_spent_session_token_repeats_only_its_own_write(root, era):
    async with host(root, era, watch=False) as h:
        vm, ids = await _started(h)
        spawned = await h.call("spawn_session", vm_token=vm, statement=ids["notes"],
                               prompt="Research tides")
        token = spawned["session_token"]
        first = await h.call("write_binding", token=token, value="the notes")
        again = await h.call("write_binding", token=token, value="the notes", name="notes")
        assert again["location"] == first["location"]
        for attempt in ({"name": "summary"}, {"execution_id": 3}, {"copy_of": "topic"}):
            with pytest.raises(Refused, match="rule: a session"):
                await h.call("write_binding", token=token, value="the notes", **attempt)
        with pytest.raises(Refused, match="resend must carry the same value"):
            await h.call("write_binding", token=token, value="other notes")
        status = await h.call("run_status", vm_token=vm)
        assert {b["name"] for b in status["bindings"]} == {"topic", "notes"}
