"""Subscribers hear `resources/updated` for a run's resources, in both protocol eras."""

from __future__ import annotations

import warnings

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from openprose.mcp_server.updates import RunUpdates, run_uris

pytestmark = pytest.mark.anyio
RUN = "20260101-000000-abcdef"
STATE = f"prose://runs/{RUN}/state"
BINDING = f"prose://runs/{RUN}/bindings/draft@2"


def _server() -> tuple[MCPServer, RunUpdates]:
    updates = RunUpdates()
    server = MCPServer("updates-test", subscriptions=updates.bus)
    updates.attach(server)

    @server.resource("prose://runs")
    def runs() -> str:
        return "{}"

    return server, updates


def test_a_change_names_the_list_the_state_and_each_binding() -> None:
    assert run_uris(RUN, ["draft@2"]) == ["prose://runs", STATE, BINDING]


async def test_handshake_subscribers_are_notified_until_they_unsubscribe() -> None:
    server, updates = _server()
    received: list[str] = []

    async def on_message(message: object) -> None:
        params = getattr(message, "params", None)
        if getattr(message, "method", "") == "notifications/resources/updated":
            received.append(params.uri)  # type: ignore[union-attr]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resources/subscribe is deprecated for the new era only
        async with Client(server, mode="legacy", message_handler=on_message) as client:
            assert client.server_capabilities.resources.subscribe is True
            await client.subscribe_resource(STATE)
            await client.subscribe_resource(BINDING)
            await updates.changed(RUN, ["draft@2", "other"])
            with anyio.fail_after(60):
                while len(received) < 2:
                    await anyio.sleep(0.01)
            assert sorted(received) == sorted([STATE, BINDING])
            await client.unsubscribe_resource(STATE)
            await updates.changed(RUN, ["draft@2"])
            with anyio.fail_after(60):
                while len(received) < 3:
                    await anyio.sleep(0.01)
            assert received[2] == BINDING and updates.subscribed(STATE) == 0
    await updates.changed(RUN, ["draft@2"])  # the client is gone: nothing raises
    assert len(received) == 3


async def test_listen_streams_receive_the_changes_they_asked_for() -> None:
    server, updates = _server()
    async with Client(server) as client, client.listen(resource_subscriptions=[STATE]) as stream:
        await updates.changed(RUN, ["draft"])
        with anyio.fail_after(60):
            event = await stream.__anext__()
    assert event.uri == STATE  # type: ignore[union-attr]


async def test_a_change_nobody_listens_to_publishes_nothing(monkeypatch) -> None:
    """The SDK's publish yields to the event loop once per event: a guided write, which
    changes three resources, paid three turns for listeners that were not there. Events go
    out while a listen stream is open, and stop once it closes."""
    from mcp.server.subscriptions import InMemorySubscriptionBus

    published: list[str] = []
    real = InMemorySubscriptionBus.publish

    async def counted(self, event):  # type: ignore[no-untyped-def]
        published.append(event.uri)
        await real(self, event)

    monkeypatch.setattr(InMemorySubscriptionBus, "publish", counted)
    server, updates = _server()
    await updates.changed(RUN, ["draft"])
    assert published == []
    async with Client(server) as client, client.listen(resource_subscriptions=[STATE]) as stream:
        await updates.changed(RUN, ["draft"])
        with anyio.fail_after(60):
            event = await stream.__anext__()
        assert event.uri == STATE  # type: ignore[union-attr]
        assert len(published) == 3
    with anyio.fail_after(60):
        while updates.bus.listeners:  # the stream's end reaches the server in its own time
            await anyio.sleep(0.01)
    await updates.changed(RUN, ["draft"])
    assert len(published) == 3
