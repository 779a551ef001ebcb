"""Reading a local program file safely: a regular ``.prose`` file (after following links),
of bounded size, UTF-8. Errors name the path, never the file's contents."""

from __future__ import annotations

from pathlib import Path

from openprose.errors import OpenProseError
from openprose.paths import PathRefused, read_file

#: The largest program read: a file (a main program, an import, its contract) or source text
#: given inline to the MCP server.
MAX_PROGRAM_BYTES = 1024 * 1024


class ProgramFileError(OpenProseError, ValueError):
    """A local file that cannot be read as a program; the message says why."""


def read_program_file(path: Path) -> str:
    """The text of the program at ``path``; a FIFO, device or directory is refused without
    being read, a file over :data:`MAX_PROGRAM_BYTES` before reading it (see
    :func:`openprose.paths.read_file`)."""
    try:
        resolved = path.resolve()
        if resolved.suffix != ".prose":
            raise ProgramFileError(f"{resolved} is not a .prose file")
        data = read_file(resolved, str(resolved), MAX_PROGRAM_BYTES)
    except (PathRefused, OSError, RuntimeError) as err:
        raise ProgramFileError(str(err)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProgramFileError(f"{resolved} is not UTF-8 text") from None
