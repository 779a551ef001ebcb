"""Fixtures shared by the state contract suite.

Every contract test runs once per backend through the ``stores`` fixture: a factory that
opens :class:`StateStore` objects on one project (``tmp_path/"project"``) with the home
directory overridden to ``tmp_path/"home"``. Opening a second store on the same project is
how the tests simulate a restart. PostgreSQL tests each get a schema of their own, dropped
with CASCADE afterwards; they are skipped without ``OPENPROSE_TEST_POSTGRES_URL`` unless
``CI=true``, where a missing server is a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openprose.state import StateStore, open_store


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


def _stores(backend: str, project: Path, home: Path,
            request: pytest.FixtureRequest) -> Iterator[Stores]:
    url = schema = None
    if backend == "postgres":
        url = request.getfixturevalue("pg_url")
        schema = request.getfixturevalue("pg_schema")
    stores = Stores(backend, project, home, url, schema)
    try:
        yield stores
    finally:
        stores.close_all()


@pytest.fixture
def stores(backend: str, project: Path, home: Path,
           request: pytest.FixtureRequest) -> Iterator[Stores]:
    yield from _stores(backend, project, home, request)


@pytest.fixture
def fs_stores(project: Path, home: Path, request: pytest.FixtureRequest) -> Iterator[Stores]:
    """The filesystem backend only (for tests of its file layout)."""
    yield from _stores("filesystem", project, home, request)


@pytest.fixture
def pg_stores(project: Path, home: Path, request: pytest.FixtureRequest) -> Iterator[Stores]:
    """PostgreSQL only (for tests about the PostgreSQL backend itself)."""
    yield from _stores("postgres", project, home, request)


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
