"""Validation of everything that becomes part of a path or a key."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from pathlib import Path

from openprose.language.lexer import MAX_NAME
from openprose.paths import PathOutside, PathRefused, contained
from openprose.state.errors import InvalidNameError, PathEscapeError

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
SLUG_RE = re.compile(r"^@?[A-Za-z0-9_][A-Za-z0-9_.-]*$")
RUN_ID_RE = re.compile(r"^\d{8}-\d{6}-[a-z0-9]{6}$")
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A block-scoped binding is stored as NAME__ID (the filesystem's NAME__ID.md).
SCOPED_SUFFIX = re.compile(r".__\d+$")


def _reject_unsafe(value: str, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidNameError(f"{what} must be a non-empty string")
    if len(value) > MAX_NAME:
        raise InvalidNameError(f"{what} is longer than {MAX_NAME} characters")
    if _CONTROL.search(value):
        raise InvalidNameError(f"{what} {value!r} contains a control character")
    if "/" in value or "\\" in value or value in (".", ".."):
        raise InvalidNameError(f"{what} {value!r} must not contain path separators or be '.'/'..'")


def check_name(value: str, what: str = "name") -> str:
    """A binding or agent name: letters, digits, '_' and '-', starting with a letter or '_'."""
    _reject_unsafe(value, what)
    if not NAME_RE.fullmatch(value):
        raise InvalidNameError(f"{what} {value!r} may only use letters, digits, '_' and '-'")
    return value


def check_new_binding_name(value: str, what: str = "name") -> str:
    """A name a binding is written under: also never of the NAME__ID shape block-scoped
    bindings are stored under, which would make it the same file as another binding."""
    check_name(value, what)
    if SCOPED_SUFFIX.search(value):
        raise InvalidNameError(f"{what} {value!r} ends in '__' and digits, the way block-scoped "
                               "bindings are stored (NAME__ID): it could be two bindings")
    return value


def check_slug(value: str, what: str = "import handle") -> str:
    _reject_unsafe(value, what)
    if not SLUG_RE.fullmatch(value) or ".." in value:
        raise InvalidNameError(f"{what} {value!r} may only use letters, digits, '.', '_', '-'")
    return value


def check_run_id(value: str) -> str:
    """A top-level run id, or a nested import run ``{id}/imports/{handle}--{slug}``."""
    if not isinstance(value, str):
        raise InvalidNameError("run id must be a string")
    top, *rest = value.split("/imports/")
    if not RUN_ID_RE.fullmatch(top):
        raise InvalidNameError(f"run id {value!r} is not of the form YYYYMMDD-HHMMSS-xxxxxx")
    for part in rest:
        handle, sep, slug = part.partition("--")
        if not sep:
            raise InvalidNameError(f"run id {value!r}: nested runs are named handle--slug")
        check_slug(handle)
        check_slug(slug, "import slug")
    return value


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    suffix = "".join(secrets.choice(ALPHABET) for _ in range(6))
    return f"{now:%Y%m%d-%H%M%S}-{suffix}"


def contained_path(raw: str, roots: list[Path], base: Path, *,
                   home: Path | None = None) -> Path:
    """Resolve a custom persist path; it must stay inside one of ``roots`` and, below the
    root holding it, in no hidden folder: ``.git``, ``.prose`` (other runs' records),
    ``.claude``, ``.codex``, ``.github``… are where tools keep their configuration, and a
    memory file written there (``memory.md``, ``NAME-001.md``, any text a session chooses)
    would be read by them as their own. A leading ``~`` is ``home`` when given (the store's
    home, which tests and callers may override)."""
    try:
        resolved = contained(raw, roots, base=base, what="persist path", home=home)
    except PathOutside as err:
        raise PathEscapeError(str(err)) from None
    except PathRefused as err:
        raise InvalidNameError(str(err)) from None
    holders = [root for root in map(Path.resolve, roots) if resolved.is_relative_to(root)]
    below = resolved.relative_to(max(holders, key=lambda root: len(root.parts))).parts
    hidden = next((part for part in below if part.startswith(".")), None)
    if hidden is not None:
        raise PathEscapeError(f"persist path {raw!r} is inside the hidden folder {hidden}/ "
                              f"({resolved}): an agent's memory lives in a visible folder")
    return resolved
