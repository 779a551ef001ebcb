"""Refusals: a tool call that breaks a rule is answered with the rule, the statement and the
line, in the text the host model reads. Nothing was written when a refusal is raised."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError

from openprose.errors import OpenProseError
from openprose.language.analysis import Statement
from openprose.state import (
    CapabilityError,
    DepthLimitExceeded,
    NotFoundError,
    StateError,
)


class Refusal(ToolError, OpenProseError):
    """``refused (rule: RULE): DETAIL [statement ID, line N]``."""

    def __init__(self, rule: str, detail: str, statement: Statement | None = None) -> None:
        where = f" [statement {statement.id}, line {statement.line}]" if statement else ""
        super().__init__(f"refused (rule: {rule}): {detail}{where}")
        self.rule = rule


def refuse_all(refusals: list[Refusal]) -> None:
    """Raise the first of ``refusals`` with every other one's text on its own line (a call
    that breaks several rules is told all of them at once); nothing when the list is empty."""
    if refusals:
        first = refusals[0]
        first.args = ("\n".join(str(r) for r in refusals),)
        raise first


@contextmanager
def state_errors(what: str, statement: Statement | None = None) -> Iterator[None]:
    """Refusals and errors of the state layer as tool errors naming ``what`` was attempted."""
    try:
        yield
    except CapabilityError as exc:
        raise Refusal(exc.rule, str(exc).rsplit(" (rule:", 1)[0], statement) from None
    except NotFoundError as exc:
        raise Refusal("a call names what the run has", str(exc), statement) from None
    except DepthLimitExceeded as exc:
        raise Refusal("a block's frames nest at most max_depth deep", str(exc),
                      statement) from None
    except (StateError, ValueError) as exc:
        raise ToolError(f"{what}: {exc}") from None
