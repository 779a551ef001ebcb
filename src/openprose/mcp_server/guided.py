"""Guided runs: the engine keeps the control flow, the host supplies the model.

:class:`HostProvider` is an engine :class:`~openprose.engine.Provider` that answers nothing
itself. Each session or judgment the interpreter asks for becomes a *pending item* with a
token of its own; the host (a model with subagents, through the server's tools) completes it:

    item = (await host.wait_for_items(5.0))[0]     # what next_step returns
    await host.complete_session(item.token, "the result", "one-line summary")
    await host.submit_verdict(token, True, "why")   # for judgments
    await host.fail_session(token, "why it failed") # retry/try/catch handle it

The interpreter holds the joins, retries, frames and journal exactly as in ``prose run``;
parallel constructs put several items in flight at once (up to the run's concurrency), and a
``first``/``any`` join that settles ends the losers' tokens. A completion returns only after
the engine recorded it durably, so a confirmed session is never issued again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, TypeVar

from openprose.engine import (
    ContextItem,
    JudgeRequest,
    Provider,
    ProviderError,
    SessionIO,
    SessionRequest,
    SessionResult,
    Verdict,
)
from openprose.engine.briefs import Brief, brief_of
from openprose.engine.events import Event
from openprose.engine.interpreter import nothing_ready
from openprose.errors import OpenProseError

SESSION_PREFIX = "gs_"
JUDGMENT_PREFIX = "gj_"
#: Seconds a completion waits for the engine to record it before confirming anyway.
SETTLE_TIMEOUT = 60.0
#: Engine events that settle a completed item: recorded, retried, or given up.
_NOT_NEEDED = ("the engine no longer needs it (a parallel join settled without it, or the run "
               "was cancelled); nothing was written")
_SETTLING = frozenset({"session_end", "session_retry", "session_failed", "verdict", "cancelled"})


def is_guided_token(token: str) -> bool:
    """True for a token a guided run issued (this server process or an earlier one)."""
    return token.startswith((SESSION_PREFIX, JUDGMENT_PREFIX))


class ItemRefused(OpenProseError):
    """A host call on a pending item that cannot be applied; the message says why."""


@dataclass(frozen=True, slots=True)
class Written:
    """The confirmation of a completed session: never the value."""

    binding: str
    location: str
    size: int
    summary: str


@dataclass(eq=False)
class SessionItem:
    """A session the interpreter waits for."""

    token: str
    request: SessionRequest
    io: SessionIO
    brief: Brief
    future: asyncio.Future[SessionResult]
    asker: asyncio.Task[Any] | None = None
    issued: int = 0

    kind = "session"

    @property
    def key(self) -> str:
        return self.request.key


@dataclass(eq=False)
class JudgmentItem:
    """A condition (true/false) or a choice (one of ``options``) the interpreter waits for."""

    token: str
    request: JudgeRequest
    future: asyncio.Future[Verdict]
    asker: asyncio.Task[Any] | None = None
    issued: int = 0

    kind = "judgment"

    @property
    def key(self) -> str:
        return self.request.key

    def to_dict(self) -> dict[str, Any]:
        item: dict[str, Any] = {"kind": "judgment", "token": self.token,
                                "condition": self.request.text}
        if self.request.options:
            item["options"] = list(self.request.options)
        if self.request.context:
            item["context"] = [{"name": c.name, "kind": c.kind, "chars": c.size,
                                "preview": c.text} for c in self.request.context]
        if self.request.program:
            item["program"] = self.request.program
        if self.request.round:
            item["round"] = self.request.round
        return item


Item = SessionItem | JudgmentItem
ItemT = TypeVar("ItemT", SessionItem, JudgmentItem)


@dataclass
class _Ended:
    """What became of a token that is no longer pending."""

    reason: str
    digest: str | None = None
    written: Written | None = None


class HostProvider(Provider):
    """Sessions and judgments answered by the host through the server's tools."""

    name = "host"
    reads_context = True
    judges_by_reference = True

    def __init__(self, run_label: str = "") -> None:
        self.run_label = run_label
        self.pending: dict[str, Item] = {}
        self.ended: dict[str, _Ended] = {}
        self._settled: dict[str, asyncio.Future[str]] = {}
        self._changed = asyncio.Event()
        self._closed: str | None = None
        #: Sessions the engine is recording the intent of (on a worker thread, while others
        #: are in flight): each reaches :meth:`run_session` next, so a listing waits for them.
        self._opening = 0
        self._opened = asyncio.Event()
        self._opened.set()

    # ----------------------------------------------------------------------- engine side

    def issue_token(self) -> str:
        return SESSION_PREFIX + secrets.token_urlsafe(12)

    async def run_session(self, request: SessionRequest, io: SessionIO) -> SessionResult:
        token = request.host_token
        if token is None:  # a retry's attempt: a new token, noted with the grant for the
            token = self.issue_token()  # host's hook before the host can hand it on
            tag = getattr(io, "tag", None)
            if tag is not None:
                tag(token)
        item = SessionItem(token, request, io, brief_of(request, self.run_label),
                           asyncio.get_running_loop().create_future())
        return await self._wait(item)

    async def judge(self, request: JudgeRequest) -> Verdict:
        token = JUDGMENT_PREFIX + secrets.token_urlsafe(12)
        item = JudgmentItem(token, request, asyncio.get_running_loop().create_future())
        return await self._wait(item)

    async def _wait(self, item: Item) -> Any:
        if self._closed is not None:
            raise ProviderError(self._closed, retryable=False)
        item.asker = asyncio.current_task()
        self.pending[item.token] = item
        self._changed.set()
        try:
            return await item.future
        except asyncio.CancelledError:
            if item.token not in self.ended:
                self.ended[item.token] = _Ended(_NOT_NEEDED)
            raise
        finally:
            self.pending.pop(item.token, None)

    def observe(self, event: Event) -> None:
        """Engine listener: what the engine did with a completed item (recorded it, will
        retry it, gave it up)."""
        if event.kind == "session_opening":
            self._opening += 1
            self._opened.clear()
        elif event.kind == "session_opened":
            self._opening -= 1
            if not self._opening:
                self._opened.set()
        elif event.kind in _SETTLING:
            waiter = self._settled.pop(event.key, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(event.kind)

    def close(self, reason: str) -> None:
        """The run ended: wake every waiter; later asks fail with ``reason``."""
        self._closed = reason
        for waiter in self._settled.values():
            if not waiter.done():
                waiter.set_result("ended")
        self._settled.clear()
        self._opening = 0
        self._opened.set()
        self._changed.set()

    # ----------------------------------------------------------------------- host side

    async def wait_for_items(self, wait_s: float) -> list[Item]:
        """Everything pending, once something new is pending (or ``wait_s`` passed, or the
        run ended). Items returned before are included again (a host may have lost them)."""
        if not any(item.issued == 0 for item in self.pending.values()) and self._closed is None:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.0, wait_s))
        await self._quiesce()
        items = list(self.pending.values())
        for item in items:
            item.issued += 1
        return items

    def binding_of(self, token: str) -> str | None:
        """The binding a session token writes, while pending and after (None: anonymous,
        or no session's token)."""
        item = self.pending.get(token)
        if isinstance(item, SessionItem):
            return item.request.binding
        ended = self.ended.get(token)
        return ended.written.binding if ended is not None and ended.written is not None \
            else None

    async def complete_session(self, token: str, value: str, summary: str = "") -> Written:
        """Hand the session's value to the engine, which commits binding and result as one
        durable step; confirm once it did (with where the value is, never the value)."""
        digest = hashlib.sha256(value.encode()).hexdigest()
        item = self._live(token, SessionItem)
        if item is None:
            return self._repeat(token, digest, "session")
        written = Written(item.request.binding or "(anonymous)", item.io.output_location(),
                          len(value.encode()), summary)
        self.ended[token] = _Ended("its binding was written", digest, written)
        alone = len(self.pending) == 1 and not self._opening  # no sibling it could cancel
        outcome = await self._settle(item, SessionResult(value, summary=summary[:200]),
                                     quiesce=not alone)
        if outcome == "cancelled":
            self.ended[token] = _Ended(_NOT_NEEDED)
            raise ItemRefused(f"this session token has ended: {_NOT_NEEDED}")
        return written

    async def fail_session(self, token: str, error: str, retryable: bool = True) -> str:
        """Report a session attempt as failed; the program's retry and catch policies
        decide what happens next. Returns what the engine will do, in words."""
        item = self._live(token, SessionItem)
        if item is None:
            raise self._refusal(token, "session")
        self.ended[token] = _Ended(f"it was reported failed: {error}")
        failure = ProviderError(error or "failed (no reason given)", retryable=retryable)
        if await self._settle(item, failure) == "session_retry":
            return "retrying: the next attempt will be pending (per the session's retry policy)"
        return "failed: the program's error handling (try/catch, on-fail) takes over"

    async def submit_verdict(self, token: str, value: bool | str, reason: str = "") -> bool | str:
        """Answer a judgment: a boolean for a condition, one of the options for a choice."""
        item = self._live(token, JudgmentItem)
        if item is None:
            raise self._refusal(token, "judgment")
        verdict = _checked_verdict(item.request, value)
        self.ended[token] = _Ended(f"its verdict was recorded ({verdict})")
        await self._settle(item, Verdict(verdict, reason))
        return verdict

    def session_item(self, token: str) -> SessionItem:
        """The pending session of ``token`` (its brief, its capability)."""
        item = self._live(token, SessionItem)
        if item is None:
            raise self._refusal(token, "session")
        return item

    def read_for_judgment(self, token: str, name: str) -> str:
        """The whole value of a binding a pending judgment lists."""
        item = self._live(token, JudgmentItem)
        if item is None:
            raise self._refusal(token, "judgment")
        if item.request.read is None:
            raise ItemRefused("this judgment lists no bindings")
        try:
            return item.request.read(name)
        except KeyError as err:
            raise ItemRefused(str(err.args[0])) from None

    def session_io(self, token: str) -> SessionIO:
        """The capability of a pending session (read its context, its agent's memory)."""
        return self.session_item(token).io

    def context_names(self, token: str) -> tuple[ContextItem, ...]:
        item = self.pending.get(token)
        return item.request.context if isinstance(item, SessionItem) else ()

    # ----------------------------------------------------------------------- helpers

    async def _settle(self, item: Item, answer: Any, *, quiesce: bool = True) -> str:
        """Give the engine ``answer`` and wait until it acted on it: the event that settled
        the item, or "cancelled" when the branch that asked was cancelled meanwhile. Without
        ``quiesce`` (the only pending session, written: no sibling's fate waits on it) the
        answer returns once that event came (its commit is durable), and the engine walks
        on to its next step while the host reads the confirmation (:meth:`wait_for_items`
        quiesces before it answers)."""
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._settled[item.key] = waiter
        if isinstance(answer, BaseException):
            item.future.set_exception(answer)
        else:
            item.future.set_result(answer)
        asker = item.asker
        ended = asyncio.ensure_future(asyncio.shield(asker)) if asker else None
        waits: set[asyncio.Future[Any]] = {waiter} | ({ended} if ended else set())
        done, _ = await asyncio.wait(waits, timeout=SETTLE_TIMEOUT,
                                     return_when=asyncio.FIRST_COMPLETED)
        if ended is not None and not ended.done():
            ended.cancel()
        elif ended is not None and not ended.cancelled():
            ended.exception()  # the asker's failure is the engine's to handle: seen here

        self._settled.pop(item.key, None)
        if waiter in done:
            outcome = waiter.result()
        elif done:
            outcome = "cancelled" if asker is not None and asker.cancelled() else "ended"
        else:
            outcome = "timeout"
        if quiesce:
            await self._quiesce()
        return outcome

    async def _quiesce(self) -> None:
        """Let the engine run until what is pending stops changing: parallel siblings reach
        the provider (and settled joins cancel their losers) a few event-loop turns apart,
        or once the write recording their intent is done."""
        count = -1
        while count != len(self.pending) or self._opening:
            await self._opened.wait()
            count = len(self.pending)
            for _ in range(3):
                await asyncio.sleep(0)
                if nothing_ready():
                    break

    def _live(self, token: str, kind: type[ItemT]) -> ItemT | None:
        """The pending item of ``kind`` with this token that nobody has answered yet."""
        item = self.pending.get(token)
        return item if isinstance(item, kind) and not item.future.done() else None

    def _repeat(self, token: str, digest: str, kind: str) -> Written:
        """An identical resend of a completed session gets the first confirmation again."""
        ended = self.ended.get(token)
        if ended is not None and ended.digest == digest and ended.written is not None:
            return ended.written
        raise self._refusal(token, kind)

    def _refusal(self, token: str, kind: str) -> ItemRefused:
        """Why a token is not a pending ``kind`` (anymore)."""
        ended = self.ended.get(token)
        if ended is not None:
            return ItemRefused(f"this {kind} token has ended: {ended.reason}")
        item = self.pending.get(token)
        if item is not None:
            return ItemRefused(f"this token belongs to a pending {item.kind}, not a {kind}")
        return ItemRefused(f"unknown {kind} token (a server restart re-issues pending items "
                           "with new tokens: call next_step)")


def _checked_verdict(request: JudgeRequest, value: bool | str) -> bool | str:
    if request.options:
        for option in request.options:
            if isinstance(value, str) and option.strip().lower() == value.strip().lower():
                return option
        raise ItemRefused(f"{value!r} is not one of the options: {list(request.options)}")
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ItemRefused(f"a condition's verdict is true or false, not {value!r}")
