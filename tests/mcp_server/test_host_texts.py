"""What a host model reads is what the server does (issue 30).

Each tool result is rendered the way a host shows it to its model — Claude Code: the
structured content as JSON when there is one, else the text; Codex CLI: the text — and every
instruction the model needs is checked to be in both. A session that cannot be done is failed
with its own token in every mode, and the program's retry decides what follows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from openprose.mcp_server.runs import DRIVER_KEY
from openprose.mcp_server.server import create_server
from openprose.state import open_store

pytestmark = pytest.mark.anyio

JUDGED = """\
agent thinker:
  model: opus
  prompt: "You think."
let idea = session: thinker
  prompt: "Think of an idea"
if **the idea is good**:
  let plan = session "Plan it"
    context: idea
"""
RETRIED = """\
let a = session "Try it"
  retry: 1
output out = a
"""


def shown(result: Any) -> dict[str, str]:
    """A tool result as each host's model reads it."""
    text = "\n".join(part.text for part in result.content if hasattr(part, "text"))
    structured = result.structured_content
    return {"claude-code": json.dumps(structured) if structured is not None else text,
            "codex-cli": text}


def check(result: Any, *needed: str) -> dict[str, Any]:
    assert not result.is_error, result.content
    for host, seen in shown(result).items():
        missing = [part for part in needed if part not in seen]
        assert not missing, f"{host} does not show {missing}: {seen}"
    return dict(result.structured_content or {})


async def test_every_instruction_is_in_what_each_host_shows(tmp_path: Path) -> None:
    (tmp_path / "judged.prose").write_text(JUDGED)
    async with Client(create_server(tmp_path, home=tmp_path / "home", watch=False)) as c:
        started = check(await c.call_tool("start_run", {"program": "judged.prose",
                                                        "mode": "guided"}),
                        "vm_token", "guided")
        vm = started["vm_token"]
        step = check(await c.call_tool("next_step", {"vm_token": vm, "wait_s": 30}),
                     "get_brief(token)", "opus")
        [item] = step["pending"]
        assert item["model"] == "opus"
        check(await c.call_tool("get_brief", {"token": item["token"]}), "write_binding(",
              "fail_session(", "reply with that summary line only")
        check(await c.call_tool("write_binding", {"token": item["token"], "value": "an idea",
                                                  "summary": "idea"}), "idea")
        step = check(await c.call_tool("next_step", {"vm_token": vm, "wait_s": 30}),
                     "submit_verdict(", "read_binding(", "the idea is good")
        [judgment] = step["pending"]
        check(await c.call_tool("read_binding", {"token": judgment["token"], "name": "idea"}),
              "an idea")
        check(await c.call_tool("submit_verdict", {"token": judgment["token"], "value": False,
                                                   "reason": "no"}), "recorded")
        # embodied: the grant carries the model and the launch instruction too
        started = check(await c.call_tool("start_run", {"program": "judged.prose",
                                                        "mode": "embodied"}), "outline")
        check(await c.call_tool("spawn_session", {"vm_token": started["vm_token"],
                                                  "statement": "1"}),
              "get_brief(token)", "opus")


@pytest.mark.parametrize("mode", ["embodied", "guided"])
async def test_a_session_fails_by_its_own_token_and_the_program_retries(
        tmp_path: Path, mode: str) -> None:
    (tmp_path / "retried.prose").write_text(RETRIED)
    async with Client(create_server(tmp_path, home=tmp_path / "home", watch=False)) as c:
        started = check(await c.call_tool("start_run", {"program": "retried.prose",
                                                        "mode": mode}))
        vm = started["vm_token"]

        async def grant() -> str:
            if mode == "guided":
                step = check(await c.call_tool("next_step", {"vm_token": vm, "wait_s": 30}))
                return str(step["pending"][0]["token"])
            spawned = check(await c.call_tool("spawn_session", {"vm_token": vm,
                                                                "statement": "0"}))
            return str(spawned["session_token"])

        first = await grant()
        failed = check(await c.call_tool("fail_session", {"token": first, "error": "flaky"}))
        if mode == "embodied":  # the server names the retry the program asks for
            assert "next: spawn_session 0" in failed["next"], failed
        else:
            assert failed["next"].startswith("retrying"), failed
        again = await c.call_tool("fail_session", {"token": first, "error": "twice"})
        assert again.is_error and ("failed once" in again.content[0].text
                                or "has ended" in again.content[0].text)
        second = await grant()
        brief = check(await c.call_tool("get_brief", {"token": second}), "flaky")
        assert brief["attempt"] == 2, brief  # the retry knows what failed before
        check(await c.call_tool("write_binding", {"token": second, "value": "done"}))
        if mode == "embodied":
            check(await c.call_tool("write_binding", {"token": vm, "name": "out",
                                                      "copy_of": "a"}))
            done = check(await c.call_tool("complete_run", {"vm_token": vm}))
        else:
            done = check(await c.call_tool("next_step", {"vm_token": vm, "wait_s": 30}))
        assert done["status"] == "completed", done


async def test_a_run_stored_as_a_host_run_resumes_as_embodied(tmp_path: Path) -> None:
    """Runs started before the one mode name recorded ``host``: a new server reads it as
    ``embodied``, the name every tool uses."""
    (tmp_path / "retried.prose").write_text(RETRIED)
    async with Client(create_server(tmp_path, home=tmp_path / "home", watch=False)) as c:
        started = check(await c.call_tool("start_run", {"program": "retried.prose"}))
    with open_store(tmp_path, "filesystem") as store:
        run = store.open_run(started["run_id"])
        driver = run.journal(DRIVER_KEY)
        assert driver is not None and driver.meta["mode"] == "embodied"
        run.record_result(DRIVER_KEY, status="driver", meta={**driver.meta, "mode": "host"})
    async with Client(create_server(tmp_path, home=tmp_path / "home", watch=False)) as c:
        resumed = check(await c.call_tool("resume_run", {"run_id": started["run_id"]}))
    assert resumed["mode"] == "embodied" and resumed["outline"], resumed
