from __future__ import annotations

import asyncio

import pytest
from tests.conftest import PG_URL
from tests.engine.memjournal import MemJournal

from openprose.engine.interpreter import Interpreter, Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise


class Harness:
    """Compile and run a program on the scripted provider with an in-memory journal."""

    def __init__(self, script: dict | None = None, journal: MemJournal | None = None):
        self.provider = ScriptedProvider({"default_output": "ok", **(script or {})})
        self.journal = journal or MemJournal()
        self.delays: list[float] = []
        self.interpreter: Interpreter | None = None

    async def _sleep(self, seconds: float) -> None:
        self.delays.append(seconds)

    def run(self, source: str, inputs: dict | None = None, **options):
        program = compile_or_raise(source, "test.prose")
        self.interpreter = Interpreter(
            program, source, self.journal, self.provider, file="test.prose", inputs=inputs,
            options=Options(sleep=self._sleep, **options))
        return asyncio.run(self.interpreter.run())

    def prompts(self) -> list[str]:
        return [c.text for c in self.provider.calls if c.kind == "session" and c.phase == "start"]

    def value(self, name: str, execution_id=None):
        return self.journal.bindings[(name, execution_id)][0]


@pytest.fixture
def postgres_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes a test starts reach the test server (when there is one) as a user's would."""
    if PG_URL:
        monkeypatch.setenv("OPENPROSE_POSTGRES_URL", PG_URL)


@pytest.fixture
def harness():
    return Harness
