"""End to end in the real Claude Code (plugin loaded with ``--plugin-dir``, a fake Messages
API, a scripted host model): an embodied run of a program with ``if``/``else``, a judged loop,
``parallel`` and a block. The model reaches the spec only through what the plugin offers
(``get_instructions``), steps the program as the spec says, sees the server refuse a branch
taken before its verdict (naming what comes next), and leaves the run ``prose run`` leaves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.hosts.claude_code import PLUGIN_DIR, TOOL_PREFIX, run_claude
from tests.hosts.fake_messages import Block, FakeMessagesAPI, Reply, text
from tests.hosts.host_model import (
    REFERENCE_SCRIPT,
    SESSION_MARK,
    Call,
    HostModel,
    calls,
    first_user_text,
    ours,
    subagent,
)

from openprose import prompts
from openprose.engine import ScriptedProvider, runner
from openprose.language import compile_or_raise
from openprose.state import open_store

PROGRAM = """\
input topic: "What the note is about"
block polish(text):
  let polished = session "Polish {text}"
let draft = session "Draft a note about {topic}"
if **the draft needs facts**:
  let facts = session "Find facts for the draft"
    context: draft
else:
  let tone = session "Fix the tone of the draft"
loop until **the note is good** (max: 3):
  session "Improve the note"
parallel:
  spelling = session "Check the spelling"
  style = session "Check the style"
do polish(draft)
output final = session "Write the final note"
  context: { draft, spelling, style }
"""
SCRIPT = dict(REFERENCE_SCRIPT, conditions=[
    {"match": "needs facts", "verdicts": [True], "reason": "it has none"},
    {"match": "is good", "verdicts": [False, True], "reason": "judged"}])
Step = Callable[[str, list[Call]], list[Block]]


def _eid(history: list[Call]) -> int:
    return int(next(c for c in reversed(history) if c.name == "push_frame")
               .data["execution_id"])


#: What a model following the embodied spec does, turn by turn (sessions go to subagents).
STEPS: list[Step] = [
    lambda vm, h: [ours("spawn_session", vm_token=vm, statement="2")],
    # a careless step: the else branch before the verdict (refused, naming what is next)
    lambda vm, h: [ours("spawn_session", vm_token=vm, statement="3.else.0")],
    lambda vm, h: [ours("record_verdict", vm_token=vm, statement="3.if0", value=True,
                        reason="it has none")],
    lambda vm, h: [ours("spawn_session", vm_token=vm, statement="3.b0.0")],
    lambda vm, h: [ours("record_verdict", vm_token=vm, statement="4", value=False,
                        reason="judged", iteration=0)],
    lambda vm, h: [ours("spawn_session", vm_token=vm, statement="4.0")],
    lambda vm, h: [ours("record_verdict", vm_token=vm, statement="4", value=True,
                        reason="judged", iteration=1)],
    lambda vm, h: [ours("spawn_session", vm_token=vm, statement="5|0"),
                   ours("spawn_session", vm_token=vm, statement="5|1")],
    lambda vm, h: [ours("push_frame", vm_token=vm, block="polish",
                        args_from={"text": "draft"}, statement="6")],
    lambda vm, h: [ours("spawn_session", vm_token=vm, statement="polish.0",
                        execution_id=_eid(h))],
    lambda vm, h: [ours("pop_frame", vm_token=vm, execution_id=_eid(h))],
    lambda vm, h: [ours("spawn_session", vm_token=vm, statement="7")],
    lambda vm, h: [ours("complete_run", vm_token=vm)],
]


class EmbodiedModel(HostModel):
    """The main agent: activate the skill, read the spec with get_instructions, start the
    run, then :data:`STEPS`; each granted session goes to a subagent (a parallel block's
    together). Subagents are :class:`HostModel`'s."""

    def __init__(self, program: str, inputs: dict[str, str]) -> None:
        super().__init__("embodied", program, inputs)

    def __call__(self, body: dict) -> Reply:
        if SESSION_MARK in first_user_text(body) or not calls(body) \
                or calls(body)[-1].name not in ("Skill", "get_instructions"):
            return super().__call__(body)
        if calls(body)[-1].name == "Skill":
            return Reply([ours("get_instructions", mode="embodied")])
        return Reply([ours("start_run", program=self.program, inputs=self.inputs)])

    def embodied(self, history: list[Call], vm_token: str) -> Reply:
        last = history[-1]
        turn = [c for c in history if c.turn == last.turn]
        granted = [c for c in turn if c.name == "spawn_session" and "session_token" in c.data]
        if last.name == "spawn_session" and granted:
            return Reply([subagent(c.data["session_token"], c.input["statement"], self.agent)
                          for c in granted])
        if last.name == "complete_run":
            return Reply([text(f"The program finished: {last.data.get('status')}.")])
        started = next(c.turn for c in history if c.name == "start_run")
        done = len({c.turn for c in history if c.turn > started and c.name != "Agent"})
        return Reply(STEPS[done](vm_token, history))


def _bindings(root: Path) -> dict[tuple[str, Any], str]:
    with open_store(root, "filesystem") as store:
        (run_dir,) = list((root / ".prose" / "runs").iterdir())
        run = store.open_run(run_dir.name)
        assert run.status == "completed", run.status
        return {(b.name, b.execution_id): b.value for b in run.bindings()}


def test_an_embodied_run_in_claude_code_is_followed_and_equals_prose_run(tmp_path: Path
                                                                        ) -> None:
    project = tmp_path / "project"
    (project / "examples").mkdir(parents=True)
    (project / "examples" / "note.prose").write_text(PROGRAM)
    model = EmbodiedModel("examples/note.prose", {"topic": "tides"})
    ask = "prose run examples/note.prose topic=tides (embodied: be the VM yourself)"
    with FakeMessagesAPI(model) as api:
        result = run_claude(["-p", ask, "--plugin-dir", str(PLUGIN_DIR), "--output-format",
                             "json", "--allowedTools", f"{TOOL_PREFIX.rstrip('_')},Agent"],
                            tmp_path / "home", project, api.url, timeout=420)
    assert result.returncode == 0, result.stdout + result.stderr
    assert api.errors == []
    assert json.loads(result.stdout)["result"] == "The program finished: completed."

    main = [b for b in model.bodies if SESSION_MARK not in first_user_text(b)]
    history = calls(main[-1])
    spec = next(c for c in history if c.name == "get_instructions")
    assert prompts.load("run-tools").splitlines()[0] in (spec.result or "")
    refused = [c for c in history if "refused (rule:" in (c.result or "")]
    assert len(refused) == 1 and refused[0].input["statement"] == "3.else.0"
    assert "next: record_verdict 3.if0 iteration 0" in (refused[0].result or "")
    launches = [sum(1 for c in history if c.turn == turn and c.name == "Agent")
                for turn in sorted({c.turn for c in history})]
    assert sorted(n for n in launches if n) == [1, 1, 1, 1, 1, 2]  # parallel: together

    reference = tmp_path / "reference"
    job = runner.Job(source=PROGRAM, file="examples/note.prose",
                     program=compile_or_raise(PROGRAM, "note.prose"), project_root=reference,
                     inputs={"topic": "tides"})
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(SCRIPT)))
    assert outcome.status == "completed", outcome.error
    assert _bindings(project) == _bindings(reference)
