"""OpenTelemetry traces of runs, received by a real OTLP/HTTP endpoint in the test
(:mod:`tests.engine.otlp_receiver`): the span tree, its attributes and counts, resume links,
the content opt-in, secrets, a guided run, and nothing imported when tracing is off.

The runs flush their spans before they end, so each test reads the receiver once the run
has returned: no waiting on time."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.engine.otlp_receiver import Receiver, Span, tree
from tests.mcp_server.guided_host import host_loop, scripted

from openprose.engine import runner, tracing
from openprose.engine.interpreter import Options
from openprose.language import compile_or_raise
from openprose.mcp_server.guided import HostProvider

PROGRAM = """\
agent writer:
  model: sonnet
  prompt: "You write drafts."

parallel:
  a = session "Draft part A"
  b = session "Draft part B"

loop until **the draft is good** (max: 3):
  session: writer
    prompt: "Improve the draft"

session "Flaky fetch"
  retry: 2

try:
  session "Doomed call"
catch as problem:
  session "Report {problem}"

output final = session "Final check"
"""
SCRIPT = {"default_output": "ok",
          "sessions": [{"match": "Flaky fetch", "fail": 1, "error": "rate limited"},
                       {"match": "Doomed call|Final check", "fail": 9, "error": "server down"}],
          "conditions": [{"match": "draft is good", "verdicts": [False, True]}]}
FIXED = {**SCRIPT, "sessions": [SCRIPT["sessions"][0],
                                {"match": "Doomed call", "fail": 9, "error": "server down"}]}
SECRETS = ("sk-ant-from-dotenv-0123456789", "sk-ant-from-environ-9876543210", "hunter2-pg")
CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]


def _prose(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([*CLI, *args, "--project", str(root)], capture_output=True,
                          text=True, timeout=120, env={**environ, **env})


def _named(span: Span, prefix: str) -> list[Span]:
    found = [span] if span.name.startswith(prefix) else []
    for child in span.children:
        found += _named(child, prefix)
    return found


def _root(receiver: Receiver, run_id: str) -> Span:
    roots = [s for s in receiver.spans if s.attributes.get("openprose.run.id") == run_id]
    assert len(roots) == 1
    return receiver.trace(roots[0].trace_id)


def test_trace_of_a_run_and_of_its_resume(tmp_path):
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "s.yaml").write_text(json.dumps(SCRIPT))
    (tmp_path / "fixed.yaml").write_text(json.dumps(FIXED))
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / ".env").write_text(
        f"ANTHROPIC_API_KEY={SECRETS[0]}\n"
        f"OPENPROSE_POSTGRES_URL=postgresql://u:{SECRETS[2]}@localhost/db\n")
    with Receiver() as receiver:
        first = _prose(tmp_path, "run", str(tmp_path / "p.prose"), "--provider", "scripted",
                       "--script", str(tmp_path / "s.yaml"), "--json",
                       OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                       ANTHROPIC_API_KEY=SECRETS[1])
        run_id = json.loads(first.stdout)["run_id"]
        assert json.loads(first.stdout)["status"] == "failed", first.stderr
        root = _root(receiver, run_id)
        second = _prose(tmp_path, "resume", run_id, "--script", str(tmp_path / "fixed.yaml"),
                        "--json", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{receiver.endpoint}"
                        "/v1/traces", OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
                        ANTHROPIC_API_KEY=SECRETS[1])
        assert json.loads(second.stdout)["status"] == "completed", second.stderr
        resumed = [s for s in receiver.spans if s.attributes.get("openprose.run.id") == run_id
                   and s is not root]
        assert len(resumed) == 1
        resumed_root = receiver.trace(resumed[0].trace_id)
    print("\n".join(tree(root)))  # the report's example (pytest -s)

    # One trace per drive of the run; the run's span holds everything, status ERROR.
    assert len({s.trace_id for s in receiver.spans}) == 2
    assert root.name == f"prose run {tmp_path / 'p.prose'}" and root.status == 2
    assert root.attributes["openprose.run.status"] == "failed"
    assert [c.name for c in root.children] == [
        "parallel line 5", "loop line 9", "session line 13", "try line 16", "output line 21"]
    parallel, loop, flaky, try_, final = root.children
    # Parallel branches are siblings under the parallel statement.
    assert sorted(c.name for c in parallel.children) == ["session line 6", "session line 7"]
    assert all(len(c.children) == 1 for c in parallel.children)
    # The loop: a judgment per round around one iteration's session (the writer's model).
    assert [c.name for c in loop.children] == ["chat", "session line 10", "chat"]
    assert loop.children[1].children[0].name == "invoke_agent sonnet"
    assert loop.children[1].children[0].attributes["gen_ai.request.model"] == "sonnet"
    # The retry is an event of its session's span, which succeeded.
    (fetch,) = flaky.children
    assert [(n, a["openprose.attempt"]) for n, a in fetch.events] == [("retry", 2)]
    assert fetch.status == 0
    # Failures: ERROR with an exception event, up to the statement that handled it.
    doomed, report = try_.children
    assert doomed.status == 2 and doomed.children[0].status == 2 and try_.status == 0
    assert any(n == "exception" and "server down" in a["exception.message"]
               for n, a in doomed.children[0].events)
    assert report.status == 0 and final.status == 2
    # GenAI conventions on every session and judgment.
    sessions, judgments = _named(root, "invoke_agent"), _named(root, "chat")
    assert (len(sessions), len(judgments)) == (7, 2)
    for span in sessions + judgments:
        assert span.attributes["gen_ai.provider.name"] == "scripted"
        assert span.attributes["gen_ai.operation.name"] in ("invoke_agent", "chat")
    for span in [s for s in sessions if s.status == 0]:
        assert span.attributes["gen_ai.usage.input_tokens"] > 0
        assert span.attributes["gen_ai.usage.output_tokens"] > 0
    assert not any("gen_ai.input.messages" in s.attributes for s in sessions)

    # The resume is a trace of its own, linked to the interrupted one; finished sessions
    # are reused (events), the final one runs, and with the opt-in its text is captured.
    assert resumed_root.links == [(root.trace_id, root.span_id)]
    assert resumed_root.attributes["openprose.resumed"] is True
    assert resumed_root.attributes["openprose.run.status"] == "completed"
    ran = {json.loads(s.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"]: s
           for s in _named(resumed_root, "invoke_agent")}
    assert sorted(ran) == ["Doomed call", "Final check"]  # a failed session runs again
    assert ran["Final check"].status == 0
    output = json.loads(ran["Final check"].attributes["gen_ai.output.messages"])
    assert output == [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]
    assert sum(n == "reused" for s in _walk(resumed_root) for n, _ in s.events) == 7
    for body in receiver.bodies:  # no key nor .env value, though content was captured
        assert not any(secret.encode() in body for secret in SECRETS)


def _walk(span: Span) -> list[Span]:
    return [span, *(s for c in span.children for s in _walk(c))]


GUIDED = """\
parallel:
  a = session "Alpha"
  b = session "Beta"
if **the drafts agree**:
  output joined = session "Join"
"""


def test_guided_run_is_traced(tmp_path, monkeypatch):
    """The server's engine drives a guided run: the host's sessions and verdicts are spans."""
    with Receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.endpoint}/v1/traces")
        monkeypatch.setattr(tracing, "_provider", None)  # this process's, to this receiver
        job = runner.Job(source=GUIDED, file="g.prose", project_root=tmp_path,
                         program=compile_or_raise(GUIDED, "g.prose"), mode="guided",
                         options=Options())

        async def main() -> runner.Outcome:
            host = HostProvider()
            run = asyncio.ensure_future(runner.execute(job, host, host.observe))
            await host_loop(host, scripted({"conditions": [{"match": ".", "verdicts": [True]}]}),
                            run)
            return await run

        try:
            outcome = asyncio.run(main())
        finally:
            provider = tracing._provider
            if provider is not None:
                provider.shutdown()
        root = _root(receiver, outcome.run_id)
    assert outcome.status == "completed"
    assert root.name == "prose guided g.prose"
    assert [c.name for c in root.children] == ["parallel line 1", "if line 4"]
    assert len(_named(root, "invoke_agent")) == 3 and len(_named(root, "chat")) == 1
    assert {s.attributes["gen_ai.provider.name"] for s in _walk(root)
            if "gen_ai.provider.name" in s.attributes} == {"host"}


EMBODIED = """\
let draft = session "Draft a note"
if **the draft is long**:
  session "Shorten it"
else:
  session "Extend it"
"""


def test_embodied_run_is_traced(tmp_path, monkeypatch):
    """The host follows the program itself; the server's follower traces what it did."""
    from tests.mcp_server.tool_host import walk

    from openprose.mcp_server.server import create_server

    (tmp_path / "note.prose").write_text(EMBODIED)
    with Receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.endpoint}/v1/traces")
        monkeypatch.setattr(tracing, "_provider", None)
        server = create_server(tmp_path, home=tmp_path / "home", watch=False)
        try:
            run_id, status, _ = walk(server, {}, EMBODIED, "note.prose", {}, {
                "sessions": [{"match": ".", "output": "ok"}],
                "conditions": [{"match": ".", "verdicts": [False]}]})
        finally:
            provider = tracing._provider
            if provider is not None:
                provider.shutdown()  # exports every span ended
        root = _root(receiver, run_id)
    assert status == "completed"
    assert root.name == "prose embodied note.prose"
    assert root.attributes["openprose.run.status"] == "completed"
    assert [c.name for c in root.children] == ["let line 1", "if line 2"]
    assert len(_named(root, "invoke_agent")) == 2 and len(_named(root, "chat")) == 1


def test_off_by_default_imports_nothing(tmp_path):
    """Without an endpoint or --trace, a run imports nothing of OpenTelemetry."""
    (tmp_path / "s.yaml").write_text("default_output: ok\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    code = ("import sys\nfrom openprose.cli import main\n"
            "try:\n    main()\nexcept SystemExit as stop:\n    assert stop.code == 0, stop\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    (tmp_path / "p.prose").write_text('output x = session "Hello"\n')
    done = subprocess.run(
        [sys.executable, "-c", code, "run", str(tmp_path / "p.prose"), "--provider",
         "scripted", "--script", str(tmp_path / "s.yaml"), "--project", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=60, env=environ)
    assert done.stdout.splitlines()[-1] == "[]", done.stderr


@pytest.mark.parametrize("flag", [True, False])
def test_wanted(flag, monkeypatch):
    for name in runner.TRACE_ENDPOINTS:
        monkeypatch.delenv(name, raising=False)
    assert runner.tracing_wanted(flag) is flag
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    assert runner.tracing_wanted(flag)
