"""The plugin's server entry (``skill/bin/prose_mcp.py``, run by ``skill/.mcp.json``) never
fails silently: it starts the installed ``prose`` wherever the usual installers put it, and
without one it serves an MCP server of its own whose tool and prompt give the install line, which
the model in the real Claude Code receives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tests.hosts.claude_code import (
    PLUGIN_DIR,
    PROSE,
    REPO,
    TOOL_PREFIX,
    path_without_prose,
    run_claude,
)
from tests.hosts.fake_messages import FakeMessagesAPI, Reply, text, tool_use
from tests.hosts.host_model import calls

LAUNCHER = PLUGIN_DIR / "bin" / "prose_mcp.py"
INSTALL_LINE = f"pipx install {REPO}"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="places and symlinks of POSIX")


def launcher_env(home: Path, path: str) -> dict[str, str]:
    return {"HOME": str(home), "PATH": path, "LANG": os.environ.get("LANG", "C.UTF-8")}


def test_plugin_server_runs_the_launcher() -> None:
    servers = json.loads((PLUGIN_DIR / ".mcp.json").read_text())["mcpServers"]
    assert servers == {"openprose": {"command": "python3", "args": [
        "${CLAUDE_PLUGIN_ROOT}/bin/prose_mcp.py", "serve"]}}


@pytest.mark.parametrize("place", ["path", "pipx", "uv-tool-env", "recorded"])
def test_launcher_starts_prose_wherever_it_was_installed(place: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = path_without_prose(tmp_path / "bin")
    target = {"path": tmp_path / "bin" / "prose",
              "pipx": home / ".local" / "bin" / "prose",
              "uv-tool-env": home / ".local" / "share" / "uv" / "tools" / "openprose" / "bin"
                             / "prose"}.get(place)
    if target is None:  # recorded by prose install-skill, as a user in a virtualenv runs it
        done = subprocess.run([str(PROSE), "install-skill", "--claude-code"], text=True,
                              capture_output=True, env=launcher_env(home, path), timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"starts {PROSE}" in done.stdout
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(PROSE)
    result = subprocess.run([sys.executable, str(LAUNCHER), "--version"], text=True,
                            capture_output=True, env=launcher_env(home, path), timeout=60)
    assert result.returncode == 0, result.stderr
    assert version("openprose") in result.stdout


def install_help(params: StdioServerParameters) -> str:
    """What the install-help server's tool says (the launcher found no working prose)."""

    async def ask() -> str:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            result = await client.call_tool("install_openprose", {})
            assert not result.is_error
            return result.content[0].text

    return anyio.run(ask)


def test_a_prose_that_cannot_start_gets_the_reinstall_line(tmp_path: Path) -> None:
    """pipx's prose whose virtualenv lost its Python: the launcher says so, not nothing."""
    path = path_without_prose(tmp_path / "bin")
    home = tmp_path / "home"
    broken = home / ".local" / "bin" / "prose"
    broken.parent.mkdir(parents=True)
    broken.write_text(f"#!{tmp_path}/gone/python\n")
    broken.chmod(0o755)
    said = install_help(StdioServerParameters(command=sys.executable,
                                              args=[str(LAUNCHER), "serve"],
                                              env=launcher_env(home, path)))
    assert f"does not start: {broken}" in said
    assert f"pipx install --force {REPO}" in said


def test_without_prose_the_launcher_serves_the_install_line_over_mcp(tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(LAUNCHER), "serve"],
                                   env=launcher_env(tmp_path / "home",
                                                    path_without_prose(tmp_path / "bin")))

    async def check() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            init = await client.initialize()
            assert INSTALL_LINE in (init.instructions or "")
            [tool] = (await client.list_tools()).tools
            result = await client.call_tool(tool.name, {})
            assert not result.is_error and INSTALL_LINE in result.content[0].text
            refused = await client.call_tool(tool.name, {"force": True})
            assert refused.is_error and "takes no arguments" in refused.content[0].text
            [prompt] = (await client.list_prompts()).prompts
            got = await client.get_prompt(prompt.name)
            assert INSTALL_LINE in got.messages[0].content.text

    anyio.run(check)


def test_claude_code_without_prose_gives_the_model_the_install_line(tmp_path: Path) -> None:
    install_tool = TOOL_PREFIX + "install_openprose"

    def host_model(body: dict) -> Reply:
        if not calls(body):
            assert install_tool in {t["name"] for t in body["tools"]}
            return Reply([tool_use(install_tool, {})])
        return Reply([text("Told the user how to install OpenProse.")])

    with FakeMessagesAPI(host_model) as api:
        result = run_claude(["-p", "prose run examples/hello.prose", "--plugin-dir",
                             str(PLUGIN_DIR), "--output-format", "json", "--allowedTools",
                             install_tool], tmp_path / "home", tmp_path, api.url,
                            path=path_without_prose(tmp_path / "bin"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert api.errors == []
    [call] = calls(api.requests[-1])
    assert call.name == "install_openprose"
    assert INSTALL_LINE in (call.result or "")
