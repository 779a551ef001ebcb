"""One driver per run: the lock a process holds while it executes a run.

Two processes driving one run would start every remaining session twice. So whoever drives a
run (``prose run``, ``prose resume``, the MCP server) first takes its driver lock; a second
driver is refused at once with :class:`RunLocked`, which names the holder. The lock is one the
operating system or the database ends with its holder, however the holder dies: ``flock`` on
``.prose/locks/{id}.lock`` (filesystem and SQLite), a session-level advisory lock on a
connection of its own (PostgreSQL).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass

from openprose.state.errors import StateError
from openprose.state.models import utc_now


@dataclass(frozen=True, slots=True)
class DriverHolder:
    """Who holds a run's driver lock: a process on a host, since a moment (UTC)."""

    pid: int
    host: str
    since: str

    @classmethod
    def this_process(cls) -> DriverHolder:
        return cls(os.getpid(), socket.gethostname(), utc_now())

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.since}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> DriverHolder | None:
        """The holder written by :meth:`to_json`; None for anything else (a damaged
        file)."""
        try:
            data = json.loads(text)
            return cls(int(data["pid"]), str(data["host"]), str(data["since"]))
        except (ValueError, TypeError, KeyError):
            return None


class RunLocked(StateError):
    """Another process drives this run; ``holder`` is who (None when it cannot be told)."""

    def __init__(self, run_id: str, holder: DriverHolder | None) -> None:
        who = holder.describe() if holder is not None else "another process"
        super().__init__(f"run {run_id} is being driven by {who}; wait for it to end, or stop "
                         "that process, then resume")
        self.run_id = run_id
        self.holder = holder


class DriverLock:
    """A held driver lock. Release it with :meth:`release` or by leaving a ``with`` block;
    it also ends when the process does."""

    def __init__(self, run_id: str, holder: DriverHolder, release: Callable[[], None]) -> None:
        self.run_id = run_id
        self.holder = holder
        self._release: Callable[[], None] | None = release

    @property
    def held(self) -> bool:
        return self._release is not None

    def release(self) -> None:
        """Let another driver take the run (a second call does nothing)."""
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> DriverLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"DriverLock({self.run_id!r}, {self.holder.describe()}, {state})"
