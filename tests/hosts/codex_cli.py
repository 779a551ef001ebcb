"""Codex CLI (the npm package ``@openai/codex``, pinned in ``.ci/run``) as a real host in tests:
found on PATH or through ``OPENPROSE_TEST_CODEX``; tests skip without it locally and fail
without it under ``CI=true``. Every run gets a throwaway ``CODEX_HOME`` whose ``config.toml``
points Codex at a local fake of the Responses API and at ``prose serve``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.hosts.claude_code import required_tool

from openprose.cli.host_setup import SERVER_NAME, SKILL_NAME

#: How Codex groups our server's tools for its model (a call must name it).
NAMESPACE = f"mcp__{SERVER_NAME}"
#: Not a model Codex knows: a known one hides MCP tools behind Codex's tool search.
MODEL = "scripted-host-model"
KEY_VARIABLE = "OPENPROSE_TEST_FAKE_KEY"


def codex_executable() -> str:
    """The ``codex`` command, or skip (fail under CI=true) when it is not installed."""
    return required_tool("codex", "OPENPROSE_TEST_CODEX", "Codex CLI")


def write_config(codex_home: Path, api_url: str, prose: Path, project: Path) -> None:
    """``config.toml``: the fake model provider, no approvals asked, nothing sent elsewhere;
    then ``prose install-skill --codex`` adds our server and the open-prose skill, as a user
    runs it."""
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text("\n".join([
        'model_provider = "fake"',
        f"model = {json.dumps(MODEL)}",
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        "[features]",
        "plugins = false",
        "[analytics]",
        "enabled = false",
        "[model_providers.fake]",
        'name = "fake"',
        f"base_url = {json.dumps(api_url)}",
        'wire_api = "responses"',
        f'env_key = "{KEY_VARIABLE}"',
        ""]), encoding="utf-8")
    installed = subprocess.run([str(prose), "install-skill", "--codex", "--project", str(project)],
                               env={**os.environ, "CODEX_HOME": str(codex_home)},
                               capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
    assert (codex_home / "skills" / SKILL_NAME / "SKILL.md").is_file(), installed.stdout


def run_codex(prompt: str, codex_home: Path, cwd: Path, timeout: float = 300
              ) -> subprocess.CompletedProcess[str]:
    """``codex exec --json PROMPT`` with stdin closed (open, Codex waits to read more)."""
    home = codex_home.parent / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CODEX_HOME": str(codex_home),
           KEY_VARIABLE: "sk-test-fake", "LANG": os.environ.get("LANG", "C.UTF-8")}
    return subprocess.run([codex_executable(), "exec", "--skip-git-repo-check", "--ephemeral",
                           "--json", prompt], stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def tool_calls(stdout: str) -> list[dict]:
    """The MCP calls Codex reports in its ``--json`` events, completed or not."""
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [e["item"] for e in events
            if e.get("type") == "item.completed" and e["item"].get("type") == "mcp_tool_call"]
