"""A live progress line for terminals: current statement, sessions done, in flight (calling
the model, at most ``--max-concurrency``) and queued for a slot, tokens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live
from rich.text import Text

from openprose.engine.events import Event
from openprose.terminal import printable


class ProgressLine:
    """An event listener that redraws one status line on stderr."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines()
        self.done = self.reused = self.tokens = 0
        self.current = ""
        #: Keys of the sessions started and not ended, and of those calling the model now.
        self.started: set[str] = set()
        self.calling: set[str] = set()
        self.live = Live(Text(""), console=Console(stderr=True), refresh_per_second=8,
                         transient=True)

    def __enter__(self) -> ProgressLine:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Step aside (no redraws) while the user types at a prompt."""
        running = self.live.is_started
        if running:
            self.live.stop()
        try:
            yield
        finally:
            if running:
                self.live.start()

    def __call__(self, event: Event) -> None:
        if event.kind == "statement" and 0 < event.line <= len(self.lines):
            statement = printable(self.lines[event.line - 1].strip()[:60])
            self.current = f"line {event.line}: {statement}"
        elif event.kind == "session_start":
            self.started.add(event.key)
        elif event.kind == "session_call":
            self.calling.add(event.key)
        elif event.kind in ("session_called", "session_retry"):  # recording, or waiting
            self.calling.discard(event.key)
        elif event.kind in ("session_end", "session_failed"):
            self.started.discard(event.key)
            self.calling.discard(event.key)
            self.done += event.kind == "session_end"
            self.tokens += event.tokens
        elif event.kind == "session_reused":
            self.reused += 1
        self.live.update(Text(self.text()))

    def text(self) -> str:
        queued = len(self.started) - len(self.calling)
        return (f"{self.current}\nsessions: {self.done} done, {len(self.calling)} in flight, "
                f"{queued} queued, {self.reused} reused · tokens: {self.tokens:,}")
