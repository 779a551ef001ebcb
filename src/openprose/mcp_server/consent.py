"""Consent over MCP: a delegated run's ``prompt`` permissions asked of the person behind the
client, through elicitation, while ``run_program`` waits for the run.

Only a client that declares elicitation is asked, and only while its ``run_program`` call is
in flight (``wait=true``); otherwise nobody can answer, and the command is refused with one
line naming the setting that allows it (see :mod:`openprose.engine.permissions`)."""

from __future__ import annotations

from typing import Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from openprose.engine.permissions import Consent, ConsentRequest, shown


class ConsentAnswer(BaseModel):
    answer: Literal["yes", "no", "always"] = Field(
        description="yes: this once; no: refuse it; always: this agent, for the rest of "
                    "this run")


def elicit_consent(context: Context) -> Consent | None:
    """Ask through ``context``'s client, or ``None`` when it cannot be asked."""
    caps = context.client_capabilities
    if caps is None or caps.elicitation is None:
        return None

    async def consent(request: ConsentRequest) -> str | None:
        what = (f"run the shell command: {shown(request.subject)}" if request.tool == "bash"
                else "use the network (web search and fetch)")
        statement = request.statement.strip().splitlines()[0] if request.statement else ""
        message = (f"OpenProse: agent '{request.agent}' wants to {what}"
                   + (f"\n(statement: {statement})" if statement else ""))
        try:
            result = await context.elicit(message, ConsentAnswer)
        except Exception:  # no back-channel (a stateless client), or the client went away
            return None
        if result.action == "accept" and isinstance(result.data, ConsentAnswer):
            return result.data.answer
        return "no" if result.action == "decline" else None

    return consent
