"""``openprose.mcpb``: Claude Desktop's one-click MCP bundle of this openprose.

The bundle is a zip with ``manifest.json`` (MCPB manifest 0.4, server type ``uv``: the host
installs Python and the dependencies listed in the bundle's ``pyproject.toml``), this package's
source under ``src/`` and ``server/main.py``, which runs ``prose serve`` with the settings the
user gives in Claude Desktop: the project folder and the state backend (and PostgreSQL's URL).
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from importlib.metadata import metadata, requires, version
from pathlib import Path

import openprose
from openprose.cli.host_setup import SERVER_NAME, HostSetupError

MANIFEST_VERSION = "0.4"
ENTRY_POINT = "server/main.py"
#: Environment variables the manifest fills from the user's settings, read by ENTRY.
PROJECT_VARIABLE = "OPENPROSE_PROJECT"
STATE_VARIABLE = "OPENPROSE_STATE"

ENTRY = f'''"""Claude Desktop starts this (the bundle's entry point): prose serve for the user's project
and state backend, with the openprose source of the bundle."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
# A setting the user left empty reaches us unreplaced, as "${{user_config.NAME}}".
for name in [n for n, v in os.environ.items() if v.startswith("${{user_config.")]:
    del os.environ[name]

from openprose.cli import main  # noqa: E402

project = os.environ.get("{PROJECT_VARIABLE}") or str(Path.home())
sys.argv = ["prose", "serve", "--project", project,
            "--state", os.environ.get("{STATE_VARIABLE}") or "filesystem"]
main()
'''


def manifest() -> dict:
    """The bundle's ``manifest.json``: the server and the settings Claude Desktop asks for."""
    return {
        "manifest_version": MANIFEST_VERSION,
        "name": SERVER_NAME,
        "display_name": "OpenProse",
        "version": version("openprose"),
        "description": "Run OpenProse programs (.prose multi-agent workflows): the server keeps "
                       "each run's state and checks every step.",
        "author": {"name": "OpenProse contributors"},
        "license": "MIT",
        "keywords": ["openprose", "prose", "workflows", "multi-agent"],
        "server": {
            "type": "uv",
            "entry_point": ENTRY_POINT,
            "mcp_config": {
                "command": "uv",
                "args": ["run", "--quiet", "--directory", "${__dirname}", ENTRY_POINT],
                "env": {PROJECT_VARIABLE: "${user_config.project}",
                        STATE_VARIABLE: "${user_config.state_backend}",
                        "OPENPROSE_POSTGRES_URL": "${user_config.postgres_url}"},
            },
        },
        "compatibility": {"platforms": ["darwin", "win32", "linux"],
                          "runtimes": {"python": metadata("openprose")["Requires-Python"]}},
        "user_config": {
            "project": {
                "type": "directory", "title": "Project folder", "required": True,
                "description": "Programs are read from this folder and runs are kept in its "
                               ".prose/ folder."},
            "state_backend": {
                "type": "string", "title": "State backend", "default": "filesystem",
                "description": "Where new runs keep their state: filesystem (files under "
                               ".prose/runs), sqlite (.prose/state.db) or postgres."},
            "postgres_url": {
                "type": "string", "title": "PostgreSQL URL", "sensitive": True,
                "default": "",
                "description": "Only for the postgres backend: postgresql://user@host/db."},
        },
    }


def pyproject() -> str:
    """A project of the dependencies alone (no build step): what the host's uv installs."""
    needed = [r for r in requires("openprose") or [] if "extra ==" not in r]
    lines = ["[project]", 'name = "openprose-bundle"', f'version = "{version("openprose")}"',
             f'requires-python = "{metadata("openprose")["Requires-Python"]}"',
             "dependencies = ["] + [f"  {json.dumps(r)}," for r in needed] + ["]", ""]
    return "\n".join(lines)


def _sources() -> list[tuple[Path, str]]:
    """This package's files and where they go in the bundle (``src/openprose/...``)."""
    package = Path(openprose.__file__).resolve().parent
    found = []
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package)
        if (path.is_file() and "__pycache__" not in relative.parts
                and relative.parts[0] != "claude_plugin" and path.suffix != ".pyc"):
            found.append((path, f"src/openprose/{relative.as_posix()}"))
    return found


def build_bundle(output: Path) -> Path:
    """Write the bundle to ``output`` (a temporary file moved into place) and return it."""
    output = output.resolve()
    if output.is_dir():
        output = output / f"{SERVER_NAME}.mcpb"
    if not output.parent.is_dir():
        raise HostSetupError(f"--output {output}: no such directory {output.parent}")
    fd, temp = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as bundle:
            bundle.writestr("manifest.json", json.dumps(manifest(), indent=2) + "\n")
            bundle.writestr("pyproject.toml", pyproject())
            bundle.writestr(ENTRY_POINT, ENTRY)
            for path, name in _sources():
                bundle.write(path, name)
        os.chmod(temp, 0o644)
        os.replace(temp, output)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return output
