"""Fixtures shared by the state contract suite.

Every contract test runs once per backend through the ``stores`` fixture: a factory that
opens :class:`StateStore` objects on one project (``tmp_path/"project"``) with the home
directory overridden to ``tmp_path/"home"``. Opening a second store on the same project is
how the tests simulate a restart. PostgreSQL tests each get a schema of their own, dropped
with CASCADE afterwards; they are skipped without ``OPENPROSE_TEST_POSTGRES_URL`` unless
``CI=true``, where a missing server is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openprose.state import StateStore, open_store

PG_ENV = "OPENPROSE_TEST_POSTGRES_URL"
BACKEND_PARAMS = [
    pytest.param("filesystem", id="filesystem"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


def require_postgres() -> str:
    """The test server's URL; skip without one (fail under CI=true)."""
    url = os.environ.get(PG_ENV)
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{PG_ENV} must be set when CI=true")
        pytest.skip(f"no PostgreSQL: set {PG_ENV} (eval \"$(scripts/pg-up)\")")
    return url


class PgAdmin:
    """One autocommit connection for the whole session, used only to drop test schemas."""

    def __init__(self) -> None:
        self._conn: Any = None

    def execute(self, sql: str) -> list[tuple[Any, ...]]:
        if self._conn is None:
            import psycopg

            self._conn = psycopg.connect(require_postgres(), autocommit=True)
        cursor = self._conn.execute(sql)
        return cursor.fetchall() if cursor.description else []

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[PgAdmin]:
    admin = PgAdmin()
    yield admin
    admin.close()


class Stores:
    """Opens stores of one backend on one project; closes them all at teardown."""

    def __init__(self, backend: str, root: Path, home: Path, url: str | None,
                 schema: str | None) -> None:
        self.backend = backend
        self.root = root
        self.home = home
        self.url = url
        self.schema = schema
        self._open: list[StateStore] = []

    def open(self, project: Path | None = None) -> StateStore:
        """A new store: a second call on the same project is a restart."""
        root = project or self.root
        root.mkdir(parents=True, exist_ok=True)
        kw: dict[str, Any] = {}
        if self.backend == "postgres":
            kw = {"postgres_url": self.url, "schema": self.schema}
        store = open_store(root, self.backend, home=self.home, **kw)
        self._open.append(store)
        return store

    def close_all(self) -> None:
        while self._open:
            self._open.pop().close()


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def _stores(backend: str, project: Path, home: Path, admin: PgAdmin) -> Iterator[Stores]:
    url = schema = None
    if backend == "postgres":
        url = require_postgres()
        schema = f"t_{uuid.uuid4().hex[:16]}"
    stores = Stores(backend, project, home, url, schema)
    try:
        yield stores
    finally:
        stores.close_all()
        if schema is not None:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def stores(backend: str, project: Path, home: Path, pg_admin: PgAdmin) -> Iterator[Stores]:
    yield from _stores(backend, project, home, pg_admin)


@pytest.fixture
def fs_stores(project: Path, home: Path, pg_admin: PgAdmin) -> Iterator[Stores]:
    """The filesystem backend only (for tests of its file layout)."""
    yield from _stores("filesystem", project, home, pg_admin)


@pytest.fixture
def pg_stores(project: Path, home: Path, pg_admin: PgAdmin) -> Iterator[Stores]:
    """PostgreSQL only (for tests about the PostgreSQL backend itself)."""
    yield from _stores("postgres", project, home, pg_admin)


@pytest.fixture
def store(stores: Stores) -> StateStore:
    return stores.open()


PROGRAM = """\
input topic: "what to research"
let research = session "Research {topic}"
let summary = session "Summarize"
  context: research
output report = session "Write the report"
"""


@pytest.fixture
def program() -> str:
    return PROGRAM
