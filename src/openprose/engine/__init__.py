"""The deterministic engine: runs OpenProse programs exactly, spending model calls only on
sessions and on judging ``**conditions**``, and resumes runs without repeating finished work.

    job = runner.Job(source=..., file=..., program=..., project_root=Path("."))
    outcome = await runner.execute(job, ScriptedProvider.from_file("script.yaml"))

Modules: :mod:`interpreter` (one visit method per node), :mod:`provider` (the interface),
:mod:`scripted` and :mod:`anthropic_provider` (implementations), :mod:`state_journal` (the
bridge to :mod:`openprose.state`), :mod:`keys` (resume keys), :mod:`parallel`, :mod:`retry`,
:mod:`imports`, :mod:`plan` (``--dry-run``), :mod:`runner` (start/resume a run).
"""

from __future__ import annotations

from openprose.engine.errors import (
    EngineError,
    ImportFailed,
    InputPaused,
    MemoryMissing,
    MissingInput,
    ParallelFailed,
    ProgramError,
    ProgramFailed,
    ProviderError,
    ProviderUnavailable,
    RecursionLimitExceeded,
    ResumeMismatch,
    RunawayLoop,
    SessionFailed,
    ThrownError,
    ValueFault,
)
from openprose.engine.interpreter import Interpreter, Options
from openprose.engine.provider import (
    ContextItem,
    JudgeRequest,
    Provider,
    SessionIO,
    SessionRequest,
    SessionResult,
    Usage,
    Verdict,
)
from openprose.engine.scripted import ScriptedProvider

__all__ = [
    "ContextItem", "EngineError", "ImportFailed", "InputPaused", "Interpreter", "JudgeRequest",
    "MemoryMissing", "MissingInput", "Options", "ParallelFailed", "ProgramError", "ProgramFailed", "Provider",
    "ProviderError", "ProviderUnavailable", "RecursionLimitExceeded", "ResumeMismatch",
    "RunawayLoop", "ScriptedProvider", "SessionFailed", "SessionIO", "SessionRequest",
    "SessionResult", "ThrownError", "Usage", "ValueFault", "Verdict",
]
