"""The one place a path derived from data is checked: a program's imports, a script named by
a tool call and the call log that script names, a program file, an agent's persist path.

Data — a program, a script, an agent's memory, a tool call from a host model that may be
steered by what it read — never chooses where the engine reads or writes outside the roots it
was given: every such path goes through :func:`contained` (and files to read through
:func:`regular_file` or :func:`read_file`), which refuse with :class:`PathRefused` naming what
the path was for and why. Paths the user types on the command line are the user's own and are
not limited to a project.

This module depends on nothing else in the package but its root error, so the language, state
and engine layers all use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from openprose.errors import OpenProseError

#: The longest path accepted, in characters (Linux's PATH_MAX; others are shorter).
MAX_PATH = 4096
#: The longest part of a path between separators (NAME_MAX on common file systems).
MAX_PART = 255


class PathRefused(OpenProseError, ValueError):
    """A path that may not be used; the message names what it was for and why."""


class PathOutside(PathRefused):
    """A path that resolves outside every allowed root (or into an excluded one)."""


def checked_text(raw: str | os.PathLike[str], what: str) -> str:
    """``raw`` as text, refused when no file system could take it: empty, a NUL or another
    control character, longer than :data:`MAX_PATH` or with a part longer than
    :data:`MAX_PART`."""
    text = os.fspath(raw) if isinstance(raw, os.PathLike) else raw
    if not isinstance(text, str) or not text.strip():
        raise PathRefused(f"{what} must be a non-empty path")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise PathRefused(f"{what} {text[:80]!r} contains a NUL or control character")
    if len(text) > MAX_PATH:
        raise PathRefused(f"{what} is longer than {MAX_PATH} characters")
    if any(len(part) > MAX_PART for part in text.replace("\\", "/").split("/")):
        raise PathRefused(f"{what} {text[:80]!r}... has a part longer than {MAX_PART} "
                          "characters")
    return text


def contained(raw: str | os.PathLike[str], roots: Sequence[Path], *, base: Path, what: str,
              excluded: Sequence[Path] = (), home: Path | None = None,
              within: str = "") -> Path:
    """``raw`` resolved (links followed; relative to ``base``) and checked to lie inside one
    of ``roots`` and inside none of ``excluded``. A leading ``~`` is ``home`` when given;
    ``within`` names the roots in a refusal ("the project")."""
    text = checked_text(raw, what)
    if home is not None and (text == "~" or text.startswith("~/")):
        candidate = home / text[2:]
    else:
        candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        candidate = base / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as err:  # a link loop, a name too long for the system
        raise PathRefused(f"{what} {text!r} cannot be resolved: {err}") from None
    inside = list(dict.fromkeys(root.resolve() for root in roots))
    resolves = f" (it resolves to {resolved})" if text != str(resolved) else ""
    if not any(resolved.is_relative_to(root) for root in inside):
        allowed = " or ".join(str(root) for root in inside)
        raise PathOutside(f"{what} {text!r} is outside {within + ' ' if within else ''}"
                          f"{allowed}{resolves}")
    for other in excluded:
        if resolved.is_relative_to(other.resolve()) or inside_by_identity(resolved, other):
            raise PathOutside(f"{what} {text!r} is inside {other}, which holds the project's "
                              f"own records{resolves}")
    return resolved


def inside_by_identity(path: Path, directory: Path) -> bool:
    """Whether ``path`` lies in ``directory`` by identity of files, not spelling: on a file
    system that ignores case ``.PROSE/x`` is in ``.prose``, and a bind mount or a second
    name of the directory leads into it too."""
    try:
        wanted = os.stat(directory)
    except OSError:
        return False
    for parent in (path, *path.parents):
        try:
            found = os.stat(parent)
        except OSError:
            continue
        if (found.st_dev, found.st_ino) == (wanted.st_dev, wanted.st_ino):
            return True
    return False


def regular_file(path: Path, what: str) -> os.stat_result:
    """``path``'s status when it is a regular file; a FIFO, device, socket or directory is
    refused from its status alone, never opened (opening a FIFO blocks until a writer
    comes). ``what`` names the file in a refusal (``program 'a.prose'``)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise PathRefused(f"{what} does not exist") from None
    except OSError as err:
        raise PathRefused(f"{what} cannot be read: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else
                "a directory" if stat.S_ISDIR(info.st_mode) else
                "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else
                "not a regular file")
        raise PathRefused(f"{what} is {kind}, not a regular file")
    return info


def read_file(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them. Checked by its
    status before it is opened, and again on the open descriptor (never blocking), so a file
    swapped for a FIFO in between is refused too."""
    if regular_file(path, what).st_size > max_bytes:
        raise PathRefused(f"{what} is larger than {_size(max_bytes)}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise PathRefused(f"{what} cannot be read: {err.strerror}") from None
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise PathRefused(f"{what} is not a regular file")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PathRefused(f"{what} is larger than {_size(max_bytes)}")
    return data


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0 else f"{limit} bytes"


# ---------------------------------------------------------------------- opened without links

#: Flags of every directory opened on a walk: never through a link, never kept by a child.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkMet(PathRefused):
    """A path met a link (or something not a directory) where a checked path had none: it
    changed since it was checked, and is not used."""


def open_dir(path: Path, *, create: bool = False) -> int:
    """A descriptor of the directory ``path`` (absolute, already resolved), opened one
    component at a time from ``/`` without following a link, so what is opened is the path
    that was checked whatever changes meanwhile. ``create``: make missing directories."""
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in path.parts[1:]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                _link_met(err, path)
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_path(path: Path) -> int:
    """An ``O_PATH`` descriptor of ``path`` (a directory or a file) opened without following
    a link anywhere on it: a place to bind into a sandbox exactly as it was checked."""
    parent = open_dir(path.parent)
    try:
        fd = os.open(path.name or "/", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=parent)
    finally:
        os.close(parent)
    if stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        raise LinkMet(f"{path} is a link")
    return fd


def read_nofollow(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (absolute, resolved), opened without following
    a link and checked on the open descriptor: at most ``max_bytes`` + 1 of them."""
    parent = open_dir(path.parent)
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=parent)
    except OSError as err:
        _link_met(err, path)
        raise
    finally:
        os.close(parent)
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PathRefused(f"{path.name} is not a regular file")
        return handle.read(max_bytes + 1)


def write_nofollow(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (absolute, resolved) atomically: a new file beside it,
    renamed over the name. Directories are opened and made without following links, and the
    rename replaces whatever the name is (a link that appeared is replaced, not written
    through; so is a second name of the file). An existing file's mode is kept."""
    parent = open_dir(path.parent, create=True)
    tmp = f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        try:
            old = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
            mode = stat.S_IMODE(old.st_mode) if stat.S_ISREG(old.st_mode) else None
        except FileNotFoundError:
            mode = None  # a new file: the umask applies
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666, dir_fd=parent)
        try:
            with open(fd, "wb") as handle:
                if mode is not None:
                    os.fchmod(fd, mode)
                handle.write(data)
                handle.flush()
                os.fsync(fd)
            os.rename(tmp, path.name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=parent)
            raise
    finally:
        os.close(parent)


def _link_met(err: OSError, path: Path) -> None:
    if err.errno in (errno.ELOOP, errno.ENOTDIR):
        raise LinkMet(f"{path} changed since it was checked (a link or a file now "
                      "stands on it)") from None
