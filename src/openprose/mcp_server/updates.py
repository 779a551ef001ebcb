"""``resources/updated`` for run resources, in both protocol eras.

Handshake-era clients subscribe with ``resources/subscribe`` and are sent
``notifications/resources/updated`` on their session; 2026-07-28 clients open a
``subscriptions/listen`` stream, fed by :attr:`RunUpdates.bus`. Build the server with that bus:

    updates = RunUpdates()
    mcp = MCPServer("openprose", subscriptions=updates.bus)
    updates.attach(mcp)
    ...
    await updates.changed(run_id, bindings=["draft", "draft@2"])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated, ServerEvent

RUNS_URI = "prose://runs"


def run_uris(run_id: str, bindings: Iterable[str] = ()) -> list[str]:
    """The resources a change to ``run_id`` (and to the named bindings) makes stale."""
    base = f"{RUNS_URI}/{run_id}"
    return [RUNS_URI, f"{base}/state", *(f"{base}/bindings/{name}" for name in bindings)]


def connection_of(ctx: ServerRequestContext) -> object:
    """The connection a request came on: each request gets its own session object, all of
    them sending on the one connection (the SDK exposes it on the session only)."""
    return ctx.session._connection


class CountedBus(InMemorySubscriptionBus):
    """The SDK's in-process bus, knowing whether any listen stream is open: a change nobody
    listens to then costs no event, and no event-loop turn (the SDK's publish yields once per
    event; a guided write changed three resources)."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners = 0

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.listeners += 1
        ended = False

        def once() -> None:
            nonlocal ended
            if not ended:
                ended = True
                self.listeners -= 1
            unsubscribe()

        return once


class RunUpdates:
    """Who is subscribed to which run resource, and the fan-out when one changes."""

    def __init__(self) -> None:
        self.bus = CountedBus()
        self._subscribers: dict[str, dict[object, ServerSession]] = {}

    def attach(self, mcp: MCPServer) -> None:
        """Serve ``resources/subscribe`` and ``resources/unsubscribe`` (handshake era).
        MCPServer 2.3 has no public hook for them, so they go on its low-level server."""
        server = mcp._lowlevel_server
        server.add_request_handler("resources/subscribe", types.SubscribeRequestParams,
                                   self._subscribe)
        server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams,
                                   self._unsubscribe)

    async def _subscribe(self, ctx: ServerRequestContext, params: types.SubscribeRequestParams
                         ) -> types.EmptyResult:
        self._subscribers.setdefault(str(params.uri), {})[connection_of(ctx)] = ctx.session
        return types.EmptyResult()

    async def _unsubscribe(self, ctx: ServerRequestContext,
                           params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self._subscribers.get(str(params.uri), {}).pop(connection_of(ctx), None)
        return types.EmptyResult()

    def subscribed(self, uri: str) -> int:
        return len(self._subscribers.get(uri, ()))

    async def changed(self, run_id: str, bindings: Iterable[str] = ()) -> None:
        """Tell every subscriber of ``run_id``'s list entry, state and the named bindings."""
        for uri in run_uris(run_id, bindings):
            if self.bus.listeners:
                await self.bus.publish(ResourceUpdated(uri=uri))
            for client, session in list(self._subscribers.get(uri, {}).items()):
                try:
                    await session.send_resource_updated(uri)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self._subscribers[uri].pop(client, None)
