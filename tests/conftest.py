"""What every test directory shares: the state backends a test runs on and where the corpus is.

A test that takes ``backend`` runs once per backend. PostgreSQL runs need a server
(``OPENPROSE_TEST_POSTGRES_URL``, see ``scripts/pg-up``): without one they are skipped, unless
``CI=true``, where a missing server is a failure. ``pg_schema`` gives a test a schema of its own,
dropped with CASCADE afterwards.

The corpus of real programs lives outside the repository: ``OPENPROSE_CORPUS`` names it, else
``shared/corpus`` beside the checkout (a clone) or one level further up (a worktree under wt/).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PG_ENV = "OPENPROSE_TEST_POSTGRES_URL"
PG_URL = os.environ.get(PG_ENV)
BACKENDS = [pytest.param("filesystem", id="filesystem"), pytest.param("sqlite", id="sqlite"),
            pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]

_REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("OPENPROSE_CORPUS") or next(
    (p for p in (_REPO.parent / "shared" / "corpus", _REPO.parents[1] / "shared" / "corpus")
     if p.is_dir()), _REPO.parent / "shared" / "corpus")).resolve()


async def no_sleep(seconds: float) -> None:
    """An engine ``sleep`` that returns at once: retries and backoffs cost no test time."""
    return None


def require_postgres() -> str:
    """The test server's URL; skip without one (fail under CI=true)."""
    if not PG_URL:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{PG_ENV} must be set when CI=true")
        pytest.skip(f"no PostgreSQL: set {PG_ENV} (eval \"$(scripts/pg-up)\")")
    return PG_URL


class PgAdmin:
    """One autocommit connection for the whole session, for creating and dropping test schemas."""

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


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        require_postgres()
    return request.param


@pytest.fixture
def pg_url() -> str:
    """The test server's URL (skips the test without one)."""
    return require_postgres()


@pytest.fixture
def pg_schema(pg_admin: PgAdmin) -> Iterator[str]:
    """A fresh schema name on the test server, dropped afterwards."""
    require_postgres()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    yield schema
    pg_admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def corpus() -> Path:
    """The corpus directory; skips the test when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS} (set OPENPROSE_CORPUS)")
    return CORPUS
