"""Helpers for driving the server as a host would: an in-process client per protocol era."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from tests.conftest import CORPUS

from openprose.mcp_server.server import create_server

ERAS = [pytest.param({"mode": "legacy"}, id="handshake"), pytest.param({}, id="2026-07-28")]


class Refused(AssertionError):
    """A tool call answered with is_error (the text is the reason)."""


class Host:
    """Calls tools and returns structured content; refusals raise :class:`Refused`."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        text = result.content[0].text if result.content else ""
        if result.is_error:
            raise Refused(text)
        data = dict(result.structured_content or {})
        data["_text"] = text
        return data

    async def refused(self, tool: str, **arguments: Any) -> str:
        result = await self.client.call_tool(tool, arguments)
        assert result.is_error, f"{tool} was not refused: {result.content}"
        return result.content[0].text


@asynccontextmanager
async def host(root: Path, era: dict[str, Any], **server: Any) -> AsyncIterator[Host]:
    mcp = create_server(root, home=root / "home", **server)
    async with Client(mcp, **era) as client:
        yield Host(client)


def corpus(name: str) -> str:
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"corpus not found beside the repository ({CORPUS})")
    return path.read_text(encoding="utf-8")
