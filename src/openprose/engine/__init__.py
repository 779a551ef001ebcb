"""The deterministic engine: runs OpenProse programs exactly, spending model calls only on
sessions and on judging ``**conditions**``, and resumes runs without repeating finished work.

    job = runner.Job(source=..., file=..., program=..., project_root=Path("."))
    outcome = await runner.execute(job, ScriptedProvider.from_file("script.yaml"))

Modules: :mod:`interpreter` (one visit method per node), :mod:`provider` (the interface),
:mod:`scripted` and :mod:`anthropic_provider` (implementations), :mod:`state_journal` (the
bridge to :mod:`openprose.state`), :mod:`keys` (resume keys), :mod:`parallel`, :mod:`retry`,
:mod:`imports`, :mod:`plan` (``--dry-run``), :mod:`runner` (start/resume a run).

The names below are loaded when first used: importing one light module of the package (the
permission hook, which Claude Code runs before every tool call of a session's subagent, needs
only :mod:`host_hook` and :mod:`permissions`) does not load the interpreter and its imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Each public name and the module that defines it.
_HOMES = {
    **dict.fromkeys(
        ("EngineError", "ImportFailed", "InputPaused", "MemoryMissing", "MissingInput",
         "ParallelFailed", "ProgramError", "ProgramFailed", "ProviderError",
         "ProviderUnavailable", "RecursionLimitExceeded", "ResumeMismatch", "RunawayLoop",
         "SessionFailed", "ThrownError", "ValueFault"), "errors"),
    **dict.fromkeys(("Interpreter", "Options"), "interpreter"),
    **dict.fromkeys(("ContextItem", "JudgeRequest", "Provider", "SessionIO", "SessionRequest",
                     "SessionResult", "Usage", "Verdict"), "provider"),
    "ScriptedProvider": "scripted",
}

__all__ = [
    "ContextItem", "EngineError", "ImportFailed", "InputPaused", "Interpreter", "JudgeRequest",
    "MemoryMissing", "MissingInput", "Options", "ParallelFailed", "ProgramError", "ProgramFailed",
    "Provider", "ProviderError", "ProviderUnavailable", "RecursionLimitExceeded",
    "ResumeMismatch", "RunawayLoop", "ScriptedProvider", "SessionFailed", "SessionIO",
    "SessionRequest", "SessionResult", "ThrownError", "Usage", "ValueFault", "Verdict",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
