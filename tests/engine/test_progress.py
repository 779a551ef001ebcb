"""`prose run`'s status line: sessions in flight are those calling the model, never more
than --max-concurrency; the others started are queued."""

from __future__ import annotations

import asyncio
import re

from tests.conftest import no_sleep

from openprose.engine import (
    ScriptedProvider,
    SessionIO,
    SessionRequest,
    SessionResult,
    runner,
)
from openprose.engine.events import Event
from openprose.engine.interpreter import Options
from openprose.engine.progress import ProgressLine
from openprose.language import compile_or_raise


class Pairs(ScriptedProvider):
    """Sessions answer two at a time, once both are calling: the run's two slots are full."""

    def __init__(self) -> None:
        super().__init__({"default_output": "ok"})
        self.barrier = asyncio.Barrier(2)

    async def run_session(self, request: SessionRequest, io: SessionIO) -> SessionResult:
        await self.barrier.wait()
        return await super().run_session(request, io)


PROGRAM = """\
let topics = ["a", "b", "c", "d", "e", "f"]
let drafts = parallel for topic in topics:
  session "Draft {topic}"
"""


def test_in_flight_never_exceeds_max_concurrency(tmp_path) -> None:
    line = ProgressLine(PROGRAM)
    shown: list[tuple[int, int]] = []

    def listen(event: Event) -> None:
        line(event)
        found = re.search(r"(\d+) in flight, (\d+) queued", line.text())
        assert found is not None
        shown.append((int(found[1]), int(found[2])))

    job = runner.Job(source=PROGRAM, file="p.prose", project_root=tmp_path,
                     program=compile_or_raise(PROGRAM, "p.prose"),
                     options=Options(max_concurrency=2, sleep=no_sleep))
    outcome = asyncio.run(runner.execute(job, Pairs(), listen))
    assert outcome.status == "completed" and outcome.sessions == 6
    assert max(flying for flying, _ in shown) == 2
    assert max(queued for _, queued in shown) >= 1  # the others wait, shown as queued
    assert shown[-1] == (0, 0) and "6 done" in line.text()
