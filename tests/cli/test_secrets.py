"""A PostgreSQL password never reaches a message, whatever shape the URL takes: a URL's user
part, its query (``?password=``), key=value words, or a string the driver cannot parse (whose
error quotes it). Port 9 on loopback: nothing listens, the connection is refused at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from tests.cli.conftest import Project

from openprose.mcp_server.server import create_server

SECRET = "pg-Secret-41c9"
URLS = [
    pytest.param(f"postgresql://op:{SECRET}@127.0.0.1:9/db", id="url"),
    pytest.param(f"postgresql://op@127.0.0.1:9/db?password={SECRET}", id="query"),
    pytest.param(f"host=127.0.0.1 port=9 password={SECRET} dbname=db", id="words"),
    pytest.param(f"host=127.0.0.1 password='{SECRET} x' dbname=db", id="quoted-words"),
    pytest.param(f"host=127.0.0.1 password={SECRET} stray", id="unparsable"),
    pytest.param(f"postgresql://op:{SECRET}@127.0.0.1:notaport/db", id="bad-port"),
]


@pytest.fixture
def project(tmp_path: Path, request: pytest.FixtureRequest,
            monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / ".env").write_text(f'OPENPROSE_POSTGRES_URL="{request.param}"\n')
    (tmp_path / "p.prose").write_text('output o = session "x"\n')
    return Project(tmp_path, "postgres")


@pytest.mark.parametrize("project", URLS, indirect=True)
def test_doctor_and_the_commands_never_show_the_password(project: Project) -> None:
    for args in (["doctor"], ["doctor", "--json"], ["runs", "--state", "postgres"],
                 ["show", "latest", "--state", "postgres"]):
        result = project.prose(*args, "--project", str(project.root))
        output = result.stdout + result.stderr
        assert "postgres" in output.lower(), (args, output)  # it did say something
        assert SECRET not in output, (args, output)


@pytest.mark.anyio
@pytest.mark.parametrize("project", URLS, indirect=True)
async def test_a_tool_refusing_the_backend_never_shows_the_password(project: Project) -> None:
    async with Client(create_server(project.root, home=project.root / "home",
                                    watch=False)) as client:
        result = await client.call_tool("start_run", {"program": "p.prose",
                                                      "backend": "postgres"})
    text = result.content[0].text
    assert result.is_error and "PostgreSQL" in text and SECRET not in text, text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
