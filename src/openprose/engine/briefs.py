"""Session briefs: what one session is told, built in one place for every mode.

A :class:`Brief` holds the parts of a session's instructions — the task, the agent and its
role, the context it may read (names, kinds and sizes, never values), whether it keeps memory,
its skills and permissions, and which attempt it is with what failed before. Each way of running
a session renders the same brief with its own :class:`Tools` (how that runner reads context,
keeps memory and finishes): the Anthropic agent loop, the client's model through sampling, and
a host's subagent that reads the brief with ``get_brief`` in guided and embodied runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openprose.engine.permissions import brief_permissions
from openprose.engine.provider import SessionRequest

#: Characters of one earlier failure a retried session is told.
FAILURE_CHARS = 300
#: The models a host's subagent can be started on (Claude Code's ``Agent`` tool, ``model``):
#: the program's aliases.
HOST_MODELS = ("sonnet", "opus", "haiku")


def host_model(model: str | None) -> str | None:
    """The subagent model a session's ``model`` asks for: its alias, or the alias of a full
    model id (``claude-opus-5-5`` is ``opus``); ``None`` when it names none of them."""
    if not model:
        return None
    return next((alias for alias in HOST_MODELS if alias in model.lower()), None)


@dataclass(frozen=True, slots=True)
class ContextEntry:
    """A binding the session may read: its name, kind, size and where it is stored, never
    its value."""

    name: str
    kind: str
    size: int
    location: str = ""


@dataclass(frozen=True, slots=True)
class Brief:
    """Everything a session is told. ``permissions`` is filled by the run's permission rules
    (absent: the host's own defaults apply)."""

    task: str
    binding: str = ""
    agent: str = ""
    role: str = ""
    model: str | None = None
    skills: tuple[str, ...] = ()
    context: tuple[ContextEntry, ...] = ()
    persistent: bool = False
    attempt: int = 1
    failures: tuple[str, ...] = ()
    permissions: Mapping[str, Any] | None = None
    run: str = ""


@dataclass(frozen=True, slots=True)
class Tools:
    """How one kind of runner reaches the session's capability, in words: ``read`` (how to
    read context; ``None`` when it is inlined), ``memory`` (what a persistent agent does;
    ``None`` when memory is handled for it) and ``finish``."""

    read: str | None
    memory: str | None
    finish: str


def brief_of(request: SessionRequest, run: str = "") -> Brief:
    """The brief of one engine session attempt."""
    return Brief(
        task=request.prompt.strip(), binding=request.binding or "", agent=request.agent or "",
        role=(request.system or "").strip(), model=request.model, skills=request.skills,
        context=tuple(ContextEntry(item.name, item.kind, len(item.text), item.location)
                      for item in request.context),
        persistent=request.persistent, attempt=request.attempt,
        failures=tuple(short_failure(error) for error in request.failures),
        permissions=brief_permissions(request.permissions), run=run)


def attempt_note(brief: Brief) -> str:
    """What a retried session is told about the attempts before it ("" on the first)."""
    if brief.attempt <= 1:
        return ""
    failed = "; ".join(f"attempt {i}: {error}"
                       for i, error in enumerate(brief.failures, start=1))
    return (f"This is attempt {brief.attempt}. "
            + (f"Earlier attempts failed — {failed}. Avoid what made them fail."
               if failed else "An earlier attempt failed."))


def system_text(brief: Brief, tools: Tools) -> str:
    """Who the session is and how it works: role, model, skills, permissions, attempt,
    memory and how to finish."""
    where = f" (run {brief.run})" if brief.run else ""
    makes = f", producing '{brief.binding}'" if brief.binding else ""
    lines = [f"You are one session of an OpenProse program{where}{makes}."]
    if brief.agent:
        lines.append(f"You act as the agent '{brief.agent}'"
                     + (f" (model {brief.model})" if brief.model else "") + ".")
    elif brief.model:
        lines.append(f"Preferred model: {brief.model}.")
    if brief.role and brief.role != brief.task:
        lines += ["Your role:", brief.role]
    if brief.skills:
        lines.append("Skills to use: " + ", ".join(brief.skills) + ".")
    if brief.permissions:
        lines.append("Permissions: " + "; ".join(f"{key}: {value}"
                                                for key, value in brief.permissions.items()))
    note = attempt_note(brief)
    if note:
        lines.append(note)
    if brief.persistent and tools.memory:
        lines.append(tools.memory)
    lines.append(tools.finish)
    return "\n".join(lines)


def task_text(brief: Brief, tools: Tools) -> str:
    """The task, and the context to read (by name; the runner reads what it needs)."""
    parts = [brief.task]
    if brief.context and tools.read:
        parts.append(f"Context ({tools.read}):\n" + "\n".join(
            f"- {entry.name}" + (f": {entry.location}" if entry.location else "")
            + f" ({entry.kind + ', ' if entry.kind else ''}{entry.size} chars)"
            for entry in brief.context))
    return "\n\n".join(parts)


def full_text(brief: Brief, tools: Tools) -> str:
    """The whole brief as one text: the task first, then how to work and finish."""
    return f"Your task:\n\n{task_text(brief, tools)}\n\n{system_text(brief, tools)}"


def short_failure(text: str) -> str:
    """One earlier failure as a retried session is told it: one line, at most
    :data:`FAILURE_CHARS` characters."""
    text = " ".join(text.split())
    return text if len(text) <= FAILURE_CHARS else text[:FAILURE_CHARS] + " …"
