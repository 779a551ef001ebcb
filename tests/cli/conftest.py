"""Fixtures for the inspecting commands: a project on one backend (PostgreSQL in a schema of
its own) and ``prose`` invoked in process, as a user would type it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from openprose.cli import cli

PG_ENV = "OPENPROSE_TEST_POSTGRES_URL"
BACKENDS = ["filesystem", "sqlite",
            pytest.param("postgres", marks=pytest.mark.postgres)]


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


@pytest.fixture(params=BACKENDS)
def project(request: pytest.FixtureRequest, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    backend = request.param
    schema = None
    monkeypatch.delenv("OPENPROSE_POSTGRES_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    if backend == "postgres":
        url = os.environ.get(PG_ENV)
        if not url:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{PG_ENV} must be set when CI=true")
            pytest.skip(f"no PostgreSQL: set {PG_ENV}")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        monkeypatch.setenv("OPENPROSE_POSTGRES_URL", url)
        monkeypatch.setenv("OPENPROSE_POSTGRES_SCHEMA", schema)
    root = tmp_path / "project"
    root.mkdir()
    yield Project(root, backend)
    if schema is not None:
        import psycopg

        with psycopg.connect(os.environ[PG_ENV], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
