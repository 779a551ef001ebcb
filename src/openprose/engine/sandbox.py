"""Shell commands of sessions, confined by the operating system rather than by reading them.

Linux: bubblewrap (``bwrap``; Debian package ``bubblewrap``) — the whole filesystem
read-only except the session's write roots, the project's ``.prose/`` read-only and its
``.env`` hidden, a private ``/tmp``, its own process namespace, and no network unless the
network is allowed. macOS: ``sandbox-exec`` with a profile of the same rules. Each command
is a fresh ``bash -c`` (nothing carries over between calls), killed with everything it
started at its timeout, its output capped. Where neither exists, :func:`detect` says
``none`` and commands run only when the user opts in (``--allow-unsandboxed-bash``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from openprose.engine.permissions import STATE_DIR

DEFAULT_TIMEOUT = 120.0
OUTPUT_CAP = 30_000
#: Places in the user's home that hold credentials: hidden from commands (an empty folder,
#: or an empty file, in their place). The rest of the home stays readable, so toolchains
#: installed there (pyenv, ~/.local) still work.
SECRET_PLACES = (".ssh", ".aws", ".gnupg", ".config", ".docker", ".kube", ".azure",
                 ".netrc", ".git-credentials", ".npmrc", ".pypirc", ".claude", ".codex",
                 ".prose", ".pgpass", ".password-store", ".vault-token", ".terraform.d",
                 ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
                 ".m2/settings.xml", ".local/share/keyrings", ".mozilla", ".bash_history",
                 ".zsh_history", ".python_history", ".psql_history", ".mysql_history")
#: The environment a command sees: these variables of ours, nothing else (no API keys,
#: tokens or database URLs reach a command, its output or the model).
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME",
              "SHELL", "VIRTUAL_ENV")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How commands are confined here: ``bubblewrap``, ``sandbox-exec`` or ``none``."""

    kind: str
    program: str | None = None

    @property
    def confined(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        if self.kind == "none":
            return ("none (shell commands run only with --allow-unsandboxed-bash; install "
                    "bubblewrap on Linux)")
        return f"{self.kind} ({self.program})"


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_code: int | None  # None: killed at the timeout
    output: str
    size: int  # bytes the command printed (before the cap)
    truncated: bool = False
    timed_out: bool = False


def detect() -> Sandbox:
    """The sandbox this machine offers (checked by running one, once per process)."""
    return _detect()


@functools.cache
def _detect() -> Sandbox:
    bwrap = shutil.which("bwrap")
    if bwrap and _works([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                         "--unshare-net", "--unshare-pid", "--die-with-parent", "true"]):
        return Sandbox("bubblewrap", bwrap)
    seatbelt = shutil.which("sandbox-exec")
    if sys.platform == "darwin" and seatbelt and _works(
            [seatbelt, "-p", "(version 1)(allow default)", "true"]):
        return Sandbox("sandbox-exec", seatbelt)
    return Sandbox("none")


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def command_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    passed = {key: env[key] for key in PASSED_ENV if key in env}
    passed.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return passed


def secret_places(project: Path, env: Mapping[str, str] | None = None) -> list[Path]:
    """The credential places of the user's home that exist (never one holding the
    project, which must stay visible)."""
    home = Path((env or os.environ).get("HOME") or "/nonexistent")
    found = []
    for name in SECRET_PLACES:
        place = home / name
        if place.is_symlink() or not place.exists() or project.is_relative_to(place):
            continue
        found.append(place)
    return found


def argv_for(sandbox: Sandbox, command: str, *, project: Path, write_roots: list[Path],
             network: bool, read_only: list[Path] | None = None,
             env: Mapping[str, str] | None = None) -> list[str]:
    """The process to start for ``command`` under ``sandbox`` (``read_only``: places inside
    the write roots that stay read-only)."""
    state = project / STATE_DIR
    kept = list(read_only or [])
    if sandbox.kind == "bubblewrap":
        # /tmp and /run are private and empty: no other process's files or sockets (a
        # container runtime's, a desktop bus's) are reachable from the command.
        argv = [sandbox.program or "bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp",
                "--tmpfs", "/run", "--ro-bind", str(project), str(project)]
        for root in write_roots:
            argv += ["--bind", str(root), str(root)]
        for place in kept:
            if place.exists():
                argv += ["--ro-bind", str(place), str(place)]
        for place in secret_places(project, env):
            if place.is_dir():
                argv += ["--tmpfs", str(place)]
            else:
                argv += ["--ro-bind", "/dev/null", str(place)]
        if state.is_dir():
            argv += ["--ro-bind", str(state), str(state)]
            if (state / ".env").exists():
                argv += ["--ro-bind", "/dev/null", str(state / ".env")]
        argv += ["--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent",
                 "--new-session", "--setenv", "TMPDIR", "/tmp"]
        if not network:
            argv.append("--unshare-net")
        return [*argv, "--chdir", str(project), "/bin/bash", "-c", command]
    if sandbox.kind == "sandbox-exec":
        return [sandbox.program or "sandbox-exec", "-p",
                _seatbelt(project, write_roots, network, kept, secret_places(project, env)),
                "/bin/bash", "-c", command]
    return ["/bin/bash", "-c", command]


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
    argv = argv_for(sandbox, command, project=project, write_roots=write_roots,
                    network=network, read_only=read_only, env=env)
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=str(project), env=command_env(env), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True)
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
