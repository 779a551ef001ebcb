"""Refusals: a tool call that breaks a rule is answered with the rule, the statement and the
line, in the text the host model reads. Nothing was written when a refusal is raised."""

from __future__ import annotations

from mcp.server.mcpserver.exceptions import ToolError

from openprose.mcp_server.outline import Statement


class Refusal(ToolError):
    """``refused (rule: RULE): DETAIL [statement ID, line N]``."""

    def __init__(self, rule: str, detail: str, statement: Statement | None = None) -> None:
        where = f" [statement {statement.id}, line {statement.line}]" if statement else ""
        super().__init__(f"refused (rule: {rule}): {detail}{where}")
        self.rule = rule
