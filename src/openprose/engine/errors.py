"""The engine's error hierarchy.

Every error the engine raises on purpose derives from :class:`EngineError`. Errors that a
program can catch (``try``/``catch``) are :class:`ProgramError`; when one escapes the whole
program the run fails with :class:`ProgramFailed`, which names the statement's location.
"""

from __future__ import annotations

from openprose.engine.inputs import flag
from openprose.errors import OpenProseError
from openprose.language.nodes import Span


class EngineError(OpenProseError):
    """Base class for every error the engine raises deliberately."""


class ProgramError(EngineError):
    """An error raised while a program runs; ``try``/``catch`` can handle it.

    ``span`` is the statement that raised it (filled in as the error leaves the statement).
    """

    def __init__(self, message: str, span: Span | None = None, file: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.file = file

    def located(self, span: Span, file: str | None) -> ProgramError:
        """Attach the innermost statement location, once."""
        if self.span is None:
            self.span, self.file = span, file
        return self

    @property
    def location(self) -> str:
        if self.span is None:
            return self.file or "<program>"
        return f"{self.file or '<program>'}:{self.span.line}:{self.span.column}"


class SessionFailed(ProgramError):
    """A session failed after all its retries."""


class ThrownError(ProgramError):
    """Raised by a ``throw`` statement."""


class ParallelFailed(ProgramError):
    """A ``parallel`` block failed; ``errors`` holds the branch errors by branch label."""

    def __init__(self, message: str, errors: dict[str, ProgramError]) -> None:
        super().__init__(message)
        self.errors = errors


class RecursionLimitExceeded(ProgramError):
    """A block call went deeper than the block's ``max_depth``."""


class RunawayLoop(ProgramError):
    """A ``loop`` without a max reached the engine's safety limit."""


class ValueFault(ProgramError):
    """A value could not be used as asked (bad index, not a collection, unknown name...)."""


class MemoryMissing(ProgramError):
    """E018: ``resume:`` on a persistent agent that has no memory yet."""


class ProgramFailed(EngineError):
    """The run failed: an error escaped the program. ``cause`` is the program error."""

    def __init__(self, cause: ProgramError) -> None:
        super().__init__(f"{cause.location}: {type(cause).__name__}: {cause.message}")
        self.cause = cause


class MissingInput(EngineError):
    """Required inputs have no value and nobody can be asked for them: ``missing`` holds
    each one's name and description (all of them, so one message names every one)."""

    def __init__(self, *missing: tuple[str, str]) -> None:
        shown = ", ".join(f"'{name}'" + (f" ({text})" if text else "") for name, text in missing)
        plural = "s" if len(missing) > 1 else ""
        flags = " ".join(flag(name) for name, _ in missing)
        super().__init__(f"missing input{plural} {shown}: pass {flags} (or NAME=@FILE)")
        self.missing = missing


class InputPaused(EngineError):
    """An ``input`` reached mid-program has no value and nobody can be asked (ruling 1):
    the run pauses there until it is resumed with the value."""

    def __init__(self, name: str, prompt: str) -> None:
        super().__init__(f"waiting for input '{name}'" + (f" ({prompt})" if prompt else ""))
        self.name = name
        self.prompt = prompt


class BudgetExhausted(EngineError):
    """The run reached its ``--max-tokens`` / ``--max-cost``: no new session starts, and the
    run stops, resumable (with a higher budget)."""


class ResumeMismatch(EngineError):
    """A resumed run's program no longer matches what the run recorded."""


class ImportFailed(EngineError):
    """A ``use`` import could not be fetched or compiled."""


class ProviderError(EngineError):
    """A provider call failed. ``retryable`` errors are retried by the session's policy."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ProviderUnavailable(EngineError):
    """A provider cannot be used as configured (no API key, bad script file...)."""
