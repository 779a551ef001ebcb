"""A guided run survives its server: ``prose serve`` (stdio, a real pipe) is killed with
SIGKILL mid-run and started again; the host's next ``next_step`` continues the run, issuing
again only what was pending and never a session whose binding was already written."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from tests.mcp_server.guided_host import bindings_of

pytestmark = pytest.mark.anyio
PROSE = Path(sys.executable).with_name("prose")
PROGRAM = """\
let a = session "First step"
parallel:
  b = session "Second step"
  c = session "Third step"
if **the steps agree**:
  let d = session "Fourth step"
    context: { a, b, c }
output o = session "Last step"
  context: { a, b, c }
"""


class Stdio:
    """``prose serve`` over a real pipe, its pid known so the test can kill it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pidfile = root / "server.pid"

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[ClientSession]:
        self.killed = False
        params = StdioServerParameters(command="/bin/sh", args=[
            "-c", f'echo $$ > "{self.pidfile}"; exec "{PROSE}" serve --project "{self.root}"'])
        try:
            async with stdio_client(params) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                yield session
        except Exception as exc:  # a killed server ends its pipe abruptly: only that is fine
            if not self.killed or _failed_check(exc):
                raise

    def kill(self) -> None:
        os.kill(int(self.pidfile.read_text()), signal.SIGKILL)
        self.killed = True


def _failed_check(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_failed_check(inner) for inner in exc.exceptions)
    return isinstance(exc, AssertionError)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content[0].text}"
    return dict(result.structured_content or {})


async def pending(session: ClientSession, vm_token: str) -> dict[str, dict[str, Any]]:
    step = await call(session, "next_step", vm_token=vm_token, wait_s=10)
    assert step["status"] == "running", step
    return {item.get("binding") or item["condition"]: item for item in step["pending"]}


@dataclass
class Walk:
    """One guided run and the pending items each server issued for it."""

    backend: str
    run_id: str = ""
    vm_token: str = ""
    issued: tuple[list[str], list[str]] = field(default_factory=lambda: ([], []))
    final: dict[str, Any] = field(default_factory=dict)


async def first_half(session: ClientSession, walk: Walk) -> None:
    """Start the run, write "a" and "b"; "c" stays pending."""
    started = await call(session, "start_run", program="p.prose", mode="guided",
                         backend=walk.backend)
    walk.run_id, walk.vm_token = started["run_id"], started["vm_token"]
    items = await pending(session, walk.vm_token)
    walk.issued[0].extend(items)
    await call(session, "write_binding", token=items["a"]["token"], value="A", summary="a")
    items = await pending(session, walk.vm_token)
    walk.issued[0].extend(items)
    assert sorted(items) == ["b", "c"]
    await call(session, "write_binding", token=items["b"]["token"], value="B", summary="b")


async def second_half(session: ClientSession, walk: Walk) -> None:
    """After the restart: finish what is pending, then the rest of the program."""
    for expected in (["c"], ["the steps agree"], ["d"], ["o"]):
        items = await pending(session, walk.vm_token)
        walk.issued[1].extend(items)
        assert sorted(items) == expected
        item = items[expected[0]]
        if item["kind"] == "judgment":
            await call(session, "submit_verdict", token=item["token"], value=True,
                       reason="they agree")
        else:
            await call(session, "write_binding", token=item["token"],
                       value=item["binding"].upper(), summary=item["binding"])
    walk.final = await call(session, "next_step", vm_token=walk.vm_token, wait_s=10)


async def test_sigkilled_server_restarts_and_the_runs_continue(tmp_path):
    (tmp_path / "p.prose").write_text(PROGRAM)
    server = Stdio(tmp_path)
    walks = [Walk("filesystem"), Walk("sqlite")]
    with anyio.fail_after(300):
        async with server.session() as first:
            for walk in walks:
                await first_half(first, walk)
            server.kill()  # in both runs "c" is pending; "a" and "b" are written
        async with server.session() as second:
            for walk in walks:
                await second_half(second, walk)
    for walk in walks:
        assert walk.final["status"] == "completed", walk.final
        assert walk.issued[0] == ["a", "b", "c"]
        assert walk.issued[1] == ["c", "the steps agree", "d", "o"]  # nothing finished again
        assert bindings_of(tmp_path, walk.run_id, walk.backend) == {
            (name, None): name.upper() for name in "abcdo"}
