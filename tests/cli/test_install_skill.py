"""`prose install-skill` as a user runs it, on a throwaway HOME: Claude Desktop's config is
merged (other servers kept, a backup first, idempotent), and the Claude Code lines it prints
work in the real Claude Code."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tests.hosts.claude_code import REPO, claude_executable, run_claude

PROSE = Path(sys.executable).with_name("prose")

EXISTING = {
    "globalShortcut": "Ctrl+Space",
    "mcpServers": {"files": {"command": "/usr/bin/files-mcp", "args": ["--root", "/srv"]}},
}


def install(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "APPDATA")}
    env["HOME"] = str(home)
    return subprocess.run([str(PROSE), "install-skill", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or home, timeout=60)


def config_of(home: Path) -> Path:
    return home / ".config" / "Claude" / "claude_desktop_config.json"


def expected_entry(project: Path) -> dict:
    return {"command": str(PROSE), "args": ["serve", "--project", str(project.resolve())]}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    if sys.platform in ("darwin", "win32"):
        pytest.skip("the test places the config where Linux keeps it")
    home = tmp_path / "home"
    config_of(home).parent.mkdir(parents=True)
    return home


def test_desktop_keeps_other_servers_backs_up_and_second_run_changes_nothing(home: Path) -> None:
    config = config_of(home)
    original = json.dumps(EXISTING, indent=4).encode()
    config.write_bytes(original)

    first = install(home, "--claude-desktop")
    assert first.returncode == 0, first.stderr
    data = json.loads(config.read_text())
    assert data["globalShortcut"] == "Ctrl+Space"
    assert data["mcpServers"]["files"] == EXISTING["mcpServers"]["files"]
    assert data["mcpServers"]["openprose"] == expected_entry(home)
    [backup] = config.parent.glob("claude_desktop_config.json.*.bak")
    assert backup.read_bytes() == original
    assert str(backup) in first.stdout

    after_first = config.read_bytes()
    second = install(home, "--claude-desktop")
    assert second.returncode == 0, second.stderr
    assert "nothing changed" in second.stdout
    assert config.read_bytes() == after_first
    assert len(list(config.parent.glob("*.bak"))) == 1


def test_desktop_without_a_config_creates_one_without_backup(home: Path) -> None:
    result = install(home, "--claude-desktop")
    assert result.returncode == 0, result.stderr
    assert json.loads(config_of(home).read_text()) == {
        "mcpServers": {"openprose": expected_entry(home)}}
    assert list(config_of(home).parent.glob("*.bak")) == []


def test_desktop_updates_a_stale_entry_and_keeps_it_in_the_backup(home: Path) -> None:
    stale = {"mcpServers": {"openprose": {"command": "/old/venv/bin/prose", "args": ["serve"]}}}
    config_of(home).write_text(json.dumps(stale))
    project = home / "work"
    project.mkdir()
    result = install(home, "--claude-desktop", "--project", str(project))
    assert result.returncode == 0, result.stderr
    assert "Replaced the previous 'openprose' entry" in result.stdout
    assert json.loads(config_of(home).read_text())["mcpServers"]["openprose"] == \
        expected_entry(project)
    [backup] = config_of(home).parent.glob("*.bak")
    assert json.loads(backup.read_text()) == stale


@pytest.mark.parametrize("content, problem", [
    ("{ not json", "not valid JSON"),
    ("[1, 2]", "top level is not a JSON object"),
    ('{"mcpServers": []}', "'mcpServers' is not a JSON object"),
])
def test_desktop_refuses_a_config_it_cannot_merge_and_leaves_it_alone(
        home: Path, content: str, problem: str) -> None:
    config_of(home).write_text(content)
    result = install(home, "--claude-desktop")
    assert result.returncode == 1
    assert problem in result.stderr and str(config_of(home)) in result.stderr
    assert "Traceback" not in result.stderr
    assert config_of(home).read_text() == content
    assert list(config_of(home).parent.glob("*.bak")) == []


def test_desktop_refuses_to_write_through_a_symlink(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "claude.json"
    target.parent.mkdir()
    target.write_text(json.dumps(EXISTING))
    config_of(home).symlink_to(target)
    result = install(home, "--claude-desktop")
    assert result.returncode == 1 and "symbolic link" in result.stderr
    assert json.loads(target.read_text()) == EXISTING
    ok = install(home, "--claude-desktop", "--config", str(target))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(target.read_text())["mcpServers"]["openprose"] == expected_entry(home)


def test_print_shows_every_host_and_changes_nothing(home: Path) -> None:
    result = install(home)
    assert result.returncode == 0, result.stderr
    assert f'"command": "{PROSE}"' in result.stdout
    assert f"claude plugin marketplace add {REPO}" in result.stdout
    assert "claude plugin install openprose@openprose" in result.stdout
    assert not config_of(home).exists()


def test_claude_code_lines_install_the_plugin_and_the_server(home: Path, tmp_path: Path) -> None:
    claude_executable()
    result = install(home, "--claude-code")
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines()
                if line.startswith("claude ")]
    assert [c[:3] for c in commands] == [["claude", "plugin", "marketplace"],
                                         ["claude", "plugin", "install"],
                                         ["claude", "mcp", "add"]]
    claude_home = tmp_path / "claude-home"
    for command in commands:
        done = run_claude(command[1:], claude_home, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "openprose@openprose" in run_claude(["plugin", "list"], claude_home, tmp_path).stdout
    server = run_claude(["mcp", "get", "openprose"], claude_home, tmp_path).stdout
    assert str(PROSE) in server and "serve" in server


def printed_snippet(output: str, client: str) -> str:
    """The snippet ``--print`` shows under ``<client>:`` (the paragraph after its header)."""
    paragraphs = output.split("\n\n")
    header = next(i for i, p in enumerate(paragraphs) if p.startswith(f"{client}: "))
    return paragraphs[header + 1]


def test_print_shows_codex_cursor_vscode_and_gemini_entries_in_their_formats(home: Path) -> None:
    project = home / "work"
    project.mkdir()
    result = install(home, "--project", str(project))
    assert result.returncode == 0, result.stderr
    entry = expected_entry(project)
    codex = tomllib.loads(printed_snippet(result.stdout, "Codex CLI"))
    assert codex["mcp_servers"]["openprose"] == {
        **entry, "default_tools_approval_mode": "approve", "required": True,
        "startup_timeout_sec": 60}
    for client in ("Cursor", "Gemini CLI"):
        assert json.loads(printed_snippet(result.stdout, client)) == {
            "mcpServers": {"openprose": entry}}
    assert json.loads(printed_snippet(result.stdout, "VS Code")) == {
        "servers": {"openprose": {"type": "stdio", **entry}}}
    assert "~/.codex/config.toml" in result.stdout and "settings.json" in result.stdout


CODEX_CONFIG = """model = "o3"
# the user's own comment
[mcp_servers.files]
command = "files-mcp"

[mcp_servers.openprose]
command = "/old/venv/bin/prose"
args = ["serve"]
[mcp_servers.openprose.env]
OLD = "1"

[tui]
theme = "dark"
"""


def install_codex(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    env |= {"HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    return subprocess.run([str(PROSE), "install-skill", "--codex", *args], capture_output=True,
                          text=True, env=env, cwd=home, timeout=60)


def test_codex_keeps_other_settings_replaces_a_stale_table_and_copies_the_skill(
        home: Path) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_CONFIG)
    first = install_codex(home)
    assert first.returncode == 0, first.stderr
    data = tomllib.loads(config.read_text())
    original = tomllib.loads(CODEX_CONFIG)
    assert data["mcp_servers"]["openprose"] == {
        **expected_entry(home), "default_tools_approval_mode": "approve", "required": True,
        "startup_timeout_sec": 60}
    assert {k: v for k, v in data.items() if k != "mcp_servers"} == {
        k: v for k, v in original.items() if k != "mcp_servers"}
    assert data["mcp_servers"]["files"] == original["mcp_servers"]["files"]
    assert "# the user's own comment" in config.read_text()
    [backup] = config.parent.glob("config.toml.*.bak")
    assert backup.read_text() == CODEX_CONFIG
    assert "Replaced the previous 'openprose' table" in first.stdout
    skill = home / ".codex" / "skills" / "open-prose"
    assert (skill / "SKILL.md").read_text() == (REPO / "skill" / "skills" / "open-prose" /
                                                "SKILL.md").read_text()

    after = config.read_bytes()
    second = install_codex(home)
    assert second.returncode == 0, second.stderr
    assert "already has the 'openprose' server" in second.stdout
    assert config.read_bytes() == after
    assert len(list(config.parent.glob("*.bak"))) == 1


@pytest.mark.parametrize("content, problem", [
    ("model = ", "not valid TOML"),
    ('mcp_servers.openprose.command = "/x"\n', "edit it by hand"),
])
def test_codex_refuses_a_config_it_cannot_merge_and_leaves_it_alone(
        home: Path, content: str, problem: str) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(content)
    result = install_codex(home)
    assert result.returncode == 1
    assert problem in result.stderr and str(config) in result.stderr
    assert "Traceback" not in result.stderr
    assert config.read_text() == content
    assert list(config.parent.glob("*.bak")) == []
