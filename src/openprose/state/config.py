"""Project configuration: ``.prose/.env`` (key=value lines) and where PostgreSQL lives."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def read_env_file(project_root: Path) -> dict[str, str]:
    """Parse ``.prose/.env``: ``KEY=value`` lines; blank lines and ``#`` comments ignored;
    values may be quoted."""
    path = project_root / ".prose" / ".env"
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # no file, or no .prose/ directory
        return {}
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def settings(project_root: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The project's settings: the environment, overridden by non-empty ``.prose/.env``
    values."""
    file = {key: value for key, value in read_env_file(project_root).items() if value}
    return {**(os.environ if environ is None else environ), **file}


def postgres_schema(project_root: Path, environ: Mapping[str, str] | None = None) -> str:
    """OPENPROSE_POSTGRES_SCHEMA from .prose/.env, then the environment; default openprose."""
    return settings(project_root, environ).get("OPENPROSE_POSTGRES_SCHEMA") or "openprose"


def postgres_url(project_root: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """OPENPROSE_POSTGRES_URL from .prose/.env, then the environment, then DATABASE_URL."""
    environ = os.environ if environ is None else environ
    return (settings(project_root, environ).get("OPENPROSE_POSTGRES_URL")
            or environ.get("DATABASE_URL"))
