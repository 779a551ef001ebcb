"""The file tools' work — read, write, edit, glob, grep — on paths the permission gate has
already resolved and allowed, done without following a link anywhere.

A check on a path and the use of it are two moments; a parallel session (or any process)
may put a link on the path in between. So nothing here follows one: files and directories
are opened a component at a time relative to an open directory with ``O_NOFOLLOW``
(:func:`openprose.paths.open_dir`), what was opened is checked on its descriptor, writes
rename a new file over the name, and the searches walk open directories, judging each file
by the name it was opened by (:meth:`Gate.readable`) before any of its lines is shown,
counted or capped. A path that changed since its check fails with
:class:`~openprose.paths.LinkMet`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from openprose.engine.permissions import STATE_DIR, Gate, glob_regex
from openprose.errors import OpenProseError
from openprose.paths import LinkMet, open_dir, read_nofollow, write_nofollow

#: Bytes of one file read or edited whole (a larger one is read by line range).
MAX_FILE_BYTES = 256 * 1024
#: Bytes a line range is read from at most.
MAX_RANGE_BYTES = 16 * 1024 * 1024
GREP_OUTPUT_LIMIT = 100 * 1024
GREP_MAX_LINE_LENGTH = 2000
GLOB_RESULT_LIMIT = 200
WALK_MAX_ENTRIES = 50_000
#: Folders no search descends into (besides the project's ``.prose/``, never walked).
SKIPPED = (".git", "node_modules")
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class FileToolError(OpenProseError):
    """A file tool's failure, as the model is told it."""


def read(real: Path, shown: str, view_range: Any = None) -> str:
    if view_range is not None and (not isinstance(view_range, list) or len(view_range) != 2
                                   or not all(isinstance(n, int) for n in view_range)):
        raise FileToolError("read: view_range must be [start_line, end_line]")
    limit = MAX_RANGE_BYTES if view_range else MAX_FILE_BYTES
    text = _text(real, shown, "read", limit)
    if not view_range:
        return text
    lines = text.split("\n")
    start, end = max(0, view_range[0] - 1), view_range[1]
    return "\n".join(lines[start:end if end > 0 else len(lines)])


def write(real: Path, shown: str, content: Any) -> str:
    if not isinstance(content, str):
        raise FileToolError("write: content must be text")
    _write(real, shown, "write", content)
    return f"wrote {len(content)} bytes to {shown}"


def edit(real: Path, shown: str, old: Any, new: Any, replace_all: Any = None) -> str:
    if not isinstance(old, str) or not isinstance(new, str):
        raise FileToolError("edit: old_string and new_string must be text")
    text = _text(real, shown, "edit", MAX_FILE_BYTES)
    count = text.count(old)
    if not old or count == 0:
        raise FileToolError(f"edit: old_string not found in {shown}")
    if not replace_all and count > 1:
        raise FileToolError(f"edit: old_string appears {count} times in {shown} (must be "
                            "unique)")
    _write(real, shown, "edit", text.replace(old, new) if replace_all else
           text.replace(old, new, 1))
    return f"edited {shown} ({count if replace_all else 1} replacement(s))"


def glob(gate: Gate, root: Path, pattern: Any) -> str:
    """The paths under ``root`` matching ``pattern`` that the session may read, newest
    first."""
    if not isinstance(pattern, str) or not pattern:
        raise FileToolError("glob: pattern must be non-empty text")
    if pattern.startswith("/") or ".." in PurePosixPath(pattern).parts:
        raise FileToolError("glob: pass a relative pattern without '..' (and optionally path)")
    regex = glob_regex(pattern.strip("/"), below=False)
    depth = None if "**" in pattern else len(PurePosixPath(pattern).parts)
    found: list[tuple[float, str]] = []
    for path, info, _fd in _walk(gate, root, depth=depth, files_only=False):
        if regex.match(path.relative_to(root).as_posix()) and gate.readable(path):
            found.append((info.st_mtime, str(path)))
    if not found:
        return "no matches"
    found.sort(key=lambda item: item[0], reverse=True)
    return "\n".join(path for _, path in found[:GLOB_RESULT_LIMIT])


def grep(gate: Gate, root: Path, pattern: Any) -> str:
    """Lines matching ``pattern`` in the files under ``root`` (or the file ``root``) the
    session may read: a file it may not read is never opened, so its lines are neither
    shown nor counted against the output's cap."""
    if not isinstance(pattern, str):
        raise FileToolError("grep: pattern must be text")
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise FileToolError(f"grep: invalid regex: {err}") from None
    hits: list[str] = []
    budget = GREP_OUTPUT_LIMIT
    for path, _info, fd in _walk(gate, root, depth=None, files_only=True):
        if not gate.readable(path):
            continue
        for number, line in _lines(fd):
            if regex.search(line):
                entry = f"{path}:{number}:{line}"
                budget -= len(entry) + 1
                if budget < 0:
                    hits.append(f"[output truncated at {GREP_OUTPUT_LIMIT} bytes]")
                    return "\n".join(hits)
                hits.append(entry)
    return "\n".join(hits) if hits else "no matches"


# ---------------------------------------------------------------------- helpers


def _text(real: Path, shown: str, op: str, limit: int) -> str:
    try:
        data = read_nofollow(real, limit)
    except LinkMet:
        raise
    except FileNotFoundError:
        raise FileToolError(f"{op}: {shown}: no such file") from None
    except OSError as err:
        raise FileToolError(f"{op}: {shown}: {err.strerror or err}") from None
    except OpenProseError as err:
        raise FileToolError(f"{op}: {shown}: {err}") from None
    if len(data) > limit:
        hint = (" Use view_range to read a range of lines, e.g. [1, 500]." if op == "read"
                and limit == MAX_FILE_BYTES else "")
        raise FileToolError(f"{op}: {shown} is more than {limit} bytes.{hint}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileToolError(f"{op}: {shown}: not valid UTF-8 text") from None


def _write(real: Path, shown: str, op: str, text: str) -> None:
    try:
        write_nofollow(real, text.encode("utf-8"))
    except LinkMet:
        raise
    except OSError as err:
        raise FileToolError(f"{op}: {shown}: {err.strerror or err}") from None


def _walk(gate: Gate, root: Path, *, depth: int | None, files_only: bool
          ) -> Iterator[tuple[Path, os.stat_result, int]]:
    """``(path, status, fd)`` of each entry under ``root`` (``root`` itself when it is a
    file), found through open directories and never through a link; ``fd`` is an open
    descriptor of a regular file (files only), ``-1`` otherwise. Skips the project's
    ``.prose/`` and :data:`SKIPPED`; stops after :data:`WALK_MAX_ENTRIES` entries."""
    try:
        parent = open_dir(root.parent) if root != root.parent else open_dir(root)
    except (OSError, OpenProseError):
        return
    state = gate.project / STATE_DIR
    state_id = _identity(state)
    seen = 0

    def entries(dir_fd: int, path: Path, level: int
                ) -> Iterator[tuple[Path, os.stat_result, int]]:
        nonlocal seen
        try:
            names = sorted(os.listdir(dir_fd))
        except OSError:
            return
        for name in names:
            seen += 1
            if seen > WALK_MAX_ENTRIES:
                return
            child = path / name
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if child == state or name in SKIPPED:
                    continue
                if not files_only:
                    yield child, info, -1
                if depth is None or level + 1 < depth:
                    yield from _descend(dir_fd, name, child, level + 1)
            elif stat.S_ISREG(info.st_mode):
                yield from _file(dir_fd, name, child, info)

    def _descend(dir_fd: int, name: str, path: Path, level: int
                 ) -> Iterator[tuple[Path, os.stat_result, int]]:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            return
        try:
            info = os.fstat(fd)
            if path != state and (info.st_dev, info.st_ino) != state_id:
                yield from entries(fd, path, level)
        finally:
            os.close(fd)

    def _file(dir_fd: int, name: str, path: Path, info: os.stat_result
              ) -> Iterator[tuple[Path, os.stat_result, int]]:
        if not files_only:
            yield path, info, -1
            return
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError:
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                yield path, info, fd
        finally:
            os.close(fd)

    try:
        if root == root.parent:
            yield from entries(parent, root, 0)
            return
        try:
            info = os.stat(root.name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            return
        if stat.S_ISDIR(info.st_mode):
            yield from _descend(parent, root.name, root, 0)
        elif stat.S_ISREG(info.st_mode):
            yield from _file(parent, root.name, root, info)
    finally:
        os.close(parent)


def _identity(path: Path) -> tuple[int, int]:
    try:
        info = os.stat(path)
    except OSError:
        return (-1, -1)
    return info.st_dev, info.st_ino


def _lines(fd: int) -> Iterator[tuple[int, str]]:
    """The text lines of the open file ``fd`` (none for a binary file); lines longer than
    :data:`GREP_MAX_LINE_LENGTH` are skipped (a model's pattern may backtrack)."""
    with os.fdopen(os.dup(fd), "rb") as handle:
        if b"\x00" in handle.read(512):
            return
        handle.seek(0)
        for number, raw in enumerate(handle, 1):
            if len(raw) <= GREP_MAX_LINE_LENGTH:
                yield number, raw.decode(errors="replace").rstrip("\r\n")
