"""How hosts reach the server: stdio, or streamable HTTP on loopback behind a bearer token.

Over HTTP every request must carry ``Authorization: Bearer <token>``; anything else is answered
``401`` before it reaches the MCP layer. The token is ``OPENPROSE_MCP_TOKEN`` from the project's
settings (``.prose/.env``, then the environment) or one generated per start. Both transports stop
cleanly on SIGINT or SIGTERM: the server's lifespan is left, stores are closed, and the caller
gets the signal back to choose an exit status.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
import os
import queue
import re
import resource
import secrets
import select
import selectors
import signal
import socket
import stat
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.lowlevel import EventLoopToken
from anyio.streams.memory import MemoryObjectSendStream

from openprose.errors import OpenProseError
from openprose.state.config import MCP_TOKEN_SETTING, settings
from openprose.state.models import MAX_VALUE_BYTES

if TYPE_CHECKING:  # the SDK loads only once the settings and the port are known to be good
    from mcp.server.mcpserver import MCPServer

LOOPBACK = "127.0.0.1"
MCP_PATH = "/mcp"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Messages read from stdin ahead of the server taking them.
STDIN_BUFFER = 16
#: Bytes read from stdin at a time.
WIRE_CHUNK = 1 << 16
#: Messages queued for stdout before the event loop waits for the client to read.
STDOUT_QUEUE = 256
#: Seconds a stopping server gives its queued messages to reach the client.
STDOUT_DRAIN_S = 5.0
#: The largest message a client may send, on either transport: a value's limit and room for
#: the call around it. A longer stdio line is skipped unread and answered with an error naming
#: the limit; a longer HTTP body is answered 413. (Unbounded, one 200 MB line took the server
#: to 800 MB of memory; a few of them would end it.)
MAX_MESSAGE_BYTES = MAX_VALUE_BYTES + 1024 * 1024
#: The request id in a message's first bytes, before its params (clients send it there).
_REQUEST_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')

#: Seconds an HTTP connection may take to send a whole request head (a new connection, or a
#: kept-alive one between requests) before it is closed: no token is needed to open one.
HEAD_TIMEOUT_S = 10.0
#: Descriptors left to the rest of the server (stores, logs, the watcher) beside connections.
RESERVED_FDS = 64
#: Connections held at once, at most, however high the descriptor limit.
MAX_CONNECTIONS = 1000
_CONNECTION_NUMBERS = itertools.count()

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]


class TransportError(OpenProseError, RuntimeError):
    """The server cannot be reached as asked (port taken, bad token setting); says why."""


def configured_token(project_root: Path) -> str | None:
    """The bearer token the project's settings fix, if any."""
    token = settings(project_root).get(MCP_TOKEN_SETTING, "").strip()
    if not token:
        return None
    if len(token) < 16 or any(ch.isspace() or not ch.isprintable() for ch in token):
        raise TransportError(f"{MCP_TOKEN_SETTING} must be at least 16 printable characters "
                             "without spaces")
    return token


def new_token() -> str:
    return secrets.token_urlsafe(32)


class BearerAuth:
    """ASGI middleware: HTTP requests without the right bearer token get 401 and go no further."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    def authorized(self, scope: Scope) -> bool:
        header = next((value for key, value in scope.get("headers", ())
                       if key == b"authorization"), b"")
        scheme, _, credentials = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(),
                                                                   self._token)

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "http" and not self.authorized(scope):
            body = json.dumps({"error": "unauthorized",
                               "message": "send the server's token as "
                                          "'Authorization: Bearer <token>'"}).encode()
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="openprose"'),
                (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def bind_loopback(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0 picks a free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
    except OSError as exc:
        sock.close()
        raise TransportError(f"cannot listen on {LOOPBACK}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


def descriptor_budget() -> int:
    """The descriptors the limit leaves beside the server's own (:data:`RESERVED_FDS`), for
    what clients make it hold: connections, and the locks of the runs they drive."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_CONNECTIONS * 4 if soft == resource.RLIM_INFINITY else soft - RESERVED_FDS


def connection_budget() -> tuple[int, int]:
    """How many HTTP connections the server holds at once, and how many it accepts in one go
    (asyncio accepts up to its backlog before any is handed over, each a descriptor): half
    and a quarter of :func:`descriptor_budget`, at most :data:`MAX_CONNECTIONS` and 128."""
    budget = descriptor_budget()
    return max(8, min(MAX_CONNECTIONS, budget // 2)), max(4, min(128, budget // 4))


def plain_logging() -> None:
    """Log to stderr through a plain handler instead of the SDK's rich one, which imports its
    traceback renderer on the first error: with every descriptor in use that import failed
    too, and the failure to log ended the server. The plain handler needs nothing it has not
    loaded (without a descriptor, a traceback only lacks its source lines)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)


def _guarded_protocol(cap: int) -> type:
    """uvicorn's h11 protocol with two guards against connections that never finish a request
    head (uvicorn times out only idle kept-alive ones): such a connection is closed after
    :data:`HEAD_TIMEOUT_S`, and past ``cap`` connections the oldest one still waiting for a
    head is closed to make room (a request under way is never cut; with none waiting, the new
    connection is). An authenticated client, which sends its head at once, is served while
    unauthenticated ones hold connections open."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Guarded(H11Protocol):  # type: ignore[misc]
        number = 0
        deadline: asyncio.TimerHandle | None = None

        def waiting(self) -> bool:
            """No request under way: the connection is waiting for a request head."""
            return self.cycle is None or self.cycle.response_complete

        def arm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
            self.deadline = self.loop.call_later(HEAD_TIMEOUT_S, self.expire)

        def expire(self) -> None:
            if self.waiting() and not self.transport.is_closing():
                self.shutdown()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.number = next(_CONNECTION_NUMBERS)
            self.arm()
            if len(self.connections) <= cap:
                return
            idle = [c for c in self.connections
                    if isinstance(c, Guarded) and c.waiting() and not c.transport.is_closing()]
            oldest = min(idle, key=lambda c: c.number)  # this one is waiting too
            oldest.shutdown()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self.arm()

    return Guarded


def _uvicorn_server(app: ASGIApp, sock: socket.socket) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """Signals are ours (see :func:`serve_http`); uvicorn must not install or re-raise them."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    host, port = sock.getsockname()[:2]
    cap, backlog = connection_budget()
    return Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                 access_log=False, lifespan="on", timeout_graceful_shutdown=2,
                                 http=_guarded_protocol(cap), backlog=backlog))


async def _first_signal(received: list[int], stop: Callable[[], Awaitable[None]]) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            received.append(signum)
            await stop()
            return


class LineSplitter:
    """The client's bytes cut into messages, one per line. A line longer than
    :data:`MAX_MESSAGE_BYTES` is never held: once that many bytes came without a newline it
    is reported by its first bytes (to address the error) and the rest of it is dropped as it
    comes. A last line without a newline counts once the wire ends."""

    def __init__(self) -> None:
        self._held = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> list[tuple[bool, bytes]]:
        """``(True, line)`` for each whole line in ``chunk`` and what came before it, and
        ``(False, first bytes)`` for each line found too long."""
        found: list[tuple[bool, bytes]] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end + 1]
            start += len(piece)
            if self._skipping:
                self._skipping = end < 0
                continue
            if len(self._held) + len(piece) > MAX_MESSAGE_BYTES + (end >= 0):
                found.append((False, (bytes(self._held[:4096]) + piece[:4096])[:4096]))
                self._held.clear()
                self._skipping = end < 0
            elif end < 0:
                self._held += piece
            else:
                found.append((True, bytes(self._held + piece) if self._held else piece))
                self._held.clear()
        return found

    def end(self) -> list[tuple[bool, bytes]]:
        """The last line, when the wire ended without its newline."""
        rest, self._held = bytes(self._held), bytearray()
        return [(True, rest)] if rest and not self._skipping else []

    def take(self, chunk: bytes) -> list[tuple[bool, str]]:
        """What a read of ``chunk`` (empty: the wire ended) gives both readers:
        ``(True, message)`` to hand to the server and ``(False, error)`` to answer a line
        too long with."""
        return [(True, data.decode("utf-8", errors="replace")) if whole
                else (False, too_large(data))
                for whole, data in (self.feed(chunk) if chunk else self.end())]


async def _read_wire(fd: int, send: MemoryObjectSendStream[str], writer: LineWriter) -> None:
    """Hand the client's lines to the server, read on the event loop when the wire is
    readable: no thread wakes for a message, nor waits for the loop to take it. Nothing
    else reads the wire (no child process inherits it), so a readable wire never blocks."""
    loop = asyncio.get_running_loop()
    splitter = LineSplitter()
    try:
        while True:
            readable = loop.create_future()
            loop.add_reader(fd, readable.set_result, None)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
            try:
                chunk = os.read(fd, WIRE_CHUNK)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:  # the client's end is gone
                chunk = b""
            for whole, text in splitter.take(chunk):
                if whole:
                    await send.send(text)
                else:
                    await writer.write(text)
            if not chunk:
                return
    finally:
        send.close()


def pollable(fd: int) -> bool:
    """Whether the event loop can wait for ``fd`` to be readable: not a regular file (epoll
    refuses one; kqueue would never report its end), and one the selector takes."""
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return False
    with selectors.DefaultSelector() as probe:
        try:
            probe.register(fd, selectors.EVENT_READ)
        except PermissionError:
            return False
    return True


def _read_lines(fd: int, send: MemoryObjectSendStream[str], token: EventLoopToken,
                writer: LineWriter) -> None:
    """:func:`_read_wire` on a thread of its own, for a wire the event loop cannot poll (a
    regular file): until EOF or until the loop is gone, into the stream's buffer when it has
    room (a callback, no task), else waiting for room."""
    splitter = LineSplitter()
    try:
        while True:
            chunk = os.read(fd, WIRE_CHUNK)
            for whole, text in splitter.take(chunk):
                if not whole:
                    writer.send_now(text)
                    continue
                try:
                    anyio.from_thread.run_sync(send.send_nowait, text, token=token)
                except anyio.WouldBlock:
                    anyio.from_thread.run(send.send, text, token=token)
            if not chunk:
                break
        anyio.from_thread.run_sync(send.close, token=token)
    except (OSError, RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        return


def too_large(head: bytes) -> str:
    """The JSON-RPC error answering a message over the limit, whose first bytes are ``head``:
    addressed to its id when one comes before its params, else to none (null)."""
    before_params = head.split(b'"params"', 1)[0]
    found = _REQUEST_ID.search(before_params)
    request_id = json.loads(found.group(1)) if found else None
    limit = MAX_MESSAGE_BYTES // (1024 * 1024)
    message = (f"the message is larger than {limit} MiB and was not read (a value may hold at "
               f"most {MAX_VALUE_BYTES // (1024 * 1024)} MiB)")
    return json.dumps({"jsonrpc": "2.0", "id": request_id,
                       "error": {"code": -32600, "message": message}}) + "\n"


class LineWriter:
    """Messages to the client, in order, without the event loop ever waiting on the client.
    A reply that fits one atomic pipe write (:data:`select.PIPE_BUF`) while the pipe has room
    and nothing is queued goes out at once from the event loop: no thread has to be woken and
    win the interpreter lock from an engine walking on to its next statement. Any other
    message is queued for a thread of its own, which writes what is queued together in one
    write (the SDK's own writer waits for a worker thread to write each message and again to
    flush it). A failed write (the client went away) is raised at the next message."""

    def __init__(self, wire: int) -> None:
        self._wire = wire
        self._lines: queue.Queue[bytes | None] = queue.Queue(STDOUT_QUEUE)
        self._failed: OSError | None = None
        self._lock = threading.Lock()
        self._pending = 0  # lines handed to the thread and not yet written out
        #: Asks whether a pipe or a socket has room, whose "writable" promises a page (a
        #: terminal's or a file's does not promise as much: None, always the thread).
        self._room: select.poll | None = None
        mode = os.fstat(wire).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            self._room = select.poll()
            self._room.register(wire, select.POLLOUT)
        self._thread = threading.Thread(target=self._write_lines, name="prose-serve-stdout",
                                        daemon=True)
        self._thread.start()

    async def write(self, text: str) -> None:
        if self._failed is not None:
            raise self._failed
        line = text.encode("utf-8")
        with self._lock:
            if self._room is not None and not self._pending and \
                    len(line) <= select.PIPE_BUF and self._room.poll(0):
                self._write(memoryview(line))  # room for a page, at most a page: never blocks
                return
            self._pending += 1
        try:
            self._lines.put_nowait(line)
        except queue.Full:  # the client is not reading: wait for room off the event loop
            await anyio.to_thread.run_sync(self._lines.put, line)

    async def flush(self) -> None:
        """Nothing to do: lines are written unbuffered."""

    def send_now(self, text: str) -> None:
        """Queue ``text`` from a thread other than the event loop's (waits for room)."""
        with self._lock:
            self._pending += 1
        self._lines.put(text.encode("utf-8"))

    def close(self) -> None:
        """Write what is queued (for at most :data:`STDOUT_DRAIN_S`), then stop."""
        with contextlib.suppress(queue.Full):
            self._lines.put(None, timeout=STDOUT_DRAIN_S)
        self._thread.join(STDOUT_DRAIN_S)

    def _write(self, data: memoryview) -> None:
        try:
            while data and self._failed is None:  # nobody reads after a failure: drop
                data = data[os.write(self._wire, data):]
        except OSError as exc:
            self._failed = exc

    def _write_lines(self) -> None:
        done = False
        while not done:
            batch = [self._lines.get()]
            with contextlib.suppress(queue.Empty):
                while batch[-1] is not None and len(batch) < STDOUT_QUEUE:
                    batch.append(self._lines.get_nowait())
            done = batch[-1] is None
            lines = [line for line in batch if line is not None]
            self._write(memoryview(b"".join(lines)))
            with self._lock:
                self._pending -= len(lines)


@contextlib.contextmanager
def claimed_stdout() -> Iterator[int]:
    """The wire to the client: a private duplicate of stdout's descriptor, while descriptor
    1 goes to stderr so that nothing printed by accident can corrupt the protocol (as the
    SDK's own stdio transport does). Restored on exit."""
    sys.stdout.flush()
    wire = os.dup(1)  # not inherited by child processes
    os.dup2(2, 1)
    try:
        yield wire
    finally:
        os.dup2(wire, 1)
        os.close(wire)


async def serve_stdio(mcp: MCPServer) -> int | None:
    """Serve over stdin/stdout until the client closes stdin (None) or a stop signal (its
    number). Stdin is read on the event loop when it can be polled (a pipe, a socket, a
    terminal), else on a daemon thread (a file: a signal must not wait for a blocked read);
    see :class:`LineWriter` for replies."""
    from mcp.server.stdio import stdio_server

    received: list[int] = []
    send, lines = anyio.create_memory_object_stream[str](STDIN_BUFFER)
    with claimed_stdout() as wire:
        writer = LineWriter(wire)
        stdin = sys.stdin.fileno()
        try:
            async with anyio.create_task_group() as group, \
                    stdio_server(stdin=lines, stdout=writer) as streams:  # type: ignore[arg-type]
                if pollable(stdin):
                    group.start_soon(_read_wire, stdin, send, writer)
                else:
                    threading.Thread(target=_read_lines, name="prose-serve-stdin", daemon=True,
                                     args=(stdin, send, anyio.lowlevel.current_token(),
                                           writer)).start()

                async def stop() -> None:
                    group.cancel_scope.cancel()

                group.start_soon(_first_signal, received, stop)
                server = mcp._lowlevel_server
                await server.run(*streams, server.create_initialization_options())
                group.cancel_scope.cancel()
        finally:
            writer.close()
    return received[0] if received else None


async def serve_http(mcp: MCPServer, sock: socket.socket, token: str) -> int | None:
    """Serve streamable HTTP at ``/mcp`` on the bound loopback ``sock``, bearer token required,
    until a stop signal (its number is returned)."""
    app = BearerAuth(mcp.streamable_http_app(host=LOOPBACK,
                                             max_request_body_size=MAX_MESSAGE_BYTES), token)
    server = _uvicorn_server(app, sock)
    received: list[int] = []

    async def stop() -> None:
        """End every client's session first: an open event stream would otherwise hold the
        shutdown until uvicorn cancels it with a traceback."""
        sessions = mcp.session_manager._server_instances  # SDK 2.3: the live sessions
        for transport in list(sessions.values()):
            with contextlib.suppress(Exception):
                await transport.terminate()
        server.should_exit = True

    async with anyio.create_task_group() as group:
        group.start_soon(_first_signal, received, stop)
        await server.serve(sockets=[sock])
        group.cancel_scope.cancel()
    return received[0] if received else None
