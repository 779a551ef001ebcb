"""``prose install-skill --bundle`` builds ``openprose.mcpb``, Claude Desktop's one-click bundle:
the MCPB tools (``@anthropic-ai/mcpb``, pinned in ``.ci/run``) validate its manifest, unpack it
and pack it again; the server configuration they derive from the manifest and the user's
settings (project folder, state backend) starts a server that keeps runs in that folder on
that backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from tests.hosts.claude_code import required_tool

PROSE = Path(sys.executable).with_name("prose")


def mcpb(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = required_tool("mcpb", "OPENPROSE_TEST_MCPB", "mcpb (@anthropic-ai/mcpb)")
    return subprocess.run([command, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def host_config(unpacked: Path, settings: dict[str, str]) -> dict:
    """The server configuration an MCPB host derives (the package's getMcpConfigForManifest)
    from the bundle's manifest and the user's settings."""
    package = Path(required_tool("mcpb", "OPENPROSE_TEST_MCPB", "mcpb")).resolve().parents[2]
    script = (f"import {{getMcpConfigForManifest}} from {json.dumps((package / 'dist' / 'index.js').as_uri())};"
              "const [manifest, dir, settings] = JSON.parse(process.argv[1]);"
              "const config = await getMcpConfigForManifest({manifest, extensionPath: dir,"
              " systemDirs: {HOME: dir}, userConfig: settings, pathSeparator: '/'});"
              "console.log(JSON.stringify(config));")
    manifest = json.loads((unpacked / "manifest.json").read_text())
    done = subprocess.run(["node", "--input-type=module", "-e", script,
                           json.dumps([manifest, str(unpacked), settings])],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_bundle_validates_unpacks_packs_and_serves_the_chosen_project_and_backend(
        tmp_path: Path) -> None:
    built = subprocess.run([str(PROSE), "install-skill", "--bundle", "--output", str(tmp_path)],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    bundle = tmp_path / "openprose.mcpb"
    assert f"Built {bundle}" in built.stdout

    unpacked = tmp_path / "unpacked"
    done = mcpb("unpack", str(bundle), str(unpacked), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    done = mcpb("validate", str(unpacked / "manifest.json"), cwd=tmp_path)
    assert done.returncode == 0 and "validation passes" in done.stdout, done.stdout + done.stderr
    done = mcpb("pack", str(unpacked), str(tmp_path / "repacked.mcpb"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr

    manifest = json.loads((unpacked / "manifest.json").read_text())
    settings = manifest["user_config"]
    assert settings["project"]["type"] == "directory" and settings["project"]["required"]
    assert settings["state_backend"]["default"] == "filesystem"
    assert settings["postgres_url"]["sensitive"]

    project = tmp_path / "my project"
    project.mkdir()
    (project / "hello.prose").write_text('output greeting = session "Say hello"\n')
    config = host_config(unpacked, {"project": str(project), "state_backend": "sqlite"})
    assert config["command"] == "uv" and config["args"][-1] == manifest["server"]["entry_point"]
    # The host's uv would make this environment from the bundle's pyproject.toml; this test's
    # interpreter already has those dependencies, and runs the bundle's own copy of openprose.
    entry = Path(config["args"][config["args"].index("--directory") + 1]) / config["args"][-1]
    env = {**config["env"], "PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    params = StdioServerParameters(command=sys.executable, args=["-I", str(entry)], env=env)

    async def start_a_run() -> dict:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            result = await client.call_tool("start_run", {"program": "hello.prose"})
            assert not result.is_error, result.content
            return result.structured_content or {}

    started = anyio.run(start_a_run)
    assert started["backend"] == "sqlite"
    assert (project / ".prose" / "runs" / started["run_id"] / "state.db").is_file()
