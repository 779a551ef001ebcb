"""Delegated runs through a real in-process MCP client: run_program on the scripted provider,
on the Anthropic provider against a local fake of the Messages API, and on the client's own
model (sampling); missing inputs by elicitation or listed; get_run, cancel_run, resume_run,
list_runs, compile_program."""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import anyio
import pytest
from mcp import Client
from mcp_types import CreateMessageResult, ElicitResult, TextContent

from openprose.mcp_server.server import create_server
from openprose.state import open_store

pytestmark = pytest.mark.anyio
ERAS = [pytest.param({"mode": "legacy"}, id="handshake"), pytest.param({}, id="2026-07-28")]
PROGRAM = """\
input topic: "what to write about"
let notes = session "Research {topic}"
if **the notes are thorough**:
  let extra = session "Dig deeper"
output summary = session "Summarize"
  context: notes
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "script.yaml").write_text(
        "sessions:\n  - match: Summarize\n    output: the summary\n"
        "default_output: done\nlatency: 0.05\nconditions:\n  - match: thorough\n    verdicts: [true]\n")
    return tmp_path


def _binding(root: Path, run_id: str, name: str) -> str:
    with open_store(root) as store:
        return next(b.value for b in store.open_run(run_id).bindings() if b.name == name)


@pytest.mark.parametrize("era", ERAS)
async def test_run_program_on_the_scripted_provider_with_progress(era, root):
    seen: list[tuple[float, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, message))

    async with Client(create_server(root, watch=False), **era) as client:
        result = await client.call_tool("run_program", {
            "program": "p.prose", "inputs": {"topic": "tides"}, "provider": "scripted",
            "script": "script.yaml"}, progress_callback=progress)
        assert not result.is_error, result.content[0].text
        report = result.structured_content
        assert report["status"] == "completed" and report["sessions"] == 3
        assert [o["name"] for o in report["outputs"]] == ["summary"]
        assert "the summary" not in result.content[0].text  # references, never values
        got = await client.call_tool("get_run", {"run_id": report["run_id"]})
        assert got.structured_content["status"] == "completed"
        listed = await client.call_tool("list_runs", {})
        assert report["run_id"] in listed.content[0].text
    assert _binding(root, report["run_id"], "summary") == "the summary"
    if era:  # the handshake era carries progress notifications to the caller
        assert seen and all(b[0] > a[0] for a, b in itertools.pairwise(seen))
        assert any("line" in (message or "") for _, message in seen)


class _FakeMessages(BaseHTTPRequestHandler):
    """The Messages API: sessions answer with text, verdicts with a verdict tool call."""

    calls: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).calls.append(body)
        if body.get("tool_choice", {}).get("name") == "verdict":
            content = [{"type": "tool_use", "id": "v1", "name": "verdict",
                        "input": {"value": True, "reason": "looks thorough"}}]
            stop = "tool_use"
        else:
            prompt = body["messages"][0]["content"]
            content = [{"type": "text", "text": f"answer to {prompt.splitlines()[0]}"}]
            stop = "end_turn"
        data = json.dumps({"id": "m", "type": "message", "role": "assistant", "model": "x",
                           "content": content, "stop_reason": stop,
                           "usage": {"input_tokens": 10, "output_tokens": 5}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def fake_api(root):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeMessages)
    _FakeMessages.calls = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    (root / ".prose").mkdir(exist_ok=True)
    (root / ".prose" / ".env").write_text(
        f"ANTHROPIC_API_KEY=test-key\nANTHROPIC_BASE_URL=http://127.0.0.1:{server.server_port}\n")
    yield _FakeMessages.calls
    server.shutdown()
    server.server_close()


async def test_run_program_on_anthropic_against_a_fake_messages_api(root, fake_api):
    seen: list[str | None] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with Client(create_server(root, watch=False), mode="legacy") as client:
        result = await client.call_tool("run_program", {
            "program": "p.prose", "inputs": {"topic": "tides"}, "provider": "anthropic"},
            progress_callback=progress)
    report = result.structured_content
    assert report["status"] == "completed", result.content[0].text
    assert report["provider"] == "anthropic" and report["tokens"] == 4 * 15
    assert len(fake_api) == 4  # three sessions and one verdict
    assert _binding(root, report["run_id"], "summary") == "answer to Summarize"
    assert any("line" in (message or "") for message in seen)  # progress reached the client


async def test_no_provider_available_says_what_to_configure(root, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    async with Client(create_server(root, watch=False)) as client:
        result = await client.call_tool("run_program", {
            "program": "p.prose", "inputs": {"topic": "x"}})
    text = result.content[0].text
    assert result.is_error and "ANTHROPIC_API_KEY" in text and 'mode="guided"' in text


async def test_run_program_on_the_clients_model_by_sampling(root):
    asked: list[str] = []

    async def sample(context, params) -> CreateMessageResult:
        text = params.messages[0].content.text
        asked.append(text)
        if text.startswith("Condition:"):
            reply = '{"value": false, "reason": "too thin"}'
        else:
            reply = "sampled: " + text.splitlines()[0]
        return CreateMessageResult(role="assistant", model="client-model",
                                   content=TextContent(type="text", text=reply))

    async with Client(create_server(root, watch=False), mode="legacy",
                      sampling_callback=sample) as client:
        result = await client.call_tool("run_program", {
            "program": "p.prose", "inputs": {"topic": "tides"}, "provider": "sampling"})
    report = result.structured_content
    assert report["status"] == "completed", result.content[0].text
    assert report["provider"] == "sampling" and report["sessions"] == 2  # no "Dig deeper"
    assert any(a.startswith("Condition: the notes are thorough") for a in asked)
    summary_prompt = next(a for a in asked if a.startswith("Summarize"))
    assert "sampled: Research tides" in summary_prompt  # context inlined for the client model
    assert _binding(root, report["run_id"], "summary") == "sampled: Summarize"


@pytest.mark.parametrize("era", ERAS)
async def test_missing_input_is_elicited(era, root):
    async def elicit(context, params) -> ElicitResult:
        assert "topic" in params.requested_schema["properties"]
        return ElicitResult(action="accept", content={"topic": "volcanoes"})

    async with Client(create_server(root, watch=False), elicitation_callback=elicit,
                      **era) as client:
        result = await client.call_tool("run_program", {
            "program": "p.prose", "provider": "scripted", "script": "script.yaml"})
    report = result.structured_content
    assert report["status"] == "completed", result.content[0].text
    assert _binding(root, report["run_id"], "topic") == "volcanoes"


@pytest.mark.parametrize("era", ERAS)
async def test_missing_input_is_listed_without_elicitation(era, root):
    async with Client(create_server(root, watch=False), **era) as client:
        result = await client.call_tool("run_program", {
            "program": "p.prose", "provider": "scripted", "script": "script.yaml"})
    report = result.structured_content
    assert report["status"] == "needs inputs"
    assert report["missing_inputs"] == [{"name": "topic", "description": "what to write about"}]
    assert "missing input topic: what to write about" in result.content[0].text


async def test_cancel_then_resume_continues_without_repeating_work(root):
    # Sessions after the research are held until the cancel (an hour each: the run cannot
    # end first however slow the machine); the resume finds them quick.
    slow = ("default_output: done\nlatency: LATENCY\nsessions:\n"
            "  - match: Research\n    latency: 0\n    output: notes\n"
            "conditions:\n  - match: .\n    latency: 0\n    verdicts: [true]\n")
    (root / "slow.yaml").write_text(slow.replace("LATENCY", "3600"))
    async with Client(create_server(root, watch=False), mode="legacy") as client:
        started = await client.call_tool("run_program", {
            "program": "p.prose", "inputs": {"topic": "t"}, "provider": "scripted",
            "script": "slow.yaml", "wait": False})
        run_id = started.structured_content["run_id"]
        with anyio.fail_after(120):  # polls until a session and a verdict are recorded
            while True:
                status = (await client.call_tool("get_run", {"run_id": run_id})
                          ).structured_content
                if status["progress"]["sessions_done"] >= 1 and status["progress"]["verdicts"]:
                    break
                await anyio.sleep(0.02)
        cancelled = await client.call_tool("cancel_run", {"run_id": run_id})
        assert cancelled.structured_content["status"] == "interrupted"
        again = await client.call_tool("cancel_run", {"run_id": run_id})
        assert again.is_error and "is neither" in again.content[0].text
        (root / "slow.yaml").write_text(slow.replace("LATENCY", "0"))
        resumed = await client.call_tool("resume_run", {"run_id": run_id})
        assert not resumed.is_error, resumed.content[0].text
        with anyio.fail_after(120):  # polls until the resumed run ends
            while True:
                status = (await client.call_tool("get_run", {"run_id": run_id})
                          ).structured_content
                if status["status"] != "running":
                    break
                await anyio.sleep(0.05)
    assert status["status"] == "completed" and status["reused"] >= 1


@pytest.mark.parametrize("era", ERAS)
async def test_compile_program_gives_diagnostics(era, root):
    (root / "bad.prose").write_text("let x =\n")
    async with Client(create_server(root, watch=False), **era) as client:
        bad = await client.call_tool("compile_program", {"program": "bad.prose"})
        good = await client.call_tool("compile_program", {"program": "p.prose"})
    assert bad.structured_content["ok"] is False
    first = bad.structured_content["diagnostics"][0]
    assert first["line"] == 1 and first["code"].startswith("E") and first["code"] in \
        bad.content[0].text
    assert good.structured_content["ok"] is True
