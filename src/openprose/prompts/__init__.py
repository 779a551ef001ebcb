"""Texts the MCP server hands to host models, stored as package data (``*.md`` here)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def load(name: str) -> str:
    """The text of ``{name}.md`` in this package."""
    return files(__package__).joinpath(f"{name}.md").read_text(encoding="utf-8")
