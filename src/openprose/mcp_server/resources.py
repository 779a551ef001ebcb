"""Read-only MCP resources over a project's runs, through :mod:`openprose.state` only.

    prose://runs                            recent runs (JSON: id, status, program, backend, uris)
    prose://runs/{run_id}/state             the run's state.md (every backend renders one)
    prose://runs/{run_id}/program           the program source the run was started from
    prose://runs/{run_id}/bindings/{name}   a binding's value; ``name@N`` names the binding
                                            ``name`` made inside block execution ``N``

A binding is read exactly as stored (no scope-chain walk: the URI names one binding). A URI
naming no run or binding is refused with a one-line reason naming the run and the binding.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from openprose.state import (
    BackendUnavailable,
    BindingRef,
    NotFoundError,
    Run,
    StateError,
    StateStore,
    open_store,
    postgres_url,
)
from openprose.state.render import render_view
from openprose.state.view import view_of_run

RECENT_RUNS = 50


def parse_binding_name(text: str) -> BindingRef:
    """``name`` or ``name@N`` (N a block execution id) as a binding reference."""
    name, at, execution = text.partition("@")
    if not at:
        return BindingRef(name)
    if not execution.isdigit() or int(execution) < 1:
        raise ResourceNotFoundError(f"binding {text!r}: the part after '@' must be an execution id "
                            "(a positive integer)")
    return BindingRef(name, int(execution))


class RunCatalog:
    """The project's state stores, opened lazily, and the runs they hold (any backend)."""

    def __init__(self, project_root: str | Path, *, home: str | Path | None = None) -> None:
        self.project_root = Path(project_root).resolve()
        self.home = home
        self._stores: dict[str, StateStore] = {}
        self._lock = threading.Lock()

    def backends(self) -> tuple[str, ...]:
        names = ("filesystem", "sqlite")
        return (*names, "postgres") if postgres_url(self.project_root) else names

    def opened(self) -> list[StateStore]:
        """The stores opened so far."""
        with self._lock:
            return list(self._stores.values())

    def store(self, backend: str) -> StateStore:
        with self._lock:
            store = self._stores.get(backend)
            if store is None:
                store = open_store(self.project_root, backend, home=self.home)
                self._stores[backend] = store
            return store

    def _available(self) -> list[StateStore]:
        stores = []
        for backend in self.backends():
            try:
                stores.append(self.store(backend))
            except (BackendUnavailable, StateError):
                continue
        return stores

    def open(self, run_id: str) -> Run:
        """The run ``run_id`` from whichever store holds it."""
        for store in self._available():
            try:
                return store.open_run(run_id)
            except NotFoundError:
                continue
            except StateError as exc:
                raise ResourceNotFoundError(f"run {run_id}: {exc}") from exc
        raise ResourceNotFoundError(f"run {run_id} does not exist in this project")

    def recent(self, limit: int = RECENT_RUNS) -> list[dict[str, object]]:
        seen: dict[str, dict[str, object]] = {}
        for store in self._available():
            try:
                infos = store.list_runs()
            except StateError:
                continue
            for info in infos:
                seen.setdefault(info.id, {
                    "id": info.id, "status": info.status, "program": info.program_path,
                    "backend": store.kind, "started": info.started, "updated": info.updated,
                    "state": f"prose://runs/{info.id}/state",
                })
        runs = sorted(seen.values(), key=lambda run: str(run["started"]), reverse=True)
        return runs[:limit]

    @contextmanager
    def reading(self, run_id: str) -> Iterator[Run]:
        """``run_id`` opened for a read; a run no longer running is released after it (a
        client may read any number of old runs)."""
        run = self.open(run_id)
        try:
            yield run
        finally:
            if run.status != "running":
                self.release(run_id)

    def state(self, run_id: str) -> str:
        """The run's state.md; rendered now if the run has none yet (a run started by a
        host, or by an openprose that did not render for this backend)."""
        with self.reading(run_id) as run:
            return run.state_text() or render_view(view_of_run(run))

    def program(self, run_id: str) -> str:
        with self.reading(run_id) as run:
            return run.program_source

    def binding(self, run_id: str, name: str) -> str:
        ref = parse_binding_name(name)
        with self.reading(run_id) as run:
            try:
                return run.read_binding(ref).value
            except StateError as exc:
                raise ResourceNotFoundError(str(exc)) from exc

    def release(self, run_id: str) -> None:
        """Close what the opened stores hold for ``run_id`` (a run that ended here): a
        long-lived server's descriptors stay flat however many runs it serves."""
        for store in self.opened():
            store.release(run_id)

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()


def register(mcp: MCPServer, catalog: RunCatalog,
             outside_writes: Callable[[str], list[str]] | None = None) -> None:
    """Add the run resources to ``mcp``, reading through ``catalog``. ``outside_writes(run_id)``
    (the watcher's reports as lines) is appended to a run's state when it has any."""

    @mcp.resource("prose://runs", name="runs", mime_type="application/json",
                  description="Recent runs of this project, newest first, with their status.")
    def runs() -> str:
        return json.dumps({"runs": catalog.recent()}, indent=1)

    @mcp.resource("prose://runs/{run_id}/state", name="run-state", mime_type="text/markdown",
                  description="A run's state.md: the program annotated with where execution "
                              "is and which bindings exist.")
    def run_state(run_id: str) -> str:
        text = catalog.state(run_id)
        lines = outside_writes(run_id) if outside_writes is not None else []
        if lines:
            text = "\n".join([text.rstrip("\n"), "", "## Outside writes", "",
                              *(f"- {line}" for line in lines), ""])
        return text

    @mcp.resource("prose://runs/{run_id}/program", name="run-program", mime_type="text/plain",
                  description="The program source a run was started from.")
    def run_program(run_id: str) -> str:
        return catalog.program(run_id)

    @mcp.resource("prose://runs/{run_id}/bindings/{name}", name="run-binding",
                  mime_type="text/markdown",
                  description="A binding's value. NAME is a root binding; NAME@N is the "
                              "binding NAME made inside block execution N.")
    def run_binding(run_id: str, name: str) -> str:
        return catalog.binding(run_id, name)
