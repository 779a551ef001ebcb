"""Fixtures for the inspecting commands: a project on one backend (PostgreSQL in a schema of
its own) and ``prose`` invoked in process, as a user would type it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from openprose.cli import cli


@dataclass
class Project:
    root: Path
    backend: str

    def prose(self, *args: str) -> Result:
        return CliRunner().invoke(cli, [*args], catch_exceptions=False)

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(text, encoding="utf-8")
        return path

    def run(self, program: str, script: str = "default_output: ok\n", *extra: str) -> Result:
        """``prose run`` on the scripted provider; returns the result (run id in stderr)."""
        self.write("p.prose", program)
        self.write("s.yaml", script)
        return self.prose("run", str(self.root / "p.prose"), "--provider", "scripted",
                          "--script", str(self.root / "s.yaml"), "--state", self.backend,
                          "--project", str(self.root), *extra)


def run_id_of(result: Result) -> str:
    for line in result.stderr.splitlines():
        if line.startswith("run ") and line.endswith(" started"):
            return line.split()[1]
    raise AssertionError(f"no run id in: {result.stderr}")


@pytest.fixture
def project(backend: str, request: pytest.FixtureRequest, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.delenv("OPENPROSE_POSTGRES_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    if backend == "postgres":
        monkeypatch.setenv("OPENPROSE_POSTGRES_URL", request.getfixturevalue("pg_url"))
        monkeypatch.setenv("OPENPROSE_POSTGRES_SCHEMA", request.getfixturevalue("pg_schema"))
    root = tmp_path / "project"
    root.mkdir()
    return Project(root, backend)
