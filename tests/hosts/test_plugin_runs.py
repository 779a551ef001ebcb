"""End to end in the real host: ``claude -p "prose run examples/review.prose topic=tides"``
with the plugin loaded (``--plugin-dir skill``: Claude Code starts ``prose serve`` itself)
against a local fake of the Messages API whose scripted host model follows the skill. The
subagents Claude Code spawns for the sessions call write_binding themselves; the run left on
disk equals ``prose run`` of the program with the same answers, in guided and in embodied
mode. What the model saw is checked too: the skill on activation, our tools' descriptions, and
no binding value in any tool result it did not ask for."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.hosts.claude_code import PLUGIN_DIR, TOOL_PREFIX, run_claude
from tests.hosts.fake_messages import FakeMessagesAPI, seen_text
from tests.hosts.host_model import (
    REFERENCE_SCRIPT,
    SESSION_MARK,
    HostModel,
    answer,
    calls,
    first_user_text,
)
from tests.hosts.test_plugin_manifest import SKILL, frontmatter

from openprose.engine import ScriptedProvider, runner
from openprose.language import compile_or_raise
from openprose.state import open_store

PROGRAM = """\
input topic: "What the note is about"
let draft = session "Draft a short note about {topic}"
parallel:
  tone = session "Check the tone of the draft"
    context: draft
  facts = session "Check the facts in the draft"
    context: draft
output final = session "Write the final note"
  context: { draft, tone, facts }
"""
INPUTS = {"topic": "tides"}
# Of our tools, what a session subagent holds (skill/agents/session.md): no start_run,
# next_step, update_state, complete_run or any other tool of the VM.
SESSION_TOOLS = {"get_brief", "read_binding", "write_binding", "read_memory", "write_memory",
                 "fail_session"}
# What the host model reads in the program, for an embodied walk: binding → (prompt, context).
SESSIONS = {"draft": ("Draft a short note about tides", []),
            "tone": ("Check the tone of the draft", ["draft"]),
            "facts": ("Check the facts in the draft", ["draft"]),
            "final": ("Write the final note", ["draft", "tone", "facts"])}


def tool_bytes(tools: list[dict]) -> int:
    """Bytes of tool definitions as the host sends them to the model."""
    return len(json.dumps(tools).encode())


def _bindings(root: Path) -> tuple[str, dict]:
    with open_store(root, "filesystem") as store:
        runs = list((root / ".prose" / "runs").iterdir())
        assert len(runs) == 1, runs
        run = store.open_run(runs[0].name)
        return run.status, {(b.name, b.execution_id): b.value for b in run.bindings()}


def _prose_run(root: Path) -> dict:
    """``prose run`` of the program on the scripted provider with the host's answers."""
    job = runner.Job(source=PROGRAM, file="examples/review.prose",
                     program=compile_or_raise(PROGRAM, "review.prose"), project_root=root,
                     inputs=dict(INPUTS))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(REFERENCE_SCRIPT)))
    assert outcome.status == "completed", outcome.error
    return _bindings(root)[1]


@pytest.mark.parametrize("mode", ["guided", "embodied"])
def test_prose_run_in_claude_code_equals_prose_run(mode, tmp_path):
    project = tmp_path / "project"
    (project / "examples").mkdir(parents=True)
    (project / "examples" / "review.prose").write_text(PROGRAM)
    model = HostModel(mode, "examples/review.prose", INPUTS, SESSIONS)
    ask = "prose run examples/review.prose topic=tides" + (
        " (embodied: be the VM yourself)" if mode == "embodied" else "")
    with FakeMessagesAPI(model) as api:
        result = run_claude(["-p", ask, "--plugin-dir", str(PLUGIN_DIR), "--output-format",
                             "json", "--allowedTools", f"{TOOL_PREFIX.rstrip('_')},Agent"],
                            tmp_path / "home", project, api.url, timeout=420)
    assert result.returncode == 0, result.stdout + result.stderr
    assert api.errors == []
    assert json.loads(result.stdout)["result"].startswith("The program finished: completed"), result.stdout

    status, got = _bindings(project)
    assert status == "completed"
    assert got == _prose_run(tmp_path / "reference")
    assert got[("final", None)] == answer("Write the final note")

    main = [b for b in model.bodies if SESSION_MARK not in first_user_text(b)]
    subagents = [b for b in model.bodies if SESSION_MARK in first_user_text(b)]
    main_calls = calls(main[-1])
    # The host model saw the skill once it activated it, and our tools with their descriptions.
    _, skill_body = frontmatter(SKILL)
    assert skill_body.strip() in seen_text(main[-1])
    tools = {t["name"]: t.get("description", "") for t in main[0]["tools"]}
    step = "next_step" if mode == "guided" else "spawn_session"
    assert "Guided runs" in tools[TOOL_PREFIX + "next_step"] and TOOL_PREFIX + step in tools
    # A parallel block's sessions went to subagents launched together, in one message.
    launches = [[c for c in main_calls if c.turn == turn and c.name == "Agent"]
                for turn in sorted({c.turn for c in main_calls})]
    assert sorted(len(group) for group in launches if group) == [1, 1, 2]
    # The main agent handed each session on by its token; each subagent read its brief first.
    assert all(len(c.input["prompt"].encode()) <= 300 for c in main_calls if c.name == "Agent")
    assert all(calls(body)[0].name == "get_brief" for body in subagents if calls(body))
    assert not any(c.name == "get_brief" for c in main_calls)
    # The subagents wrote the bindings; the main agent never did.
    assert not any(c.name == "write_binding" for c in main_calls)
    writes = [c for body in subagents for c in calls(body) if c.name == "write_binding"]
    assert {c.input["value"] for c in writes} == {answer(p) for p, _ in SESSIONS.values()}
    # Every subagent was the plugin's session agent: our session tools, none of the VM's.
    for body in subagents:
        ours = [t for t in body["tools"] if t["name"].startswith(TOOL_PREFIX)]
        names = {t["name"].removeprefix(TOOL_PREFIX) for t in ours}
        assert names <= SESSION_TOOLS and {"read_binding", "write_binding"} <= names, names
        assert tool_bytes(ours) <= 3000, tool_bytes(ours)
    # No tool result carried a value nobody asked for (read_binding is asking).
    values = {answer(p) for p, _ in SESSIONS.values()}
    for body in model.bodies:
        for call in calls(body):
            if call.name != "read_binding":
                assert not any(v in (call.result or "") for v in values), call

