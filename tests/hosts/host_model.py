"""A scripted "host model" for Claude Code that follows the open-prose skill: the main agent
activates the skill, starts the run with our tools and hands every session's handle to a
subagent (Claude Code's ``Agent`` tool, all of a parallel block's sessions in one message); each
subagent reads its brief with ``get_brief``, its context with ``read_binding`` and writes its
own binding with ``write_binding``.

The policy is a function of the request alone (Claude Code resends the whole conversation each
turn), so it works however the host interleaves its main agent and subagents. A session's
answer is ``result: <first line of its task>``, which :data:`REFERENCE_SCRIPT` gives the
scripted provider too, so ``prose run`` of the same program leaves the same bindings."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.hosts.claude_code import TOOL_PREFIX
from tests.hosts.fake_messages import Block, Reply, text, tool_use

#: The same answers for ``prose run`` on the scripted provider.
REFERENCE_SCRIPT = {"sessions": [{"match": r"\A([^\n]*)", "output": r"result: \1"}]}
#: The plugin's agent type for sessions (skill/agents/session.md).
SESSION_AGENT = "openprose:session"
#: How the skill tells the main agent to start a session's subagent (both modes).
SESSION_MARK = "OpenProse session: call get_brief(token="


def answer(task: str) -> str:
    return f"result: {task.strip().splitlines()[0]}"


@dataclass
class Call:
    """One tool use of the conversation and the text of its result."""

    name: str
    input: dict[str, Any]
    result: str | None
    turn: int  # index of the assistant message that made it

    @property
    def data(self) -> dict[str, Any]:
        """The result as the model got it: Claude Code passes an MCP tool's structured
        content (JSON) when it has one."""
        try:
            found = json.loads(self.result or "")
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content
                     if isinstance(block, dict) and block.get("type") == "text")


def first_user_text(body: dict) -> str:
    return next(_texts(m["content"]) for m in body["messages"] if m["role"] == "user")


def calls(body: dict) -> list[Call]:
    """The tool uses of the conversation, in order, with their results' text."""
    results: dict[str, str] = {}
    for message in body["messages"]:
        if message["role"] == "user" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    results[block["tool_use_id"]] = _texts(block.get("content") or "")
    found: list[Call] = []
    turns = [m for m in body["messages"] if m["role"] == "assistant"]
    for turn, message in enumerate(turns):
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block.get("type") == "tool_use":
                name = block["name"].removeprefix(TOOL_PREFIX)
                found.append(Call(name, block["input"], results.get(block["id"]), turn))
    return found


def ours(tool: str, **arguments: Any) -> Block:
    return tool_use(TOOL_PREFIX + tool, arguments)


def subagent(token: str, name: str, agent: str = SESSION_AGENT) -> Block:
    """The main agent's hand-over: the handle's token, never a brief."""
    prompt = f'{SESSION_MARK}"{token}") and do what the brief says.'
    return tool_use("Agent", {"description": f"OpenProse session {name}", "prompt": prompt,
                              "subagent_type": agent, "run_in_background": False})


class HostModel:
    """The fake model's policy for ``mode`` ("guided" or "embodied") running ``program``."""

    def __init__(self, mode: str, program: str, inputs: dict[str, str],
                 sessions: dict[str, tuple[str, list[str]]] | None = None,
                 agent: str = SESSION_AGENT) -> None:
        self.mode = mode
        self.agent = agent  # the subagent type sessions are handed to
        self.program = program
        self.inputs = inputs
        #: embodied: what the model reads in the program — binding → (prompt, context)
        self.sessions = sessions or {}
        self.bodies: list[dict] = []

    def __call__(self, body: dict) -> Reply:
        self.bodies.append(body)
        if SESSION_MARK in first_user_text(body):
            return self.session(body)
        history = calls(body)
        if not history:
            return Reply([tool_use("Skill", {"skill": "openprose:open-prose",
                                             "args": f"run {self.program}"})])
        if history[-1].name == "Skill":
            mode = {"mode": "guided"} if self.mode == "guided" else {}
            return Reply([ours("start_run", program=self.program, inputs=self.inputs, **mode)])
        vm_token = _vm_token(history)
        if self.mode == "guided":
            return self.guided(history, vm_token)
        return self.embodied(history, vm_token)

    # ------------------------------------------------------------------ the main agent

    def guided(self, history: list[Call], vm_token: str) -> Reply:
        last = history[-1]
        if last.name != "next_step":
            return Reply([ours("next_step", vm_token=vm_token, wait_s=10)])
        step = last.data
        if step.get("status") != "running":
            return Reply([text(f"The program finished: {step.get('status')}.")])
        pending = step.get("pending", [])
        sessions = [item for item in pending if item["kind"] == "session"]
        if sessions:
            assert all(len(json.dumps(item)) <= 300 for item in sessions), sessions
            return Reply([subagent(item["token"], item["binding"], self.agent)
                          for item in sessions])
        if pending:
            return Reply([ours("submit_verdict", token=item["token"], value=True,
                               reason="it holds") for item in pending])
        return Reply([ours("next_step", vm_token=vm_token, wait_s=10)])

    def embodied(self, history: list[Call], vm_token: str) -> Reply:
        """Walk the outline of ``start_run``: each session statement is spawned, then handed
        to a subagent; a parallel block's branches are spawned together and their subagents
        launched in one message; complete_run at the end."""
        started = next(c.data for c in history if c.name == "start_run")
        outline = [entry for entry in started["outline"] if entry["kind"] == "session"]
        last = history[-1]
        if last.name == "spawn_session":
            spawned = [c for c in history if c.turn == last.turn]
            return Reply([subagent(c.data["session_token"], c.input["statement"], self.agent)
                          for c in spawned])
        if last.name == "complete_run":
            return Reply([text(f"The program finished: {last.data.get('status')}.")])
        done = {c.input["statement"] for c in history if c.name == "spawn_session"}
        todo = [entry for entry in outline if entry["id"] not in done]
        if not todo:
            return Reply([ours("complete_run", vm_token=vm_token)])
        group = [e for e in todo if e.get("parent") == todo[0].get("parent")] \
            if todo[0].get("parent") else todo[:1]  # a parallel block's branches together
        return Reply([ours("spawn_session", vm_token=vm_token, statement=entry["id"],
                           prompt=self.sessions[entry["binds"]][0],
                           context=self.sessions[entry["binds"]][1]) for entry in group])

    # ------------------------------------------------------------------ a subagent

    def session(self, body: dict) -> Reply:
        """Read the brief, then the context it names, write the binding, confirm in one
        line."""
        handed = re.search(r'get_brief\(token="([^"]+)"\)', first_user_text(body))
        assert handed, f"not a session hand-over: {first_user_text(body)[:300]}"
        token = handed.group(1)
        history = calls(body)
        briefs = [c for c in history if c.name == "get_brief"]
        if not briefs:
            return Reply([ours("get_brief", token=token)])
        work = read_brief(briefs[0].data)
        assert work.token == token, f"not a brief: {briefs[0].result}"
        if work.context and not any(c.name == "read_binding" for c in history):
            return Reply([ours("read_binding", token=token, name=name) for name in work.context])
        if not any(c.name == "write_binding" for c in history):
            return Reply([ours("write_binding", token=token, value=answer(work.task),
                               summary="done")])
        return Reply([text("Written.")])


@dataclass(frozen=True)
class SessionWork:
    """What a session's brief asks of whoever does it."""

    token: str
    task: str
    context: list[str]  # the bindings to read first


def read_brief(brief: dict[str, Any]) -> SessionWork:
    """The session token, the task and the context names ``get_brief`` gave (as JSON)."""
    assert "token" in brief and "task" in brief, f"not a session brief: {str(brief)[:300]}"
    return SessionWork(brief["token"], brief["task"],
                       [entry["name"] for entry in brief.get("context", [])])


def _vm_token(history: list[Call]) -> str:
    started = next(c for c in history if c.name == "start_run")
    assert "vm_token" in started.data, f"start_run gave no vm_token: {started.result}"
    return str(started.data["vm_token"])
