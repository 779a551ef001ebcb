"""One brief for every mode (issue 23): the Anthropic provider, sampling and a host's
subagent (guided, embodied) are told the same role, task, context and attempt (issue 25: a
retried session says which attempt it is and what failed before)."""

from __future__ import annotations

from openprose.engine import ContextItem, SessionRequest
from openprose.engine.anthropic_provider import SESSION_TOOLS as ANTHROPIC
from openprose.engine.briefs import brief_of, full_text, system_text, task_text
from openprose.mcp_server.briefing import HOST_TOOLS
from openprose.mcp_server.sampling import SESSION_TOOLS as SAMPLING

RETRIED = SessionRequest(
    key="s", prompt="Fetch the page", system="You fetch pages carefully.", agent="fetcher",
    binding="page", context=(ContextItem("url", "https://example.org", "bindings/url.md",
                                         "input"),),
    attempt=3, failures=("timeout\nafter 30 s", "HTTP 503 " + "x" * 1000))


def test_every_mode_tells_the_same_role_task_and_attempt() -> None:
    brief = brief_of(RETRIED, run="r1")
    assert brief.failures[0] == "timeout after 30 s" and len(brief.failures[1]) < 320
    for tools in (ANTHROPIC, SAMPLING, HOST_TOOLS):
        system, task = system_text(brief, tools), task_text(brief, tools)
        assert "You fetch pages carefully." in system and "agent 'fetcher'" in system
        assert "This is attempt 3" in system and "attempt 1: timeout after 30 s" in system
        assert "attempt 2: HTTP 503" in system and tools.finish in system
        assert task.startswith("Fetch the page")
        assert ("url: bindings/url.md (input, 19 chars)" in task) == (tools.read is not None)


def test_a_first_attempt_says_nothing_of_attempts() -> None:
    first = brief_of(SessionRequest(key="s", prompt="Go"))
    assert "attempt" not in full_text(first, HOST_TOOLS).lower()
