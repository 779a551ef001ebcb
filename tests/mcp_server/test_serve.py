"""The installed ``prose serve``: stdio through the SDK's client over a real pipe, HTTP with and
without the bearer token, and clean stops on SIGINT/SIGTERM."""

from __future__ import annotations

import json
import os
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from openprose.mcp_server.transport import MAX_MESSAGE_BYTES

pytestmark = pytest.mark.anyio
PROSE = str(Path(sys.executable).with_name("prose"))
ERAS = [pytest.param({"mode": "legacy"}, id="handshake"), pytest.param({}, id="2026-07-28")]
PROMPTS = {"prose-run", "prose-compile", "prose-help", "prose-examples", "prose-update"}
TEMPLATES = {"prose://runs/{run_id}/state", "prose://runs/{run_id}/program",
             "prose://runs/{run_id}/bindings/{name}"}
PROGRAM = 'input topic: "what to research"\nlet notes = session "Research {topic}"\n'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".prose").mkdir(parents=True)
    (root / "research.prose").write_text(PROGRAM)
    return root


def _environ(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "OPENPROSE_MCP_TOKEN"}
    return {**env, **extra}


def _stdio(project: Path) -> StdioServerParameters:
    return StdioServerParameters(command=PROSE, args=["serve", "--project", str(project)],
                                 env={"HOME": str(project.parent)})


@pytest.mark.parametrize("era", ERAS)
async def test_stdio_serves_tools_prompts_and_resources(era: dict, project: Path) -> None:
    async with Client(_stdio(project), **era) as client:
        tools = (await client.list_tools()).tools
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        resources = {r.uri for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in
                     (await client.list_resource_templates()).resource_templates}
        compiled = await client.get_prompt("prose-compile", {"program": "research.prose"})
    assert tools
    assert prompts == PROMPTS
    assert resources == {"prose://runs"} and templates == TEMPLATES
    assert "research.prose" in compiled.messages[0].content.text


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    url: str
    stderr: list[str]

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str]:
        self.process.send_signal(signum)
        _, rest = self.process.communicate(timeout=120)
        return self.process.returncode, "".join(self.stderr) + rest.decode()


def _serve_http(project: Path, env: dict[str, str], descriptors: int | None = None) -> Served:
    """``prose serve --http 0``, under a descriptor limit of ``descriptors`` when given."""
    def limit() -> None:
        if descriptors is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, descriptors))

    process = subprocess.Popen([PROSE, "serve", "--project", str(project), "--http", "0"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, preexec_fn=limit,
                               bufsize=0)  # unbuffered: select() sees every unread line
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120  # a loaded CI box
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stderr], [], [], 0.2)
        if ready:
            line = process.stderr.readline().decode()
            if not line:
                break
            lines.append(line)
            if "bearer token" in line:
                found = re.search(r"http://127\.0\.0\.1:\d+/mcp", "".join(lines))
                assert found, lines
                return Served(process, found.group(0), lines)
    process.kill()
    raise AssertionError(f"prose serve --http did not start: {lines}")


@pytest.fixture
def served(project: Path) -> Iterator[Served]:
    served = _serve_http(project, _environ(HOME=str(project.parent)))
    yield served
    if served.process.poll() is None:
        served.process.kill()
        served.process.wait()


def _printed_token(served: Served) -> str:
    found = re.search(r"bearer token \(shown once\): (\S+)", "".join(served.stderr))
    assert found, served.stderr
    return found.group(1)


def _initialize() -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}}


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token-0123456789", "Basic abc",
                                           "Bearer"])
async def test_http_refuses_requests_without_the_token(served: Served,
                                                       authorization: str | None) -> None:
    headers = {"accept": "application/json, text/event-stream"}
    if authorization is not None:
        headers["authorization"] = authorization
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(served.url, json=_initialize(), headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in response.json()["message"]


@pytest.mark.parametrize("era", ERAS)
async def test_http_serves_clients_presenting_the_printed_token(served: Served, era: dict,
                                                                project: Path) -> None:
    token = _printed_token(served)
    headers = {"authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            Client(streamable_http_client(served.url, http_client=http), **era) as client:
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert (await client.list_tools()).tools
    assert prompts == PROMPTS
    status, stderr = served.stop()
    assert status == 128 + signal.SIGTERM
    assert "Traceback" not in stderr
    assert stderr.count(token) == 1  # printed once, never logged
    leaked = [p for p in project.rglob("*") if p.is_file() and token in p.read_text("utf-8",
                                                                                    "replace")]
    assert leaked == []


async def test_http_stops_cleanly_while_a_client_holds_a_session(served: Served) -> None:
    token = _printed_token(served)
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"},
                                  timeout=30) as http, \
            Client(streamable_http_client(served.url, http_client=http), mode="legacy") as client:
        assert (await client.list_tools()).tools  # the session's event stream is open
        status, stderr = await anyio.to_thread.run_sync(served.stop)
    assert status == 128 + signal.SIGTERM
    assert "Traceback" not in stderr and "Terminating session" not in stderr


async def test_http_token_from_project_settings_is_required_and_not_printed(
        project: Path) -> None:
    token = "project-token-" + "x" * 20
    (project / ".prose" / ".env").write_text(f"OPENPROSE_MCP_TOKEN={token}\n")
    served = _serve_http(project, _environ(HOME=str(project.parent)))
    try:
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = await http.post(served.url, json=_initialize(),
                                      headers={"authorization": "Bearer " + "y" * 34})
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"},
                                    timeout=30) as http, \
                Client(streamable_http_client(served.url, http_client=http)) as client:
            assert (await client.list_prompts()).prompts
    finally:
        status, stderr = served.stop(signal.SIGINT)
    assert refused.status_code == 401
    assert status == 128 + signal.SIGINT and "Traceback" not in stderr
    assert token not in stderr and "OPENPROSE_MCP_TOKEN" in stderr


def test_http_bad_token_setting_and_taken_port_are_clear_errors(project: Path) -> None:
    (project / ".prose" / ".env").write_text("OPENPROSE_MCP_TOKEN=short\n")
    bad = subprocess.run([PROSE, "serve", "--project", str(project), "--http", "0"],
                         capture_output=True, text=True, timeout=30, env=_environ())
    assert bad.returncode == 2
    assert "OPENPROSE_MCP_TOKEN must be at least 16" in bad.stderr
    assert "Traceback" not in bad.stderr

    (project / ".prose" / ".env").unlink()
    served = _serve_http(project, _environ())
    try:
        port = served.url.rsplit(":", 1)[1].split("/")[0]
        taken = subprocess.run([PROSE, "serve", "--project", str(project), "--http", port],
                               capture_output=True, text=True, timeout=30, env=_environ())
    finally:
        served.stop()
    assert taken.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    assert "Traceback" not in taken.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stdio_stops_cleanly_on_a_signal(project: Path, signum: int) -> None:
    process = subprocess.Popen([PROSE, "serve", "--project", str(project)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=_environ())
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(_jsonrpc_line())
    process.stdin.flush()
    assert b'"protocolVersion"' in process.stdout.readline()
    process.send_signal(signum)  # stdin stays open: the stop must not wait for a read
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum
    assert b"Traceback" not in stderr


def test_stdio_ends_when_the_client_closes_the_pipe(project: Path) -> None:
    process = subprocess.Popen([PROSE, "serve", "--project", str(project)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=_environ())
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(_jsonrpc_line())
    process.stdin.flush()
    assert b'"protocolVersion"' in process.stdout.readline()
    process.stdin.close()
    process.stdin = None  # communicate() must not flush the closed pipe
    rest, stderr = process.communicate(timeout=120)
    assert process.returncode == 0
    assert rest == b""  # nothing but protocol messages on stdout
    assert b"Traceback" not in stderr


def test_serve_refuses_a_missing_project(tmp_path: Path) -> None:
    done = subprocess.run([PROSE, "serve", "--project", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=30, env=_environ())
    assert done.returncode == 2 and "no such directory" in done.stderr


def _jsonrpc_line() -> bytes:
    return (json.dumps(_initialize()) + "\n").encode()


async def test_stdio_carries_megabyte_messages_both_ways(project: Path) -> None:
    """A message larger than the pipe's buffer reaches the server whole (read on the event
    loop as the pipe fills) and a reply larger than it reaches the client whole (written
    as the client drains the pipe), several of them in flight at once."""
    value = "".join(f"{i:07d}\n" for i in range(128 * 1024))  # 1 MiB, every line distinct
    async with Client(_stdio(project), mode="legacy") as client:
        started = await client.call_tool("start_run", {"program": "research.prose",
                                                       "inputs": {"topic": value}})
        vm = started.structured_content["vm_token"]
        reads: list[str] = []

        async def read() -> None:
            result = await client.call_tool("read_binding", {"token": vm, "name": "topic",
                                                             "limit": len(value)})
            reads.append(result.structured_content["value"])

        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(read)
    assert reads == [value] * 3


async def test_serve_state_option_is_the_backend_of_runs_started_without_one(
        project: Path) -> None:
    params = StdioServerParameters(command=PROSE, args=[
        "serve", "--project", str(project), "--state", "sqlite"], env={"HOME": str(project.parent)})
    async with Client(params, mode="legacy") as client:
        result = await client.call_tool("start_run", {"program": "research.prose",
                                                      "inputs": {"topic": "tides"}})
    assert not result.is_error, result.content
    assert result.structured_content["backend"] == "sqlite"
    assert (project / ".prose" / "runs" / result.structured_content["run_id"] / "state.db").is_file()


def test_stdio_answers_a_message_over_the_limit_without_holding_it(project: Path) -> None:
    """A line longer than MAX_MESSAGE_BYTES is skipped as it is read (a 200 MB line once took
    the server to 800 MB of memory) and answered with an error addressed to its id; the
    server goes on serving."""
    process = subprocess.Popen([PROSE, "serve", "--project", str(project)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=_environ())
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(_jsonrpc_line())
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1
        head = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": ' \
               b'"compile_program", "arguments": {"program": "'
        process.stdin.write(head + b"x" * MAX_MESSAGE_BYTES + b'"}}}\n')
        process.stdin.write(b'{"jsonrpc": "2.0", "id": 8, "method": "ping"}\n')
        process.stdin.flush()
        refused = json.loads(process.stdout.readline())
        assert refused["id"] == 7 and refused["error"]["code"] == -32600
        assert "larger than 11 MiB" in refused["error"]["message"]
        assert json.loads(process.stdout.readline()) == {"jsonrpc": "2.0", "id": 8,
                                                         "result": {}}
    finally:
        process.stdin.close()
        process.wait(timeout=30)


async def test_http_takes_what_stdio_takes_and_refuses_more(served: Served) -> None:
    """The HTTP body limit is the stdio one (the SDK's default, 4 MiB, refused a value that
    stdio takes)."""
    token = _printed_token(served)
    value = "x" * (5 * 1024 * 1024)
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"},
                                  timeout=60) as http:
        async with Client(streamable_http_client(served.url, http_client=http),
                          mode="legacy") as client:
            result = await client.call_tool("compile_program", {"program": value})
            assert result.is_error and "1 MiB" in result.content[0].text
        too_big = await http.post(served.url, content=b"x" * (MAX_MESSAGE_BYTES + 1),
                                  headers={"content-type": "application/json",
                                           "accept": "application/json, text/event-stream"})
        assert too_big.status_code == 413


@pytest.mark.parametrize(("header", "value", "status"), [
    ("host", "evil.example:8000", 421), ("origin", "http://evil.example", 403)])
async def test_http_refuses_a_page_of_another_origin_even_with_the_token(
        served: Served, header: str, value: str, status: int) -> None:
    """DNS rebinding: a web page whose name resolves to 127.0.0.1 sends its own Host (and
    Origin); the SDK's protection, on for a loopback server, refuses both before any tool."""
    headers = {"authorization": f"Bearer {_printed_token(served)}",
               "accept": "application/json, text/event-stream", header: value}
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(served.url, json=_initialize(), headers=headers)
        assert response.status_code == status
        query = await http.post(f"{served.url}?token={_printed_token(served)}",
                                json=_initialize(),
                                headers={"accept": "application/json, text/event-stream"})
        assert query.status_code == 401  # a token in the URL is not a bearer token


def _closed_by_server(connection: socket.socket) -> bool:
    """Waits for the server to close ``connection`` (an end of file, or a reset: it closed
    with our unread head in its buffer)."""
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


async def test_http_serves_a_client_while_hundreds_of_connections_never_finish_a_head(
        project: Path) -> None:
    """Opening a connection needs no token and one that never finished its request head was
    held for ever: 400 of them under a 300-descriptor limit ended the server. Past its cap the
    server closes the oldest connection still waiting for a head, so the authenticated client
    is answered meanwhile (and each one left waiting is closed after HEAD_TIMEOUT_S)."""
    served = _serve_http(project, _environ(HOME=str(project.parent)), descriptors=200)
    host, port = re.search(r"//([\d.]+):(\d+)/", served.url).groups()  # type: ignore[union-attr]
    held: list[socket.socket] = []
    try:
        for _ in range(400):
            connection = socket.create_connection((host, int(port)), timeout=60)
            connection.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ended
            held.append(connection)
        assert _closed_by_server(held[0])  # the oldest, to make room
        token = _printed_token(served)
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"},
                                      timeout=60) as http, \
                Client(streamable_http_client(served.url, http_client=http),
                       mode="legacy") as client:
            assert (await client.list_tools()).tools
        assert served.process.poll() is None
    finally:
        for connection in held:
            connection.close()
        status, stderr = served.stop()
    assert status == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
