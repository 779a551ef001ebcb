"""The plugin's MCP server entry: start the installed ``prose serve``, or say how to install it.

Hosts start a plugin's server from a fixed command line; when that command is missing (openprose
installed in a virtualenv that is not active, the usual case) the host starts nothing and tells
its model nothing. This launcher looks for ``prose`` on PATH, then where ``prose install-skill``
recorded it, then where ``pipx`` and ``uv tool`` install commands, and runs the first one found.
With none it serves a tiny MCP server over stdio (this file, standard library only) whose one
tool and one prompt give the exact command the user must run. It must keep running on any
Python 3 the host finds, so it imports nothing outside the standard library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SERVER_NAME = "openprose"
TOOL_NAME = "install_openprose"
PROMPT_NAME = "install-openprose"
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
PLUGIN_ROOT = Path(__file__).resolve().parents[1]


def record_file() -> Path:
    """Where ``prose install-skill`` records the ``prose`` it was run with, for this launcher."""
    if os.name == "nt":
        base = os.environ.get("APPDATA") or str(Path.home() / "AppData" / "Roaming")
    else:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "openprose" / "prose-command"


def record(executable: Path) -> Path:
    """Remember ``executable`` (an absolute path) as the ``prose`` to start; atomic write."""
    target = record_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temp.write_text(f"{executable}\n", encoding="utf-8")
    os.replace(temp, target)
    return target


def _recorded() -> list[Path]:
    try:
        line = record_file().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return []
    return [Path(line)] if line else []


def _tool_places() -> list[Path]:
    """Where pipx and uv tool put the ``prose`` command and their openprose environments."""
    home = Path.home()
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    bins = [os.environ.get(key) for key in ("PIPX_BIN_DIR", "UV_TOOL_BIN_DIR", "XDG_BIN_HOME")]
    dirs = [Path(d) for d in bins if d] + [home / ".local" / "bin"]
    pipx_homes = [os.environ.get("PIPX_HOME"), data / "pipx", home / ".local" / "pipx",
                  home / "pipx"]
    uv_dirs = [os.environ.get("UV_TOOL_DIR"), data / "uv" / "tools"]
    venvs = [Path(h) / "venvs" / "openprose" for h in pipx_homes if h]
    venvs += [Path(d) / "openprose" for d in uv_dirs if d]
    for venv in venvs:
        dirs += [venv / "bin", venv / "Scripts"]
    return [d / name for d in dirs for name in ("prose", "prose.exe")]


def find_prose() -> Path | None:
    """The first installed ``prose``: PATH, the recorded one, then pipx's and uv's places."""
    on_path = shutil.which("prose")
    if on_path:
        return Path(on_path)
    for candidate in [*_recorded(), *_tool_places()]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def install_text(broken: str | None = None) -> str:
    """What the user must run, in words the model can pass on unchanged; ``broken``: why the
    ``prose`` found does not start (then it is installed again over itself)."""
    checkout = PLUGIN_ROOT.parent
    pyproject = checkout / "pyproject.toml"
    from_checkout = pyproject.is_file() and 'name = "openprose"' in pyproject.read_text(
        encoding="utf-8", errors="replace")
    source = str(checkout) if from_checkout else "openprose"
    if broken:
        problem, source = f"OpenProse is installed but does not start: {broken}.", \
            f"--force {source}"
    else:
        problem = "OpenProse is not installed where this plugin can find it."
    return "\n".join([
        f"{problem} Its tools are not available. Tell the user to run, in a terminal:",
        "",
        f"    pipx install {source}",
        "",
        f"(or: uv tool install {source}). If openprose is already installed in a virtualenv, "
        "run that environment's prose once instead: /path/to/venv/bin/prose install-skill "
        "--claude-code (it records where prose is).",
        "Then restart the host (in Claude Code: /mcp, then reconnect openprose) and try again.",
    ])


def _result(request_id: object, result: dict) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(request_id: object, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def answer(message: dict, text: str) -> dict | None:
    """The install-help server's reply to one JSON-RPC message (None for notifications);
    ``text`` is what its tool, prompt and instructions say."""
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        return None
    params = message.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        return _result(request_id, {
            "protocolVersion": version, "capabilities": {"tools": {}, "prompts": {}},
            "serverInfo": {"name": SERVER_NAME, "version": "not-installed"},
            "instructions": text})
    if method == "ping":
        return _result(request_id, {})
    if method == "tools/list":
        return _result(request_id, {"tools": [{
            "name": TOOL_NAME,
            "description": "OpenProse (prose run, compile, help, examples) is not installed on "
                           "this machine yet. Call this first for any OpenProse request: it "
                           "returns the exact command the user must run to install it.",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
        }]})
    if method == "tools/call":
        if params.get("name") != TOOL_NAME:
            return _error(request_id, -32602, f"unknown tool {params.get('name')!r}: "
                                              f"only {TOOL_NAME} is available")
        extra = sorted(params.get("arguments") or {})
        if extra:
            text = f"{TOOL_NAME} takes no arguments (got: {', '.join(extra)})"
        return _result(request_id, {"content": [{"type": "text", "text": text}],
                                    "isError": bool(extra)})
    if method == "prompts/list":
        return _result(request_id, {"prompts": [{
            "name": PROMPT_NAME, "description": "How to install OpenProse for this host"}]})
    if method == "prompts/get":
        if params.get("name") != PROMPT_NAME:
            return _error(request_id, -32602, f"unknown prompt {params.get('name')!r}")
        return _result(request_id, {"messages": [
            {"role": "user", "content": {"type": "text", "text": text}}]})
    return _error(request_id, -32601, f"method not found: {method}")


def serve_install_help(text: str) -> None:
    """Newline-delimited JSON-RPC over stdin/stdout until the host closes stdin."""
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            reply: dict | None = _error(None, -32700, "parse error: not JSON")
        else:
            reply = answer(message, text) if isinstance(message, dict) else _error(
                None, -32600, "invalid request: not a JSON object")
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


def main(args: list[str]) -> int:
    prose = find_prose()
    if prose is None:
        print(f"{SERVER_NAME}: prose not found; serving install instructions", file=sys.stderr)
        serve_install_help(install_text())
        return 0
    command = [str(prose), *(args or ["serve"])]
    try:
        if os.name == "posix":
            os.execv(command[0], command)
        return subprocess.call(command)
    except OSError as exc:  # e.g. its virtualenv's Python was removed
        broken = f"{prose} ({exc.strerror or exc})"
        print(f"{SERVER_NAME}: {broken}; serving install instructions", file=sys.stderr)
        serve_install_help(install_text(broken))
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
