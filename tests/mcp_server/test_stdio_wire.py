"""The stdio wire below the protocol: how the client's bytes become messages (read on the event
loop, or on a thread for a wire it cannot poll) and how replies reach the client in order
without the event loop ever waiting for it to read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openprose.mcp_server.transport import (
    MAX_MESSAGE_BYTES,
    LineSplitter,
    LineWriter,
    pollable,
)

pytestmark = pytest.mark.anyio
PROSE = str(Path(sys.executable).with_name("prose"))


def _feed(chunks: list[bytes]) -> list[tuple[bool, bytes]]:
    splitter = LineSplitter()
    found = [item for chunk in chunks for item in splitter.feed(chunk)]
    return found + splitter.end()


def test_lines_are_cut_wherever_the_reads_end() -> None:
    assert _feed([b'{"a": 1}\n{"b"', b': 2}\n', b"\n", b'{"c": 3}']) == [
        (True, b'{"a": 1}\n'), (True, b'{"b": 2}\n'), (True, b"\n"), (True, b'{"c": 3}')]


def test_a_line_at_the_limit_is_whole_and_one_byte_more_is_refused_by_its_head() -> None:
    at_limit = b"a" * MAX_MESSAGE_BYTES + b"\n"
    assert _feed([at_limit[:100], at_limit[100:]]) == [(True, at_limit)]
    over = b'{"id": 7, ' + b"x" * MAX_MESSAGE_BYTES
    found = _feed([over[:5000], over[5000:], b"tail of it\n", b'{"id": 8}\n'])
    assert found == [(False, over[:4096]), (True, b'{"id": 8}\n')]


def test_a_line_over_the_limit_is_never_held() -> None:
    """Refused as soon as the limit passes, without waiting for its newline: what follows
    of it is dropped as it comes, however long (a 200 MB line once took 800 MB)."""
    splitter = LineSplitter()
    assert splitter.feed(b"y" * MAX_MESSAGE_BYTES) == []
    assert splitter.feed(b"yy") == [(False, b"y" * 4096)]
    for _ in range(5):
        assert splitter.feed(b"y" * (1 << 20)) == []
    assert splitter.feed(b'y\n{"id": 9}\n') == [(True, b'{"id": 9}\n')]
    assert splitter.end() == []


async def test_replies_keep_their_order_while_the_client_reads_nothing() -> None:
    """A reply larger than the pipe waits on the writer's thread; the small ones after it
    queue behind it (never jumping ahead by the direct write) and the event loop never
    blocks on the full pipe."""
    read_end, write_end = os.pipe()
    writer = LineWriter(write_end)
    try:
        big = json.dumps({"id": 1, "result": "z" * 300_000}) + "\n"
        small = [json.dumps({"id": n}) + "\n" for n in range(2, 60)]
        await writer.write(big)
        for line in small:
            await writer.write(line)
        expected = (big + "".join(small)).encode()
        received = bytearray()
        while len(received) < len(expected):
            received += os.read(read_end, 1 << 16)
        assert bytes(received) == expected
        await writer.write('{"id": 60}\n')  # the pipe is empty again: written at once
        assert os.read(read_end, 1 << 16) == b'{"id": 60}\n'
    finally:
        writer.close()
        os.close(read_end)
        os.close(write_end)


def test_pollable_tells_a_pipe_from_a_file(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    path = tmp_path / "requests.jsonl"
    path.write_text("")
    with path.open("rb") as handle:
        try:
            assert pollable(read_end) and not pollable(handle.fileno())
        finally:
            os.close(read_end)
            os.close(write_end)


def test_serve_reads_requests_from_a_file(tmp_path: Path) -> None:
    """Stdin a regular file (``prose serve < requests.jsonl``): the event loop cannot poll
    it, so a thread reads it, with the same line rules: the handshake is answered, a line
    over the limit is refused by an error addressed to its id, and the server stops at the
    end of the file (the last line has no newline and still counts)."""
    project = tmp_path / "project"
    (project / ".prose").mkdir(parents=True)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "file", "version": "1"}}}
    requests = tmp_path / "requests.jsonl"
    with requests.open("wb") as out:
        out.write((json.dumps(initialize) + "\n").encode())
        out.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        out.write(b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"x": "'
                  + b"x" * MAX_MESSAGE_BYTES + b'"}}')
    with requests.open("rb") as stdin:
        done = subprocess.run([PROSE, "serve", "--project", str(project)], stdin=stdin,
                              capture_output=True, timeout=120,
                              env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [reply["id"] for reply in replies] == [1, 7]
    assert "larger than 11 MiB" in replies[1]["error"]["message"]
    assert b"Traceback" not in done.stderr
