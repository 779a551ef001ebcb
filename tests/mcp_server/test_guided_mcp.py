"""Guided runs through a real in-process MCP client, in both protocol eras: a scripted host
steps corpus programs with next_step and completes every session through write_binding (and
judgments through submit_verdict, failures through fail_session); the run left in state, the
outputs and the number of answers equal ``prose run`` on the scripted provider."""

from __future__ import annotations

import json
import shutil

import pytest
from mcp import Client
from tests.conftest import CORPUS
from tests.mcp_server.guided_host import (
    CASES,
    GuidedHost,
    Refused,
    bindings_of,
    call_counts,
    corpus_job,
    instant,
    sample_inputs,
    scripted,
)
from tests.mcp_server.host import ERAS

from openprose.engine import runner
from openprose.engine.values import to_text
from openprose.mcp_server.server import create_server

pytestmark = pytest.mark.anyio


def _error_tail(error: str | None) -> str | None:
    return error and error.split(": ", 1)[-1]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("name", sorted(CASES))
async def test_guided_walk_equals_prose_run(name, era, tmp_path):
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"corpus not found beside the repository ({CORPUS})")
    reference = scripted(CASES[name])
    expected = await runner.execute(corpus_job(path, tmp_path / "ref", loop_limit=1000),
                                    reference)
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(path, root / name)
    mcp = create_server(root, home=tmp_path / "home", watch=False)
    script = scripted(instant(CASES[name]))
    async with Client(mcp, **era) as client:
        host = GuidedHost(client, mcp, script)
        run_id, vm_token = await host.start(name, sample_inputs(path))
        final = await host.walk(vm_token)
        report = await host.call("get_run", run_id=run_id)
        again = await host.call("next_step", vm_token=vm_token, wait_s=0)
    assert (final["status"], _error_tail(final.get("error"))) == (
        expected.status, _error_tail(expected.error))
    assert again["status"] == final["status"]  # a finished run stays finished
    assert call_counts(script) == call_counts(reference)
    assert (report["sessions"], report["reused"]) == (expected.sessions, expected.reused)
    got = bindings_of(root, run_id)
    assert got == bindings_of(tmp_path / "ref", expected.run_id)
    if expected.status == "completed":
        assert sorted(o["name"] for o in final.get("outputs", [])) == sorted(expected.outputs)
        assert {o["name"]: got[(o["name"], None)] for o in final.get("outputs", [])} == {
            k: to_text(v) for k, v in expected.outputs.items()}  # as bindings hold it
    for reply in host.replies:  # confirmations name where a value is, never the value
        assert "done: first point" not in reply["_text"]


PARALLEL = """\
parallel:
  a = session "Alpha"
  b = session "Beta"
  c = session "Gamma"
output joined = session "Join"
  context: { a, b, c }
"""


@pytest.mark.parametrize("era", ERAS)
async def test_parallel_items_pending_together_completed_in_reverse(era, tmp_path):
    (tmp_path / "p.prose").write_text(PARALLEL)
    mcp = create_server(tmp_path, home=tmp_path / "home", watch=False)
    async with Client(mcp, **era) as client:
        host = GuidedHost(client, mcp, scripted({}))
        run_id, vm_token = await host.start("p.prose", {})
        step = await host.call("next_step", vm_token=vm_token, wait_s=5)
        pending = step["pending"]
        assert sorted(item["binding"] for item in pending) == ["a", "b", "c"]
        assert all(item["kind"] == "session" for item in pending)
        for item in sorted(pending, key=lambda i: i["binding"], reverse=True):
            written = await host.call("write_binding", token=item["token"],
                                      value=f"value of {item['binding']}", summary="ok")
            assert written["binding"] == item["binding"] and written["bytes"] == 10
            assert "value of" not in written["_text"]
        with pytest.raises(Refused, match="writes its binding once"):  # a token writes once
            await host.call("write_binding", token=pending[0]["token"], value="other")
        (join,) = (await host.call("next_step", vm_token=vm_token, wait_s=5))["pending"]
        assert join["binding"] == "joined"
        for name in "abc":
            read = await host.call("read_binding", token=join["token"], name=name)
            assert read["value"] == f"value of {name}"
        await host.call("write_binding", token=join["token"], value="all three")
        final = await host.call("next_step", vm_token=vm_token, wait_s=5)
    assert final["status"] == "completed"
    assert [o["name"] for o in final["outputs"]] == ["joined"]
    assert bindings_of(tmp_path, run_id) == {
        ("a", None): "value of a", ("b", None): "value of b", ("c", None): "value of c",
        ("joined", None): "all three"}


ROLE = "You are a careful writer who checks every claim twice. " * 100
RETRIED = f"""\
input material: "what to draft from"
agent writer:
  model: sonnet
  prompt: "{ROLE}"
output draft = session: writer
  prompt: "Draft it"
  context: material
  retry: 1
"""


async def test_sessions_are_handles_and_a_retry_says_what_failed(tmp_path):
    """Issue 25: next_step hands the main agent a handle of <= 300 bytes whatever the role's
    and the values' sizes; the subagent reads role, task, context and attempt with
    get_brief, and a retried session's brief says which attempt it is and what failed."""
    (tmp_path / "p.prose").write_text(RETRIED)
    mcp = create_server(tmp_path, home=tmp_path / "home", watch=False)
    async with Client(mcp, mode="legacy") as client:
        host = GuidedHost(client, mcp, scripted({}))
        _, vm_token = await host.start("p.prose", {"material": "m" * 100_000})
        step = await host.call("next_step", vm_token=vm_token, wait_s=5)
        (first,) = step["pending"]
        assert len(json.dumps(first).encode()) <= 300 and first["agent"] == "writer"
        assert "get_brief(token)" in first["start"] and "careful writer" not in step["_text"]
        brief = await host.call("get_brief", token=first["token"])
        assert brief["role"] == ROLE.strip() and brief["task"] == "Draft it"
        assert brief["context"] == [{"name": "material", "kind": "input", "chars": 100_000}]
        assert brief["attempt"] == 1 and "failed_before" not in brief
        await host.call("fail_session", token=first["token"], error="the source was offline")
        (second,) = (await host.call("next_step", vm_token=vm_token, wait_s=5))["pending"]
        assert second["attempt"] == 2 and len(json.dumps(second).encode()) <= 300
        retried = await host.call("get_brief", token=second["token"])
        assert retried["attempt"] == 2
        assert retried["failed_before"] == ["the source was offline"]
        assert "attempt 1: the source was offline" in retried["_text"]
        with pytest.raises(Refused, match="brief"):  # the failed attempt's token has ended
            await host.call("get_brief", token=first["token"])
        await host.call("write_binding", token=second["token"], value="a draft")
        final = await host.call("next_step", vm_token=vm_token, wait_s=5)
    assert final["status"] == "completed"


LOOPED = """\
parallel:
  market = session "Study the market"
  costs = session "Study the costs"
  risks = session "Study the risks"
let draft = "none yet"
loop until **the draft is approved** (max: 3):
  draft = session "Write the draft"
    context: { market, costs, risks }
output final = session "Polish"
  context: draft
"""


async def test_a_judgment_lists_bindings_by_reference_within_its_budget(tmp_path):
    """Issue 25: a host that can call read_binding gets each binding in scope by name, kind,
    size and a short preview — the whole judgment within 1.5 KB, whatever the values' sizes,
    the latest iteration's result first — and reads a whole value with the judgment's token."""
    (tmp_path / "p.prose").write_text(LOOPED)
    mcp = create_server(tmp_path, home=tmp_path / "home", watch=False)
    big = {name: f"{name} findings " + "x" * 200_000 for name in ("market", "costs", "risks")}
    async with Client(mcp, mode="legacy") as client:
        host = GuidedHost(client, mcp, scripted({}))
        _, vm_token = await host.start("p.prose", {})
        step = await host.call("next_step", vm_token=vm_token, wait_s=5)
        for item in step["pending"]:
            await host.call("write_binding", token=item["token"], value=big[item["binding"]])
        judged = []
        for round_ in range(3):
            (item,) = (await host.call("next_step", vm_token=vm_token, wait_s=5))["pending"]
            if item["kind"] == "session":
                await host.call("write_binding", token=item["token"],
                                value=f"draft {round_} " + "y" * 300_000)
                (item,) = (await host.call("next_step", vm_token=vm_token, wait_s=5))["pending"]
            assert item["kind"] == "judgment"
            judged.append(item)
            assert len(json.dumps(item).encode()) <= 1536, len(json.dumps(item).encode())
            names = [c["name"] for c in item.get("context", [])]
            if round_:
                assert names[0] == "latest iteration"
                latest = await host.call("read_binding", token=item["token"],
                                         name="latest iteration", limit=20)
                assert latest["value"] == (f"draft {round_} " + "y" * 20)[:20]
                assert latest["total_chars"] == 300_008
            assert {"market", "costs", "risks"} <= set(names)
            sizes = {c["name"]: c["chars"] for c in item["context"]}
            assert sizes["market"] == len(big["market"])
            whole = await host.call("read_binding", token=item["token"], name="market",
                                    limit=1_000_000)
            assert whole["value"] == big["market"]
            with pytest.raises(Refused, match="not in this judgment"):
                await host.call("read_binding", token=item["token"], name="nothing")
            await host.call("submit_verdict", token=item["token"], value=round_ == 2,
                            reason="checked")
        (polish,) = (await host.call("next_step", vm_token=vm_token, wait_s=5))["pending"]
        await host.call("write_binding", token=polish["token"], value="final")
        assert (await host.call("next_step", vm_token=vm_token, wait_s=5))["status"] == \
            "completed"
    assert len(judged) == 3
