"""The Anthropic provider against a local HTTP server that speaks the Messages API."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.engine.memjournal import MemJournal

from openprose.engine.anthropic_provider import AnthropicProvider, model_aliases, model_prices
from openprose.engine.errors import ProviderUnavailable
from openprose.engine.interpreter import Interpreter, Options
from openprose.language import compile_or_raise

PROSE = str(Path(sys.executable).with_name("prose"))


def _message(content, stop_reason):
    return {"id": "msg_x", "type": "message", "role": "assistant", "model": "m",
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": 11, "output_tokens": 7}}


class MessagesServer:
    """Replies from a queue of (status, headers, body); records every request body."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append({"path": self.path, "body": json.loads(body),
                                       "key": self.headers.get("x-api-key") or self.headers.get("authorization")})
                status, headers, reply = outer.replies.pop(0)
                data = json.dumps(reply).encode()
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    servers = []

    def make(replies):
        servers.append(MessagesServer(replies))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def _run(source, provider, journal):
    program = compile_or_raise(source, "t.prose")
    slept = []

    async def sleep(seconds):
        slept.append(seconds)

    provider.sleep = sleep
    interp = Interpreter(program, source, journal, provider, file="t.prose",
                         options=Options(sleep=sleep))
    return asyncio.run(interp.run()), slept


def test_tool_loop_session_reads_context_and_writes_its_binding(server):
    srv = server([
        (200, {}, _message([{"type": "tool_use", "id": "t1", "name": "read_binding",
                             "input": {"name": "facts"}}], "tool_use")),
        (200, {}, _message([{"type": "tool_use", "id": "t2", "name": "write_output",
                             "input": {"content": "SUMMARY OF F"}}], "tool_use")),
        (200, {}, _message([{"type": "text", "text": "Wrote the summary."}], "end_turn")),
    ])
    journal = MemJournal()
    provider = AnthropicProvider(api_key="k-test", base_url=srv.url,
                                 models={"haiku": "claude-test-haiku"})
    out, _ = _run('let facts = "F"\noutput s = session "Summarize"\n  model: haiku\n'
                  '  context: facts\n', provider, journal)
    assert out == {"s": "SUMMARY OF F"}
    first, second = srv.requests[0]["body"], srv.requests[1]["body"]
    assert first["model"] == "claude-test-haiku" and "k-test" in srv.requests[0]["key"]
    assert "facts: mem:facts" in first["messages"][0]["content"]
    assert second["messages"][-1]["content"][0] == {
        "type": "tool_result", "tool_use_id": "t1", "content": "F", "is_error": False}
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}


def test_rate_limit_then_success_honours_retry_after(server):
    srv = server([
        (429, {"retry-after": "3"}, {"type": "error", "error": {"type": "rate_limit_error",
                                                                "message": "slow down"}}),
        (200, {}, _message([{"type": "text", "text": "plain answer"}], "end_turn")),
    ])
    provider = AnthropicProvider(api_key="k", base_url=srv.url)
    out, slept = _run('output s = session "Go"\n', provider, MemJournal())
    assert out == {"s": "plain answer"}
    assert slept == [3.0]
    assert len(srv.requests) == 2


def test_verdict_is_a_forced_tool_call(server):
    srv = server([
        (200, {}, _message([{"type": "tool_use", "id": "v", "name": "verdict",
                             "input": {"value": True, "reason": "looks done"}}], "tool_use")),
    ])
    journal = MemJournal()
    provider = AnthropicProvider(api_key="k", base_url=srv.url)
    _run('if **the work is done**:\n  let x = "yes"\n', provider, journal)
    assert journal.verdicts["0.if0?0"].value is True
    assert journal.verdicts["0.if0?0"].reason == "looks done"
    assert srv.requests[0]["body"]["tool_choice"] == {"type": "tool", "name": "verdict"}


def test_reading_a_binding_outside_the_context_is_refused(server):
    srv = server([
        (200, {}, _message([{"type": "tool_use", "id": "t1", "name": "read_binding",
                             "input": {"name": "secret"}}], "tool_use")),
        (200, {}, _message([{"type": "text", "text": "done"}], "end_turn")),
    ])
    provider = AnthropicProvider(api_key="k", base_url=srv.url)
    _run('let secret = "s"\noutput s = session "Go"\n', provider, MemJournal())
    result = srv.requests[1]["body"]["messages"][-1]["content"][0]
    assert result["is_error"] is True and "not in your context" in result["content"]


def test_no_api_key_says_how_to_proceed(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProviderUnavailable, match="--provider scripted"):
        AnthropicProvider()


def test_model_aliases_come_from_configuration():
    models = model_aliases({"OPENPROSE_MODEL_OPUS": "claude-custom"})
    assert models["opus"] == "claude-custom" and models["haiku"] == "claude-haiku-5-5"


def test_prices_from_configuration_give_each_run_its_cost(server, tmp_path, monkeypatch):
    """End to end through `prose run`: the key, base URL and price come from .prose/.env."""
    srv = server([(200, {}, _message([{"type": "text", "text": "hello"}], "end_turn"))])
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / ".env").write_text(
        f"ANTHROPIC_API_KEY=k-from-env-file\nANTHROPIC_BASE_URL={srv.url}\n"
        "OPENPROSE_PRICE_SONNET=3,15\n")
    (tmp_path / "p.prose").write_text('output s = session "Go"\n')
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    done = subprocess.run([PROSE, "run", "p.prose", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outputs"] == {"s": "hello"}
    assert result["cost_usd"] == pytest.approx((11 * 3 + 7 * 15) / 1e6)
    assert "k-from-env-file" in srv.requests[0]["key"]


def test_a_malformed_price_is_named():
    with pytest.raises(ProviderUnavailable, match="OPENPROSE_PRICE_OPUS"):
        model_prices({"OPENPROSE_PRICE_OPUS": "cheap"})


def test_cache_tokens_are_priced_at_their_own_rates():
    usage = SimpleNamespace(input_tokens=1000, output_tokens=100,
                            cache_creation_input_tokens=2000, cache_read_input_tokens=10000)
    price = model_prices({"OPENPROSE_PRICE_CLAUDE_X_1": "2,10"})["claude-x-1"]
    assert price.cost(usage) == pytest.approx((1000 + 2000 * 1.25 + 10000 * 0.1) * 2 / 1e6
                                              + 100 * 10 / 1e6)


def test_a_session_works_on_the_project_under_its_permissions(server, tmp_path):
    """The real provider, its model faked over HTTP: the session gets the work tools, its
    permitted edit lands, its refused write and command come back as errors naming the
    rule, and every call is in the run's journal."""
    from openprose.engine import runner
    from openprose.engine.permissions import Policy
    from openprose.engine.work_tools import WorkSetup
    from openprose.state import open_store

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "README.md").write_text("readme\n")

    def use(tid, name, args):
        return _message([{"type": "tool_use", "id": tid, "name": name, "input": args}],
                        "tool_use")

    srv = server([
        (200, {}, use("t1", "read", {"file_path": "src/calc.py"})),
        (200, {}, use("t2", "edit", {"file_path": "src/calc.py", "old_string": "a - b",
                                     "new_string": "a + b"})),
        (200, {}, use("t3", "write", {"file_path": "README.md", "content": "gone"})),
        (200, {}, use("t4", "bash", {"command": "rm -rf src"})),
        (200, {}, use("t5", "write_output", {"content": "fixed add"})),
        (200, {}, _message([{"type": "text", "text": "Done."}], "end_turn")),
    ])
    source = ('agent fixer:\n  prompt: "You fix code."\n  permissions:\n'
              '    write: ["src/**"]\n    bash: deny\n    network: deny\n'
              'output result = session: fixer\n  prompt: "Fix add"\n')
    program = compile_or_raise(source, "fix.prose")
    job = runner.Job(source=source, file="fix.prose", program=program, project_root=tmp_path,
                     options=Options(work=WorkSetup(Policy(tmp_path))))
    provider = AnthropicProvider(api_key="k", base_url=srv.url)
    outcome = asyncio.run(runner.execute(job, provider))
    assert outcome.status == "completed" and outcome.outputs == {"result": "fixed add"}
    assert (tmp_path / "src" / "calc.py").read_text().endswith("return a + b\n")
    assert (tmp_path / "README.md").read_text() == "readme\n"
    first = srv.requests[0]["body"]
    names = [tool["name"] for tool in first["tools"]]
    assert names[:2] == ["read_binding", "write_output"]
    assert {"read", "write", "edit", "glob", "grep"} <= set(names)
    assert "bash" not in names and "web_search" not in names  # bash: deny, network: deny
    assert "write ['src/**']" in first["system"][0]["text"]
    results = [srv.requests[i]["body"]["messages"][-1]["content"][0] for i in range(1, 5)]
    assert results[0]["content"].startswith("def add") and not results[0]["is_error"]
    assert not results[1]["is_error"]
    assert results[2]["is_error"] and "agent 'fixer' may not write README.md" in \
        results[2]["content"] and "write: [src/**]" in results[2]["content"]
    assert results[3]["is_error"] and "(bash: deny)" in results[3]["content"]
    with open_store(tmp_path, "filesystem") as store:
        calls = store.open_run(outcome.run_id).tool_calls()
    assert [(c.meta["tool"], c.status, c.meta["rule"]) for c in calls] == [
        ("web", "refused", "network: deny"), ("read", "allowed", "read: [**]"),
        ("edit", "allowed", "write: [src/**]"), ("write", "refused", "write: [src/**]"),
        ("bash", "refused", "bash: deny")]


def test_web_tools_are_offered_for_the_hosts_a_network_list_names(server, tmp_path):
    from openprose.engine import runner
    from openprose.engine.permissions import Policy
    from openprose.engine.work_tools import WorkSetup

    srv = server([(200, {}, _message([{"type": "text", "text": "ok"}], "end_turn"))])
    source = ('const SPEC = "https://docs.example.com/spec"\n'
              'agent reader:\n  prompt: "r"\n  permissions:\n    network: [SPEC]\n'
              'output r = session: reader\n  prompt: "read the spec"\n')
    job = runner.Job(source=source, file="w.prose", program=compile_or_raise(source, "w.prose"),
                     project_root=tmp_path, options=Options(work=WorkSetup(Policy(tmp_path))))
    asyncio.run(runner.execute(job, AnthropicProvider(api_key="k", base_url=srv.url)))
    tools = {tool["name"]: tool for tool in srv.requests[0]["body"]["tools"]}
    assert tools["web_fetch"]["allowed_domains"] == ["docs.example.com"]
    assert tools["web_search"]["allowed_domains"] == ["docs.example.com"]


def test_a_session_over_its_turn_limit_fails_naming_the_setting(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENPROSE_MAX_TURNS", "2")
    loop = _message([{"type": "tool_use", "id": "t", "name": "glob",
                      "input": {"pattern": "*"}}], "tool_use")
    srv = server([(200, {}, loop), (200, {}, loop)])
    provider = AnthropicProvider(api_key="k", base_url=srv.url)
    with pytest.raises(Exception, match=r"within 2 turns.*OPENPROSE_MAX_TURNS"):
        _run('output s = session "Go"\n', provider, MemJournal())


def test_network_prompt_asks_before_the_web_tools_are_offered(server, tmp_path):
    from openprose.engine import runner
    from openprose.engine.permissions import Policy
    from openprose.engine.work_tools import WorkSetup

    asked = []

    def consent(request):
        asked.append((request.agent, request.tool))
        return answers.pop(0)

    answers = ["no", "yes"]
    srv = server([(200, {}, _message([{"type": "text", "text": "ok"}], "end_turn"))] * 2)
    source = ('agent reader:\n  prompt: "r"\n'
              'let a = session: reader\n  prompt: "one"\n'
              'output b = session: reader\n  prompt: "two"\n')
    job = runner.Job(source=source, file="w.prose", program=compile_or_raise(source, "w.prose"),
                     project_root=tmp_path,
                     options=Options(work=WorkSetup(Policy(tmp_path, consent=consent))))
    asyncio.run(runner.execute(job, AnthropicProvider(api_key="k", base_url=srv.url)))
    assert asked == [("reader", "network"), ("reader", "network")]
    first, second = ({t["name"] for t in r["body"]["tools"]} for r in srv.requests)
    assert "web_search" not in first and {"web_search", "web_fetch"} <= second


def test_an_error_echoing_the_api_key_never_keeps_it(server):
    """A proxy at ANTHROPIC_BASE_URL that echoes the key in its error put the key into the
    run's error, its journal, state.md and the terminal."""
    key = "sk-ant-echoed-4f2a9c"
    srv = server([(401, {}, {"type": "error", "error": {
        "type": "authentication_error", "message": f"invalid x-api-key {key}"}})])
    provider = AnthropicProvider(api_key=key, base_url=srv.url)
    journal = MemJournal()
    with pytest.raises(Exception) as failed:
        _run('output s = session "Go"\n', provider, journal)
    assert "invalid x-api-key ***" in str(failed.value) and key not in str(failed.value)
    assert key not in repr(journal.__dict__)
