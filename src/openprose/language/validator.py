"""Static checks (filled in below)."""

from __future__ import annotations

from openprose.language import nodes as n
from openprose.language.diagnostics import Diagnostic


def validate(program: n.Program, path: str | None = None) -> list[Diagnostic]:
    return []
