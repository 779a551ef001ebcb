"""`prose serve --http` replicas sharing one PostgreSQL: a host-driven run whose replica is
SIGKILLed goes on when the same client's next call (its VM token, its session token) reaches
another replica, with no take_over; the bearer token is the shared setting on both."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from openprose.state import open_store

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

PROSE = str(Path(sys.executable).with_name("prose"))
TOKEN = "replica-test-token-0123456789"
PROGRAM = """\
let notes = session "Take notes"
output result = session "Sum up"
  context: notes
"""


def replica(root: Path) -> tuple[subprocess.Popen, str]:
    """A `prose serve --http` on a free port; its URL once it listens (read from stderr)."""
    proc = subprocess.Popen([PROSE, "serve", "--project", str(root), "--http", "0",
                             "--state", "postgres"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, bufsize=0)
    assert proc.stderr is not None
    seen = ""
    while True:
        select.select([proc.stderr], [], [], 120)
        line = proc.stderr.readline().decode()
        assert line, f"prose serve --http ended: {seen}"
        seen += line
        found = re.search(r"http://127\.0\.0\.1:\d+/mcp", seen)
        if found:
            return proc, found.group(0)


@pytest.fixture
def replicas(tmp_path: Path, pg_url: str, pg_schema: str,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[subprocess.Popen, str]]]:
    monkeypatch.setenv("OPENPROSE_POSTGRES_URL", pg_url)
    monkeypatch.setenv("OPENPROSE_POSTGRES_SCHEMA", pg_schema)
    monkeypatch.setenv("OPENPROSE_MCP_TOKEN", TOKEN)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "p.prose").write_text(PROGRAM)
    started = [replica(tmp_path), replica(tmp_path)]
    yield started
    for proc, _ in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return dict(result.structured_content or {})


async def test_a_vm_token_goes_on_at_another_replica(
        tmp_path: Path, replicas: list[tuple[subprocess.Popen, str]]) -> None:
    (first, first_url), (_, second_url) = replicas
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(first_url, http_client=http),
                   mode="legacy") as client:
        run = await call(client, "start_run", program="p.prose", backend="postgres")
        spawned = await call(client, "spawn_session", vm_token=run["vm_token"],
                             statement="0", prompt="Take notes")
        first.send_signal(signal.SIGKILL)  # mid-run, with its lock and a live session
        first.wait()
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(second_url, http_client=http),
                   mode="legacy") as client:
        await call(client, "write_binding", token=spawned["session_token"], value="n")
        last = await call(client, "spawn_session", vm_token=run["vm_token"], statement="1",
                          prompt="Sum up")
        await call(client, "write_binding", token=last["session_token"], value="sum")
        await call(client, "complete_run", vm_token=run["vm_token"])
    with open_store(tmp_path, "postgres", home=tmp_path) as store:
        done = store.open_run(run["run_id"])
        assert done.status == "completed"
        assert {b.name: b.value for b in done.bindings()} == {"notes": "n", "result": "sum"}
