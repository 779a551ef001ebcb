"""Reading a local program file safely: a regular ``.prose`` file (after following links),
of bounded size, UTF-8. Errors name the path, never the file's contents."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from openprose.errors import OpenProseError

#: The largest program file read from disk (main programs' imports and their contracts).
MAX_PROGRAM_BYTES = 1024 * 1024


class ProgramFileError(OpenProseError, ValueError):
    """A local file that cannot be read as a program; the message says why."""


def read_program_file(path: Path) -> str:
    """The text of the program at ``path``; a FIFO, device or directory is refused without
    being read, a file over :data:`MAX_PROGRAM_BYTES` after reading that much."""
    resolved = path.resolve()
    if resolved.suffix != ".prose":
        raise ProgramFileError(f"{resolved} is not a .prose file")
    try:
        fd = os.open(resolved, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise ProgramFileError(f"cannot read {resolved}: {err.strerror}") from err
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ProgramFileError(f"{resolved} is not a regular file")
        data = handle.read(MAX_PROGRAM_BYTES + 1)
    if len(data) > MAX_PROGRAM_BYTES:
        raise ProgramFileError(f"{resolved} is larger than {MAX_PROGRAM_BYTES // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProgramFileError(f"{resolved} is not UTF-8 text") from None
