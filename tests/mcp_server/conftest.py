"""Shared fixtures for the MCP server tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """The SDK's clients and servers run on asyncio here, as `prose serve` does."""
    return "asyncio"
