"""Claude Code (the npm package ``@anthropic-ai/claude-code``, pinned in ``.ci/run``) as a real
host in tests: found on PATH or through ``OPENPROSE_TEST_CLAUDE``; tests skip without it
locally and fail without it under ``CI=true``. Every run gets a throwaway HOME and talks only to
a local fake of the Messages API."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "skill"
PROSE = Path(sys.executable).with_name("prose")
# Tools of the plugin's server as Claude Code names them.
TOOL_PREFIX = "mcp__plugin_openprose_openprose__"


def required_tool(command: str, variable: str, what: str) -> str:
    """``command`` from ``variable`` or PATH, or skip (fail under CI=true, where .ci/run has
    installed it) when it is missing."""
    found = os.environ.get(variable) or shutil.which(command)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required when CI=true: .ci/run installs it from npm")
    pytest.skip(f"{what} ('{command}') is not installed; .ci/run installs it")


def claude_executable() -> str:
    """The ``claude`` command, or skip (fail under CI=true) when it is not installed."""
    return required_tool("claude", "OPENPROSE_TEST_CLAUDE", "Claude Code")


def claude_env(home: Path, api_url: str | None = None,
               path: str | None = None) -> dict[str, str]:
    """Environment for a hermetic Claude Code: its own HOME, no telemetry, MCP tools listed
    directly (no ToolSearch) and servers connected before the first request; ``prose`` of this
    virtualenv first on PATH unless ``path`` replaces it."""
    home.mkdir(parents=True, exist_ok=True)
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "OPENPROSE_TEST_POSTGRES_URL")}
    env = {**keep, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "PATH": path if path is not None else f"{PROSE.parent}{os.pathsep}{keep.get('PATH', '')}",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "ENABLE_TOOL_SEARCH": "false",
           "MCP_CONNECTION_NONBLOCKING": "false",
           # prose serve can take seconds to start on a busy machine: wait for it.
           "CLAUDE_CODE_MCP_STARTUP_WAIT_MS": "60000", "MCP_TIMEOUT": "60000"}
    if api_url is not None:
        env |= {"ANTHROPIC_API_KEY": "sk-test-fake", "ANTHROPIC_BASE_URL": api_url}
    return env


def run_claude(args: list[str], home: Path, cwd: Path, api_url: str | None = None,
               timeout: float = 180, path: str | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([claude_executable(), *args], env=claude_env(home, api_url, path),
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)


def path_without_prose(bin_dir: Path) -> str:
    """A PATH with a ``python3`` (this interpreter, outside any virtualenv) and the system's
    directories, on which no ``prose`` command is found."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())
    path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    assert shutil.which("prose", path=path) is None, "a prose command is installed system-wide"
    return path
