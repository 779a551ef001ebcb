"""The state layer's error hierarchy. Every refusal names the rule that was broken."""

from __future__ import annotations

from openprose.errors import OpenProseError


class StateError(OpenProseError):
    """Base class for every state-layer error."""


class CapabilityError(StateError):
    """A write or read that the caller's capability does not allow."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{detail} (rule: {rule})")
        self.rule = rule


class InvalidNameError(StateError):
    """A name that would become part of a path is not acceptable."""


class PathEscapeError(InvalidNameError):
    """A path that would resolve outside its allowed root."""


class NotFoundError(StateError):
    """A binding, frame or record that does not exist."""


class RunNotFound(NotFoundError):
    """No run with this id exists in the store."""


class DepthLimitExceeded(StateError):
    """Pushing a frame would exceed the block's max_depth."""

    def __init__(self, block: str, limit: int) -> None:
        super().__init__(f"RecursionLimitExceeded: block '{block}' exceeded max_depth {limit}")
        self.block = block
        self.limit = limit


class BackendUnavailable(StateError):
    """The chosen backend cannot be used (missing URL, server down, ...)."""


class DamagedState(StateError):
    """Stored state that cannot be read as this program writes it (edited by hand, a
    directory where a file belongs, not UTF-8, a database that is not one). The message
    names the file — and the line or row — and what is wrong there."""


class StateDiskFull(StateError):
    """A write failed because the disk (or the database) is full. Nothing written before
    it is lost; the run can go on once space is freed."""
