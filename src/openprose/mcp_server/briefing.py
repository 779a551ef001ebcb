"""Briefs of the sessions a host's subagents run (guided and embodied runs).

The VM (the host's main agent) gets a short handle per session — binding, agent, token and
:data:`START` — and passes it on; the session subagent reads its brief with ``get_brief``. So
the agent's role, the task and the context list cost the main agent's context nothing, however
long they are. The brief itself is built by :mod:`openprose.engine.briefs`, as in every mode.
"""

from __future__ import annotations

from mcp_types import CallToolResult

from openprose.engine.briefs import Brief, Tools, full_text
from openprose.mcp_server.results import BriefContext, BriefResult, reply

#: The one line a handle carries: what the VM does with it.
START = "Start a session subagent with this token; its first call is get_brief(token)."
#: What the host does with a pending judgment (guided runs), in its structured result too.
JUDGE = ("Decide it from the bindings listed (read_binding(token, name) reads one whole), then "
         "submit_verdict(token, value, reason).")
READ = "read_binding(token, name, offset, limit)"
_MEMORY = ("You are a persistent agent: read_memory(token) first; before you finish, "
           "write_memory(token, memory) with your updated memory, compacted to what later "
           "sessions need.")
#: How a host's session subagent finishes, in every mode (the same words as
#: ``skill/agents/session.md``).
_FINISH = ("Finish with write_binding(token, value=<your complete result>, summary=<one "
           "line>), then reply with that summary line only; if you cannot do the task, call "
           "fail_session(token, error=<why>) instead.")
HOST_TOOLS = Tools(f"read what you need with {READ}", _MEMORY, _FINISH)


def start_line(model: str | None) -> str:
    """The handle's line for a session on ``model`` (a subagent model alias, or none)."""
    if model is None:
        return START
    return (f"Start a session subagent on model {model} (the Agent tool's model: {model}) with "
            "this token; its first call is get_brief(token).")


def brief_reply(brief: Brief, token: str, tools: Tools) -> CallToolResult:
    """``get_brief``'s answer: the brief's parts as structured content (what Claude Code
    shows its model) and as one text for hosts that show text."""
    context = [BriefContext(name=entry.name, kind=entry.kind or None, chars=entry.size)
               for entry in brief.context]
    result = BriefResult(
        token=token, binding=brief.binding or "(anonymous)", agent=brief.agent or None,
        model=brief.model, role=brief.role if brief.role and brief.role != brief.task else None,
        task=brief.task, context=context or None, read=READ if context else None,
        memory=tools.memory if brief.persistent else None,
        skills=list(brief.skills) or None,
        permissions=dict(brief.permissions) if brief.permissions else None,
        attempt=brief.attempt, failed_before=list(brief.failures) or None,
        finish=tools.finish)
    return reply(result, f"{full_text(brief, tools)}\ntoken: {token}", exclude_none=True)
