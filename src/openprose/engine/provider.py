"""The provider interface: how the engine spends model calls.

A provider does two things: run a *session* (a task that produces the text of one binding)
and *judge* a condition (a verdict: a boolean, or an option label for ``choice``). Providers
get a :class:`SessionIO` bound to the session's capability, so a provider that can act as an
agent (Anthropic tool loop, an MCP host via sampling) reads its context and writes its own
binding through it; a provider that only returns text lets the engine write the binding.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from openprose.state.models import Usage

if TYPE_CHECKING:
    from openprose.engine.permissions import Permissions
    from openprose.engine.work_tools import WorkTools


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One binding handed to a session or judgment: by reference (``location``) and, for
    providers that cannot read state, by value (``text``; for judgments it may be a preview).
    ``kind`` is the binding's kind (let, const, input, output, param, loop, ...) when known."""

    name: str
    text: str
    location: str
    kind: str = ""
    #: Characters of the whole value when ``text`` is only a preview of it.
    size: int | None = None


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """Everything a provider needs to run one session attempt."""

    key: str
    prompt: str
    system: str | None = None
    model: str | None = None
    agent: str | None = None
    binding: str | None = None
    context: tuple[ContextItem, ...] = ()
    memory: str | None = None
    persistent: bool = False
    skills: tuple[str, ...] = ()
    attempt: int = 1
    #: The session's permissions as the program gives them (``None``: no block).
    permissions: Permissions | None = None
    #: Its work tools (files, shell) under those permissions; ``None`` where the run has
    #: none (a host-driven run, an engine embedded without a project).
    work: WorkTools | None = field(default=None, compare=False, repr=False)
    #: Why each earlier attempt of this session failed, oldest first.
    failures: tuple[str, ...] = ()
    #: The attempt's token from :meth:`Provider.issue_token`, already recorded with the
    #: session's grant (``None``: none was drawn, or a retry needs a new one).
    host_token: str | None = None


@dataclass(frozen=True, slots=True)
class JudgeRequest:
    """A condition (``options`` empty: answer true/false) or a choice (answer one label).

    ``program`` is the statement with the program lines around it; ``context`` the bindings
    in scope, most recent first (see :mod:`openprose.engine.judging`); ``read`` returns a
    context binding's whole value by name when some are shown only in part."""

    key: str
    text: str
    options: tuple[str, ...] = ()
    context: tuple[ContextItem, ...] = ()
    #: How many times this condition was judged before in the same loop (0 outside loops).
    round: int = 0
    program: str = ""
    read: Callable[[str], str] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class SessionResult:
    """``output`` is the binding's text; ``None`` when the provider wrote it via
    :meth:`SessionIO.write_output` itself."""

    output: str | None
    usage: Usage = field(default_factory=Usage)
    summary: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A judgment: ``value`` is a bool for conditions, an option label for choices."""

    value: bool | str
    reason: str = ""
    usage: Usage = field(default_factory=Usage)


class SessionIO(Protocol):
    """The session's capability, as the provider sees it."""

    def read_context(self, name: str) -> str: ...

    def write_output(self, text: str) -> None: ...

    def output_location(self) -> str:
        """Where the session's binding is stored (for confirmations; no value needed)."""
        ...

    def read_memory(self) -> str | None: ...

    def write_memory(self, text: str) -> None: ...


class Provider(ABC):
    """Runs sessions and judges conditions. Implementations must be safe to call
    concurrently from one event loop."""

    name: str = "provider"
    #: True when the provider fetches context itself through :class:`SessionIO`.
    reads_context: bool = False
    #: True when the judge reads bindings itself (a host with ``read_binding``): a judgment
    #: then lists the bindings in scope by name, kind, size and a short preview
    #: (:data:`openprose.engine.judging.REFERENCES`) instead of carrying their values.
    judges_by_reference: bool = False

    @abstractmethod
    async def run_session(self, request: SessionRequest, io: SessionIO) -> SessionResult:
        """Run one attempt. Raise :class:`~openprose.engine.errors.ProviderError` on failure."""

    @abstractmethod
    async def judge(self, request: JudgeRequest) -> Verdict:
        """Judge a condition or pick a choice option."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most providers hold nothing
        """Release network clients and files."""

    def issue_token(self) -> str | None:
        """The token a host will know the next session by, drawn before the session opens
        so that its grant records it in the same write (``None``: this provider's sessions
        need none). The session's first attempt gets it as ``SessionRequest.host_token``."""
        return None


# Context handed over by value: short values verbatim (the seed's 2,000-character line); longer
# ones are cut to an excerpt that points at the full binding, since summarizing needs a model.
VERBATIM_LIMIT = 2000


def inline_context(items: tuple[ContextItem, ...]) -> str:
    """Render context for a provider that cannot read bindings itself."""
    parts = []
    for item in items:
        text = item.text
        if len(text) > VERBATIM_LIMIT:
            half = VERBATIM_LIMIT // 2
            omitted = len(text) - VERBATIM_LIMIT
            text = (
                f"{text[:half]}\n[... {omitted} characters omitted; full value at "
                f"{item.location} ...]\n{text[-half:]}"
            )
        parts.append(f"## {item.name}\n{text}")
    return "\n\n".join(parts)
