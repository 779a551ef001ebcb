"""Reading and writing state's files safely: never through a symbolic link, atomically
(temp file + rename), a full disk named as such. Every atomic write in openprose is
:func:`atomic_write`."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from openprose.state.errors import DamagedState, PathEscapeError, StateDiskFull

_TEMP_NUMBERS = itertools.count()  # temp files: .{name}.{pid}-{number}.tmp
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC


def read_exact(path: Path) -> str:
    """A file's text exactly as written (no newline translation: values keep their \\r).
    Never read through a link (that is a :class:`PathEscapeError`); a directory or bytes
    that are not UTF-8 are a :class:`DamagedState` naming the file and line."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DamagedState(f"{path}:{line}: not UTF-8 text") from None


def read_bytes(path: Path, start: int = 0, end: int | None = None) -> bytes:
    """A regular file's bytes (``start`` to ``end``: a part of them), opened without
    following a link at its last component."""
    fd = open_nofollow(path, os.O_RDONLY)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DamagedState(f"{path} is not a regular file (a directory or device where "
                           "state keeps a file)")
    with open(fd, "rb") as handle:
        if start:
            handle.seek(start)
        return handle.read(-1 if end is None else max(0, end - start))


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symbolic link at ``path`` itself."""
    try:
        return os.open(path, flags | _NOFOLLOW | _CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise PathEscapeError(f"{path} is a symbolic link; state is never read or "
                                  "written through a link") from None
        if err.errno == errno.EISDIR:
            raise DamagedState(f"{path} is a directory where state keeps a file") from None
        raise


def atomic_write(path: Path, text: str, *, durable: bool = False, private: bool = False,
                 staging: Path | None = None) -> None:
    """Write ``text`` to ``path`` via a temp file and rename; fsync file and directory if
    ``durable``. Readers never see a half-written file. A ``private`` file (configuration that
    may hold secrets) keeps the permissions of the file it replaces, or is its owner's only.
    ``staging``: a directory on the same filesystem to make the temp file in, so that a
    watcher of ``path``'s directory sees one file renamed in rather than a temp file created,
    closed and moved (four events, each waking its threads); beside ``path`` when the rename
    cannot cross (another filesystem)."""
    if staging is not None:
        try:
            _write_via(staging, path, text, durable, private)
            return
        except OSError as err:
            if err.errno != errno.EXDEV:
                raise
    _write_via(path.parent, path, text, durable, private)


def _write_via(directory: Path, path: Path, text: str, durable: bool, private: bool) -> None:
    """:func:`atomic_write` with its temp file in ``directory``."""
    with disk_errors(path):
        temp, fd = _create_temp(directory, path.name)
        try:
            if private:
                os.fchmod(fd, path.stat().st_mode & 0o777 if path.exists() else 0o600)
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data):]
            if durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(temp)
            raise
        os.close(fd)
        try:
            try:
                os.replace(temp, path)
            except FileNotFoundError:  # made apart: the target's directory may not exist yet
                path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        if durable:
            fsync_dir(path.parent)


@contextlib.contextmanager
def disk_errors(path: Path) -> Iterator[None]:
    """A write that fails for want of space is :class:`StateDiskFull`, naming the file."""
    try:
        yield
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StateDiskFull(f"cannot write {path}: no space left on the device") from None
        raise


#: A temp file :func:`atomic_write` makes: ``.{name}.{pid}-{number}.tmp``.
TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-\d+\.tmp$")
#: A temp file this old is an orphan whoever's pid it names (pids are reused); a live
#: writer's exists for the few system calls of one write.
ORPHAN_AGE_S = 3600.0


def sweep_temps(directory: Path) -> list[Path]:
    """Remove the temp files a killed writer left in ``directory`` and the directories below
    it: only names of :data:`TEMP_NAME`'s shape, only when the process that made one is gone
    (or the file is older than :data:`ORPHAN_AGE_S`) — a live writer's is never touched.
    Returns what was removed."""
    removed: list[Path] = []
    now = time.time()
    for root, _, names in os.walk(directory):
        for name in names:
            found = TEMP_NAME.match(name)
            if found is None:
                continue
            path = Path(root) / name
            pid = int(found["pid"])
            try:
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode):
                    continue
                if process_alive(pid) and now - info.st_mtime < ORPHAN_AGE_S:
                    continue
                path.unlink()
            except OSError:
                continue
            removed.append(path)
    return removed


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _create_temp(directory: Path, name: str) -> tuple[str, int]:
    """A new temp file for ``name`` in ``directory``, named by process and counter (no random
    bytes to fetch); a name a crashed process left behind is skipped."""
    while True:
        temp = f"{directory}{os.sep}.{name}.{os.getpid()}-{next(_TEMP_NUMBERS)}.tmp"
        try:
            return temp, os.open(temp, _CREATE, 0o644)
        except FileExistsError:
            continue
        except FileNotFoundError:
            directory.mkdir(parents=True, exist_ok=True)
            return temp, os.open(temp, _CREATE, 0o644)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
