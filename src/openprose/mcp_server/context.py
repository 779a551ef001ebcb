"""The server context every tool module is registered with: ``register(mcp, ctx)``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mcp.server.mcpserver import Context

from openprose.mcp_server.resources import RunCatalog
from openprose.mcp_server.runs import DrivenRun, RunRegistry
from openprose.mcp_server.updates import RunUpdates
from openprose.mcp_server.watch import RunWatcher


class Mode(Protocol):
    """What a run mode other than ``host`` adds (``guided`` registers one in ``ctx.modes``).
    Each hook is called after the server's own checks and writes for the call succeeded."""

    async def started(self, ctx: ServerContext, driven: DrivenRun) -> str | None:
        """A run was started in this mode; the text returned is appended to the reply."""

    async def resumed(self, ctx: ServerContext, driven: DrivenRun, client: Context
                      ) -> str | None:
        """The run was resumed (fresh VM token issued); the text is appended to the reply."""


class SessionRoute(Protocol):
    """Session tokens the state layer does not know (a guided run's ``gs_`` tokens): the
    session tools hand them to the route that owns them."""

    def owns(self, token: str) -> bool: ...

    async def brief(self, token: str) -> Any:
        """get_brief: returns the tool's result."""

    def binding(self, token: str) -> str | None:
        """The binding ``token``'s session writes (None: an anonymous one), pending or
        written; refused when the token is unknown."""

    async def write(self, token: str, value: str, summary: str | None) -> Any:
        """write_binding: returns the tool's result."""

    async def read(self, token: str, name: str, offset: int, limit: int) -> Any:
        """read_binding: returns the tool's result."""

    async def fail(self, token: str, error: str, retryable: bool) -> Any:
        """fail_session: returns the tool's result."""

    async def read_memory(self, token: str) -> str | None: ...

    async def write_memory(self, token: str, text: str) -> None: ...

    async def memory_owner(self, token: str) -> tuple[str, str]:
        """read_memory/write_memory name the agent and where its memory lives."""


@dataclass
class ServerContext:
    project_root: Path
    catalog: RunCatalog
    updates: RunUpdates
    registry: RunRegistry
    modes: dict[str, Mode] = field(default_factory=dict)
    watcher: RunWatcher | None = None
    session_routes: list[SessionRoute] = field(default_factory=list)
    default_backend: str = "filesystem"  # prose serve --state
    workers: bool = False  # prose serve --workers: run_program queues runs for workers

    def session_route(self, token: str) -> SessionRoute | None:
        """The route owning ``token`` when it is not a state-layer session token."""
        return next((route for route in self.session_routes if route.owns(token)), None)

    def outside_writes(self, run_id: str) -> list[str]:
        if self.watcher is None:
            return []
        return [report.line() for report in self.watcher.reports(run_id)]

    async def changed(self, run_id: str, bindings: Iterable[str] = ()) -> None:
        """Tell subscribers that ``run_id`` (and the named bindings) changed."""
        await self.updates.changed(run_id, list(bindings))
