"""End to end in the real Claude Code (the plugin loaded, a fake Messages API) with a scripted
host model that reads only what Claude Code shows it — the structured results of our tools,
the Agent tool's answers and the hook's refusals — and does only what those texts say:

- an agent with ``model: opus``: its session's first launch names no model and the plugin's
  hook refuses it, naming the model; the launch with ``model: "opus"`` runs, and the run's
  journal records that the session ran on opus;
- a session with ``retry: 1`` whose first attempt cannot be done: the subagent (or, without
  subagents, the main agent) fails it with ``fail_session`` and its own token, and the
  program's retry runs it again;
- a guided and an embodied run with subagents, and an embodied run in a host without
  subagents (the Agent tool disallowed, as in Claude Desktop), where the main agent does each
  session itself."""

from __future__ import annotations

import re
from typing import Any

import pytest
from tests.hosts.claude_code import PLUGIN_DIR, TOOL_PREFIX, run_claude
from tests.hosts.fake_messages import Block, FakeMessagesAPI, Reply, text, tool_use
from tests.hosts.host_model import (
    SESSION_AGENT,
    SESSION_MARK,
    Call,
    answer,
    calls,
    first_user_text,
    ours,
)

from openprose.state import open_store

PROGRAM = """\
agent thinker:
  model: opus
  prompt: "You think."
let idea = session: thinker
  prompt: "Think of an idea"
let checked = session "Check the idea"
  context: idea
  retry: 1
output final = checked
"""
FAILED = "failed: the checker was unavailable"
MODEL = re.compile(r'model: "([a-z]+)"')


def session_step(token: str, history: list[Call]) -> Block | None:
    """The next call of whoever does the session ``token``, as its brief says; ``None``
    when it has finished (written or failed)."""
    mine = [c for c in history if c.input.get("token") == token]
    brief = next((c.data for c in mine if c.name == "get_brief"), None)
    if brief is None:
        return ours("get_brief", token=token)
    if any(c.name in ("write_binding", "fail_session") for c in mine):
        return None
    if brief["task"].startswith("Check") and brief["attempt"] == 1:
        assert "fail_session(token" in brief["finish"], brief
        return ours("fail_session", token=token, error=FAILED.removeprefix("failed: "))
    context = [entry["name"] for entry in brief.get("context", [])]
    if context and not any(c.name == "read_binding" for c in mine):
        return ours("read_binding", token=token, name=context[0])
    assert "write_binding(token" in brief["finish"], brief
    return ours("write_binding", token=token, value=answer(brief["task"]), summary="done")


def launch(token: str, model: str | None) -> Block:
    """The Agent call the skill describes (``model`` only when given)."""
    prompt = f'{SESSION_MARK}"{token}") and do what the brief says.'
    return tool_use("Agent", {"description": "OpenProse session", "prompt": prompt,
                              "subagent_type": SESSION_AGENT, "run_in_background": False,
                              **({"model": model} if model else {})})


class Model:
    """The scripted model: a function of the request alone."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.bodies: list[dict] = []

    def __call__(self, body: dict) -> Reply:
        self.bodies.append(body)
        if not body.get("tools"):  # a side request (a title, a summary)
            return Reply([text("ok")])
        if SESSION_MARK in first_user_text(body):  # a session's subagent
            token = re.search(r'token="([^"]+)"', first_user_text(body)).group(1)
            history = calls(body)
            step = session_step(token, history)
            if step is not None:
                return Reply([step])
            failed = any(c.name == "fail_session" for c in history)
            return Reply([text(FAILED if failed else "done")])
        return self.main(body, calls(body))

    def main(self, body: dict, history: list[Call]) -> Reply:
        if not history:
            return Reply([tool_use("Skill", {"skill": "openprose:open-prose",
                                             "args": "run think.prose"})])
        if history[-1].name == "Skill":
            return Reply([ours("start_run", program="think.prose", mode=self.mode)])
        vm = next(c.data for c in history if c.name == "start_run")["vm_token"]
        agents = any(t["name"] == "Agent" for t in body["tools"])
        last = history[-1]
        if last.name == "Agent":
            launches = [c for c in history if c.turn == last.turn]
            refused = [c for c in launches if MODEL.search(c.result or "")
                       and "refused" in (c.result or "")]
            if refused:  # launch again with the model the refusal names
                return Reply([launch(re.search(r'token="([^"]+)"', c.input["prompt"]).group(1),
                                     MODEL.search(c.result or "").group(1))
                              for c in refused])
        handles = self.handles(history, vm)
        if isinstance(handles, Reply):
            return handles
        if agents:  # first launch as a careless model would: without the model
            return Reply([launch(token, None) for token, _ in handles])
        token = handles[0][0]  # without subagents: do the session here
        step = session_step(token, history)
        return Reply([step]) if step is not None else self.after(history, vm)

    def handles(self, history: list[Call], vm: str) -> list[tuple[str, Any]] | Reply:
        """The sessions to hand on now (token, handle's model), or the next call."""
        last = history[-1]
        if self.mode == "guided":
            if last.name != "next_step":
                mine = [c for c in history if c.name in ("get_brief", "write_binding",
                                                         "fail_session", "read_binding")]
                if mine and last.name in ("get_brief", "read_binding"):
                    return [(last.input["token"], None)]
                return Reply([ours("next_step", vm_token=vm, wait_s=30)])
            if last.data.get("status") != "running":
                return Reply([text(f"The program finished: {last.data.get('status')}.")])
            pending = last.data.get("pending", [])
            if not pending:
                return Reply([ours("next_step", vm_token=vm, wait_s=30)])
            return [(item["token"], item.get("model")) for item in pending]
        if last.name == "complete_run":
            return Reply([text(f"The program finished: {last.data.get('status')}.")])
        if last.name == "spawn_session":
            assert "session_token" in last.data, last.result
            return [(last.data["session_token"], last.data.get("model"))]
        if last.name in ("get_brief", "read_binding"):
            return [(last.input["token"], None)]
        return self.after(history, vm)

    def after(self, history: list[Call], vm: str) -> Reply:
        """Embodied: the next session statement (again, when its session failed), then the
        output and complete_run; guided: next_step."""
        if self.mode == "guided":
            return Reply([ours("next_step", vm_token=vm, wait_s=30)])
        started = next(c.data for c in history if c.name == "start_run")
        sessions = [e["id"] for e in started["outline"] if e["kind"] == "session"]
        spawned = [c for c in history if c.name == "spawn_session"]
        failed = {c.input["token"] for c in history if c.name == "fail_session"}
        failed |= {re.search(r'token="([^"]+)"', c.input["prompt"]).group(1)
                   for c in history if c.name == "Agent" and FAILED in (c.result or "")}
        for c in spawned:
            assert "session_token" in c.data, c.result
        done = [c.input["statement"] for c in spawned if c.data["session_token"] not in failed]
        todo = [statement for statement in sessions if statement not in done]
        if todo:
            return Reply([ours("spawn_session", vm_token=vm, statement=todo[0])])
        if not any(c.name == "write_binding" and c.input.get("name") == "final"
                   for c in history):
            return Reply([ours("write_binding", token=vm, name="final", copy_of="checked")])
        return Reply([ours("complete_run", vm_token=vm)])


@pytest.mark.parametrize(("mode", "subagents"),
                         [("guided", True), ("embodied", True), ("embodied", False)])
def test_models_and_failures_as_claude_code_shows_them(mode, subagents, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "think.prose").write_text(PROGRAM)
    model = Model(mode)
    tools = f"{TOOL_PREFIX.rstrip('_')},Agent" if subagents else TOOL_PREFIX.rstrip("_")
    with FakeMessagesAPI(model) as api:
        result = run_claude(["-p", f"prose run think.prose ({mode})", "--plugin-dir",
                             str(PLUGIN_DIR), "--output-format", "json", "--allowedTools",
                             tools, *([] if subagents else ["--disallowedTools", "Agent"])],
                            tmp_path / "home", project, api.url, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert api.errors == []

    with open_store(project, "filesystem") as store:
        [run_dir] = (project / ".prose" / "runs").iterdir()
        run = store.open_run(run_dir.name)
        assert run.status == "completed"
        values = {b.name: b.value for b in run.bindings()}
        launches = [r for r in run.tool_calls() if r.meta["tool"] == "Agent"]
    assert values["idea"] == answer("Think of an idea")
    assert values["checked"] == values["final"] == answer("Check the idea")

    main = [b for b in model.bodies if b.get("tools") and SESSION_MARK not in first_user_text(b)]
    subagent_bodies = [b for b in model.bodies if SESSION_MARK in first_user_text(b)]
    main_calls = calls(main[-1])
    if not subagents:
        assert subagent_bodies == [] and launches == []
        assert any(c.name == "fail_session" for c in main_calls)
        return
    # The opus session: launched without a model and refused naming it, then run on opus.
    agent_calls = [c for c in main_calls if c.name == "Agent"]
    refused = [c for c in agent_calls if "refused" in (c.result or "")]
    assert len(refused) == 1 and 'model: "opus"' in refused[0].result
    assert [c.input.get("model") for c in agent_calls].count("opus") == 1
    assert [(r.status, r.meta.get("model")) for r in launches] == [
        ("refused", None), ("allowed", "opus"), ("allowed", "(the host's default model)"),
        ("allowed", "(the host's default model)")]
    assert any(c.name == "fail_session" for b in subagent_bodies for c in calls(b))
    assert not any(c.name in ("get_brief", "write_binding", "fail_session")
                   and not c.input["token"].startswith("vm.") for c in main_calls)
