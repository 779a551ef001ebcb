"""An independent MCP client against the installed ``prose serve``: the MCP Inspector CLI
lists the tools and starts a run over stdio. Needs Node: skips without ``npx`` locally and
fails without it under ``CI=true`` (``.ci/run`` installs the pinned Inspector)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

INSPECTOR_VERSION = "2.12.0"  # ../shared/spec/PLATFORM.md
PROSE = str(Path(sys.executable).with_name("prose"))
INSTALLED = Path(__file__).resolve().parents[2] / ".ci" / "node" / "node_modules" / ".bin" \
    / "mcp-inspector"
HOST_TOOLS = {"start_run", "spawn_session", "write_binding", "read_binding", "update_state",
              "push_frame", "pop_frame", "record_verdict", "read_memory", "write_memory",
              "complete_run", "run_status", "resume_run"}


def _inspector() -> list[str]:
    """The pinned Inspector: the copy .ci/run installs, else through npx."""
    if INSTALLED.exists():
        return [str(INSTALLED)]
    npx = shutil.which("npx")
    if npx is not None:
        return [npx, "-y", f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"]
    if os.environ.get("CI") == "true":
        pytest.fail("the MCP Inspector needs Node (npx) when CI=true: .ci/run installs it")
    pytest.skip("npx is not installed: the MCP Inspector CLI cannot run")


def _inspect(project: Path, *method: str) -> dict:
    command = [*_inspector(), "--cli", "--connect-timeout", "120000",  # a loaded CI box
               "-e", f"HOME={project.parent}",
               PROSE, "serve", "--project", str(project), *method]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          cwd=project.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_inspector_lists_the_tools_and_starts_a_run(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "research.prose").write_text(
        'input topic: "what to research"\nlet notes = session "Research {topic}"\n')

    tools = {tool["name"]: tool for tool in _inspect(project, "--method", "tools/list")["tools"]}
    assert set(tools) >= HOST_TOOLS
    assert all(tool["description"] and tool["inputSchema"]["type"] == "object"
               for tool in tools.values())

    started = _inspect(project, "--method", "tools/call", "--tool-name", "start_run",
                       "--tool-arg", "program=research.prose",
                       "--tool-arg", 'inputs={"topic": "owls"}')
    assert started["isError"] is False
    run_id = started["structuredContent"]["run_id"]
    assert run_id in started["content"][0]["text"]
    assert [entry["binds"] for entry in started["structuredContent"]["outline"]] == [
        "topic", "notes"]
    run_dir = project / ".prose" / "runs" / run_id
    assert (run_dir / "bindings" / "topic.md").read_text().count("owls") == 1
