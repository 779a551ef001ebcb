"""The corpus programs run to completion on the scripted provider, or fail only with the
error their text asks for (a ``throw``, ``resume:`` before any memory)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.engine.memjournal import MemJournal

from openprose.engine.errors import MemoryMissing, ThrownError
from openprose.engine.imports import ImportLoader
from openprose.engine.interpreter import Interpreter, Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise

CORPUS = Path("/work/shared/corpus")
FILES = sorted(CORPUS.glob("*.prose")) + sorted(CORPUS.glob("roadmap/*.prose"))
INTENDED = {
    "22-error-handling.prose": (ThrownError, "Validation failed"),
    "48-habit-miner.prose": (MemoryMissing, "E018"),
}
# Conditions: false on the first judgment, true on the next — every `if` takes its else,
# every `until` loop runs once, every `while` loop stops at once.
SCRIPT = {"default_output": "yes\n- first finding\n- second finding",
          "conditions": [{"match": ".", "verdicts": [False, True]}]}


async def _no_sleep(seconds: float) -> None:
    return None


@pytest.mark.skipif(not FILES, reason="corpus not present")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_program_runs(path, tmp_path):
    source = path.read_text(encoding="utf-8")
    program = compile_or_raise(source, str(path))
    inputs = {decl.name: f"sample {decl.name}" for decl in program.inputs}
    imports = ImportLoader(tmp_path).load(program, str(path))
    journal = MemJournal()
    interpreter = Interpreter(program, source, journal, ScriptedProvider(SCRIPT),
                              file=str(path), inputs=inputs, imports=imports,
                              options=Options(sleep=_no_sleep, loop_limit=50))
    expected = INTENDED.get(path.name)
    if expected is not None:
        with pytest.raises(expected[0], match=expected[1]):
            asyncio.run(interpreter.run())
        return
    outputs = asyncio.run(interpreter.run())
    assert interpreter.totals.sessions > 0
    declared = {s.name for s in program.body if s.__class__.__name__ == "Output" and s.name}
    assert declared <= set(outputs)
