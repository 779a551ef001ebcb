"""Shell commands of sessions, confined by the operating system rather than by reading them.

Linux: bubblewrap (``bwrap``; Debian package ``bubblewrap``) — the whole filesystem
read-only except the session's write roots, the project's ``.prose/`` read-only and its
``.env`` hidden, a private ``/tmp`` and ``/run``, a fresh ``/proc`` of its own process
namespace with ``/proc/sys`` read-only, every capability dropped (so it holds for root
too), no way into another namespace, and no network (nor unix socket) unless the network
is allowed. Places are bound by descriptors opened without following links, so what is
bound is what was checked. macOS: ``sandbox-exec`` with a profile of the same rules. Each
command is a fresh ``bash -c`` (nothing carries over between calls), killed with everything
it started at its timeout, its output capped. Where neither confines, :func:`detect` says
``none`` (and why) and commands run only when the user opts in
(``--allow-unsandboxed-bash``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from openprose.engine import permissions
from openprose.engine.permissions import STATE_DIR
from openprose.errors import OpenProseError
from openprose.paths import open_path

DEFAULT_TIMEOUT = 120.0
OUTPUT_CAP = 30_000
#: The environment a command sees: these variables of ours, nothing else (no API keys,
#: tokens or database URLs reach a command, its output or the model).
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME",
              "SHELL", "VIRTUAL_ENV")


#: Namespaces and limits every bubblewrap command gets: its own process, IPC, host name and
#: cgroup namespaces, no capability at all (root's too), its own session (no terminal to
#: push input into), killed with its parent.
_CONFINED = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--cap-drop", "ALL", "--die-with-parent", "--new-session")
#: Tried first: a user namespace the command cannot leave or nest (its root is no root of
#: the machine's); left out where the machine allows none (some containers), the rest
#: still confines.
_USERNS = ("--unshare-user", "--disable-userns")
#: Checks, inside the sandbox, that it holds: no effective capability, /proc/sys unwritable.
_PROBE = ("grep -Eq '^CapEff:[[:space:]]*0+$' /proc/self/status && "
          "! test -w /proc/sys/vm/drop_caches")


class SandboxError(OpenProseError):
    """The sandbox for a command could not be built; the message says why."""


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How commands are confined here: ``bubblewrap``, ``sandbox-exec`` or ``none``
    (``reason``: why, and what to do)."""

    kind: str
    program: str | None = None
    flags: tuple[str, ...] = ()
    reason: str = ""

    @property
    def confined(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        if self.kind == "none":
            return self.reason or ("none (shell commands run only with "
                                   "--allow-unsandboxed-bash; install bubblewrap on Linux)")
        if self.kind == "bubblewrap":
            who = "root" if os.geteuid() == 0 else "this user"
            userns = ("in a user namespace it cannot leave" if "--unshare-user" in self.flags
                      else "without a user namespace (this machine allows none)")
            return (f"bubblewrap ({self.program}): as {who}, every capability dropped, "
                    f"{userns}; own process, IPC and host-name namespaces; fresh /proc with "
                    "/proc/sys read-only; no network or unix sockets unless allowed")
        return f"{self.kind} ({self.program})"


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_code: int | None  # None: killed at the timeout
    output: str
    size: int  # bytes the command printed (before the cap)
    truncated: bool = False
    timed_out: bool = False


def detect(*, again: bool = False) -> Sandbox:
    """The sandbox this machine offers (checked by running one, once per process unless
    ``again``)."""
    if again:
        _detect.cache_clear()
    return _detect()


@functools.cache
def _detect() -> Sandbox:
    bwrap = shutil.which("bwrap")
    if bwrap:
        for flags in ((*_USERNS, *_CONFINED), _CONFINED):
            if _confines(bwrap, flags):
                return Sandbox("bubblewrap", bwrap, flags)
        why = ("bubblewrap is installed but cannot confine commands here as needed (no "
               "capability left even for root, places bound by descriptor, unix sockets "
               "filtered; bubblewrap 0.8 or later, with user namespaces or as root)")
        return Sandbox("none", reason=f"none: {why}, so shell commands are refused; run "
                       "unconfined commands with --allow-unsandboxed-bash at your own risk")
    seatbelt = shutil.which("sandbox-exec")
    if sys.platform == "darwin" and seatbelt and _works(
            [seatbelt, "-p", "(version 1)(allow default)", "true"]):
        return Sandbox("sandbox-exec", seatbelt)
    return Sandbox("none")


#: A fresh /proc of the command's own process namespace (no other process, nor its
#: environment, is visible), with /proc/sys read-only over it.
_PROC = ("--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys")


def _confines(bwrap: str, flags: tuple[str, ...]) -> bool:
    """Whether a command started as :func:`prepare` starts them, with ``flags``, is confined
    (checked from inside it by :data:`_PROBE`)."""
    prepared = prepare(Sandbox("bubblewrap", bwrap, flags), _PROBE, project=Path("/"),
                       write_roots=[], network=False)
    try:
        return _works(prepared.argv, prepared.fds)
    finally:
        prepared.close()


def _works(argv: list[str], fds: tuple[int, ...] = ()) -> bool:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                              pass_fds=fds).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def command_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    passed = {key: env[key] for key in PASSED_ENV if key in env}
    passed.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return passed


def secret_places(project: Path, env: Mapping[str, str] | None = None) -> list[Path]:
    """The credential places hidden from a command whose environment is ``env``."""
    return permissions.secret_places(project, Path((env or os.environ).get("HOME") or "/"))


@dataclass(frozen=True, slots=True)
class Prepared:
    """A command ready to start: its argv and the descriptors it takes (closed after)."""

    argv: list[str]
    fds: tuple[int, ...] = ()

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def prepare(sandbox: Sandbox, command: str, *, project: Path, write_roots: list[Path],
            network: bool, read_only: list[Path] | None = None,
            env: Mapping[str, str] | None = None) -> Prepared:
    """The process to start for ``command`` under ``sandbox`` (``read_only``: places inside
    the write roots that stay read-only). Raises :class:`SandboxError` when it cannot be
    built; never another error."""
    try:
        return _prepare(sandbox, command, project=project, write_roots=write_roots,
                        network=network, read_only=list(read_only or []), env=env)
    except (OSError, OpenProseError) as err:
        raise SandboxError(f"the sandbox for this command could not be built: {err}") \
            from None


def _prepare(sandbox: Sandbox, command: str, *, project: Path, write_roots: list[Path],
             network: bool, read_only: list[Path], env: Mapping[str, str] | None
             ) -> Prepared:
    state = project / STATE_DIR
    if sandbox.kind == "bubblewrap":
        fds: list[int] = []

        def bind(option: str, place: Path) -> list[str]:
            """Bound by a descriptor opened without following a link: a link put on
            the place after its check fails here rather than binding its target."""
            fd = open_path(place)
            fds.append(fd)
            return [option, str(fd), str(place)]

        try:
            # /tmp and /run are private and empty: no other process's files or sockets (a
            # container runtime's, a desktop bus's) are reachable from the command.
            argv = [sandbox.program or "bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp",
                    "--tmpfs", "/run", *bind("--ro-bind-fd", project)]
            for root in write_roots:
                argv += bind("--bind-fd", root)
            for place in read_only:
                if os.path.lexists(place):
                    argv += bind("--ro-bind-fd", place)
            for place in secret_places(project, env):
                if place.is_dir():
                    argv += ["--tmpfs", str(place)]
                else:
                    argv += ["--ro-bind", "/dev/null", str(place)]
            if state.is_dir():
                argv += bind("--ro-bind-fd", state)
                if (state / ".env").exists():
                    argv += ["--ro-bind", "/dev/null", str(state / ".env")]
            argv += ["--dev", "/dev", *_PROC, *sandbox.flags, "--setenv", "TMPDIR", "/tmp"]
            if not network:
                argv.append("--unshare-net")
                if (filter_fd := _no_unix_sockets()) is not None:
                    fds.append(filter_fd)
                    argv += ["--add-seccomp-fd", str(filter_fd)]
        except BaseException:
            Prepared([], tuple(fds)).close()
            raise
        return Prepared([*argv, "--chdir", str(project), "/bin/bash", "-c", command],
                        tuple(fds))
    if sandbox.kind == "sandbox-exec":
        return Prepared([sandbox.program or "sandbox-exec", "-p",
                         _seatbelt(project, write_roots, network, read_only,
                                   secret_places(project, env)),
                         "/bin/bash", "-c", command])
    return Prepared(["/bin/bash", "-c", command])


#: (audit architecture, socket(2)'s number) of the machines the unix-socket filter knows.
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
_IO_URING_SETUP = 425  # the same number on both: io_uring can open sockets past the filter


def _no_unix_sockets() -> int | None:
    """A descriptor holding a seccomp program (classic BPF) that refuses ``socket(AF_UNIX,
    …)`` and io_uring with ``EACCES``, and kills a call of another architecture: with the
    network denied, no socket file anywhere on the disk (a database's, a container
    runtime's) can be reached. ``None`` on a machine it does not know."""
    known = _SECCOMP_ARCH.get(platform.machine())
    if known is None:
        return None
    arch, socket_nr = known
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill, refuse = 0x7FFF0000, 0x80000000, 0x00050000 | 13  # EACCES
    program = [
        (ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill),         # the architecture
        (ld, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, kill),    # x32 calls
        (jeq, 4, 0, _IO_URING_SETUP),
        (jeq, 0, 2, socket_nr), (ld, 0, 0, 16), (jeq, 1, 0, 1),      # socket(AF_UNIX, …)
        (ret, 0, 0, allow), (ret, 0, 0, refuse)]
    fd = os.memfd_create("openprose-seccomp", os.MFD_CLOEXEC)
    os.write(fd, b"".join(struct.pack("=HBBI", *op) for op in program))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _seatbelt(project: Path, write_roots: list[Path], network: bool,
              read_only: list[Path], hidden: list[Path]) -> str:
    def quoted(path: Path | str) -> str:
        return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'

    writable = " ".join(f"(subpath {quoted(root)})" for root in write_roots)
    rules = ["(version 1)", "(allow default)", "(deny file-write*)",
             f"(allow file-write* {writable} (subpath \"/private/tmp\") (subpath "
             f"\"/private/var/folders\") (literal \"/dev/null\"))",
             f"(deny file-write* (subpath {quoted(project / STATE_DIR)}))",
             *(f"(deny file-write* (subpath {quoted(place)}))" for place in read_only),
             f"(deny file-read* (literal {quoted(project / STATE_DIR / '.env')}))",
             *(f"(deny file-read* (subpath {quoted(place)}))" for place in hidden)]
    if not network:
        rules.append("(deny network*)")
    return "".join(rules)


async def run(sandbox: Sandbox, command: str, *, project: Path, write_roots: list[Path],
              network: bool, timeout: float = DEFAULT_TIMEOUT, cap: int = OUTPUT_CAP,
              env: Mapping[str, str] | None = None,
              read_only: list[Path] | None = None) -> CommandResult:
    """Run ``command`` confined; stdout and stderr together, at most ``cap`` bytes kept
    (the head, then the tail), killed with all it started after ``timeout`` seconds."""
    prepared = prepare(sandbox, command, project=project, write_roots=write_roots,
                       network=network, read_only=read_only, env=env)
    try:
        proc = await asyncio.create_subprocess_exec(
            *prepared.argv, cwd=str(project), env=command_env(env),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True, pass_fds=prepared.fds)
    except OSError as err:
        raise SandboxError(f"the command could not be started: {err}") from None
    finally:
        prepared.close()
    head, tail, size = bytearray(), bytearray(), 0
    half = cap // 2

    async def drain() -> None:
        nonlocal size
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            size += len(chunk)
            room = half - len(head)
            if room > 0:
                head.extend(chunk[:room])
                chunk = chunk[room:]
            tail.extend(chunk)
            if len(tail) > cap - half:
                del tail[:len(tail) - (cap - half)]
        await proc.wait()

    timed_out = False
    try:
        await asyncio.wait_for(drain(), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    kept = len(head) + len(tail)
    text = head.decode(errors="replace")
    if size > kept:
        text += f"\n[... {size - kept} bytes of output omitted ...]\n"
    text += tail.decode(errors="replace")
    if timed_out:
        text += f"\n[killed after {timeout:g} s]"
    return CommandResult(None if timed_out else proc.returncode, text, size, size > kept,
                         timed_out)
