"""Merging a ``session``/``resume`` statement with its agent's properties.

The session's ``model`` overrides the agent's; a session prompt replaces the agent's prompt,
which then becomes system context; retry, backoff and context fall back to the agent's.
"""

from __future__ import annotations

from dataclasses import dataclass

from openprose.engine.errors import ValueFault
from openprose.language import nodes as n
from openprose.language.analysis import persist_scope


@dataclass(frozen=True, slots=True)
class SessionShape:
    prompt: n.String | None
    system: n.String | None
    model: str | None
    context: n.Node | None
    retries: int
    backoff: str
    persist: str | None
    skills: tuple[str, ...]


def shape(session: n.Session, agents: dict[str, n.AgentDef]) -> SessionShape:
    agent = None
    if session.agent is not None:
        agent = agents.get(session.agent)
        if agent is None:
            raise ValueFault(f"undefined agent '{session.agent}'")

    def prop(name: str) -> n.Node | None:
        own = session.property(name)
        if own is not None:
            return own.value
        inherited = agent.property(name) if agent is not None else None
        return inherited.value if inherited is not None else None

    own_prompt = session.prompt
    if own_prompt is None and session.property("prompt") is not None:
        own_prompt = _string(session.property("prompt").value)
    agent_prompt = agent.property("prompt") if agent is not None else None
    agent_text = _string(agent_prompt.value) if agent_prompt is not None else None
    prompt, system = (own_prompt, agent_text) if own_prompt is not None else (agent_text, None)

    persist_node = agent.property("persist") if agent is not None else None
    return SessionShape(
        prompt=prompt,
        system=system,
        model=_word(prop("model")),
        context=prop("context"),
        retries=int(_number(prop("retry"))),
        backoff=_word(prop("backoff")) or "none",
        persist=persist_scope(persist_node.value) if persist_node is not None else None,
        skills=_strings(prop("skills")),
    )


def _string(node: n.Node) -> n.String | None:
    return node if isinstance(node, n.String) else None


def _word(node: n.Node | None) -> str | None:
    if isinstance(node, n.Name):
        return node.id
    if isinstance(node, n.String):
        return node.text
    return None


def _number(node: n.Node | None) -> float:
    return node.value if isinstance(node, n.Number) else 0


def _strings(node: n.Node | None) -> tuple[str, ...]:
    if isinstance(node, n.Array):
        return tuple(item.text for item in node.items if isinstance(item, n.String))
    return ()
