"""The server context every tool module is registered with: ``register(mcp, ctx)``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from openprose.mcp_server.resources import RunCatalog
from openprose.mcp_server.runs import DrivenRun, Pending, RunRegistry
from openprose.mcp_server.updates import RunUpdates
from openprose.mcp_server.watch import RunWatcher
from openprose.state import Binding


class Mode(Protocol):
    """What a run mode other than ``host`` adds (``guided`` registers one in ``ctx.modes``).
    Each hook is called after the server's own checks and writes for the call succeeded."""

    async def started(self, ctx: ServerContext, driven: DrivenRun,
                      options: dict[str, Any]) -> str | None:
        """A run was started in this mode; the text returned is appended to the reply."""

    async def session_written(self, ctx: ServerContext, driven: DrivenRun, pending: Pending,
                              binding: Binding) -> None:
        """A session of a run in this mode wrote its binding (with its session token)."""

    async def resumed(self, ctx: ServerContext, driven: DrivenRun) -> str | None:
        """The run was resumed (fresh VM token issued); the text is appended to the reply."""


@dataclass
class ServerContext:
    project_root: Path
    catalog: RunCatalog
    updates: RunUpdates
    registry: RunRegistry
    modes: dict[str, Mode] = field(default_factory=dict)
    watcher: RunWatcher | None = None

    def outside_writes(self, run_id: str) -> list[str]:
        if self.watcher is None:
            return []
        return [report.line() for report in self.watcher.reports(run_id)]

    async def changed(self, run_id: str, bindings: Iterable[str] = ()) -> None:
        """Tell subscribers that ``run_id`` (and the named bindings) changed."""
        await self.updates.changed(run_id, list(bindings))
