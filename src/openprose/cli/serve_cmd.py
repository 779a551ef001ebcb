"""``prose serve``: the MCP server for hosts that run programs themselves (stdio or HTTP)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import click

from openprose.state import BACKENDS

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


@click.command("serve")
@click.option("--project", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default=True, help="Project directory: programs are read and runs kept "
                                      "under it (.prose/).")
@click.option("--http", "http_port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio (0 picks a "
                   "free port). Clients must send the bearer token.")
@click.option("--state", "backend", type=click.Choice(BACKENDS), default="filesystem",
              show_default=True, help="State backend of the runs a host starts without naming "
                                      "one (start_run, run_program).")
@click.option("--workers", is_flag=True,
              help="run_program queues its runs for `prose worker` processes and answers "
                   "with the run id at once (needs --state postgres; OPENPROSE_WORKERS=1).")
def serve_command(project: Path, http_port: int | None, backend: str, workers: bool) -> None:
    """Serve OpenProse to MCP hosts (Claude Desktop, Claude Code, …).

    By default the server speaks MCP over stdin/stdout, as hosts start it. With --http it
    listens on loopback only and answers 401 to any request without
    'Authorization: Bearer TOKEN'. TOKEN is OPENPROSE_MCP_TOKEN from .prose/.env or the
    environment, or else a fresh one printed once to stderr.

    Stops cleanly on Ctrl-C or SIGTERM (exit 130 and 143), or when a stdio client closes
    the pipe (exit 0).
    """
    root = project.resolve()
    if not root.is_dir():
        raise click.UsageError(f"--project {project}: no such directory")
    from openprose.mcp_server.transport import (
        MCP_PATH,
        TransportError,
        bind_loopback,
        configured_token,
        new_token,
        serve_http,
        serve_stdio,
    )
    from openprose.state.config import MCP_TOKEN_SETTING

    workers = _workers(root, backend, workers)
    try:
        if http_port is None:
            signum = anyio.run(serve_stdio, _server(root, backend, workers))
        else:
            token = configured_token(root)
            sock = bind_loopback(http_port)
            mcp = _server(root, backend, workers)  # loaded before the address is announced
            host, port = sock.getsockname()[:2]
            click.echo(f"prose serve: MCP over HTTP at http://{host}:{port}{MCP_PATH} "
                       f"(project {root})", err=True)
            if token is None:
                token = new_token()
                click.echo(f"prose serve: bearer token (shown once): {token}", err=True)
            else:
                click.echo(f"prose serve: bearer token from {MCP_TOKEN_SETTING}", err=True)
            signum = anyio.run(serve_http, mcp, sock, token)
    except TransportError as exc:
        click.echo(f"prose serve: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        signum = 2
    if signum is not None:
        sys.exit(128 + signum)


def _workers(root: Path, backend: str, flag: bool) -> bool:
    """Whether run_program queues runs for workers (``--workers`` or the setting); refused
    without PostgreSQL or the workers extra."""
    from openprose.engine.permissions import truthy
    from openprose.state import settings
    from openprose.state.config import WORKERS_SETTING

    if not (flag or truthy(settings(root).get(WORKERS_SETTING))):
        return False
    if backend != "postgres":
        raise click.UsageError(f"--workers ({WORKERS_SETTING}) queues run_program's runs in "
                               "PostgreSQL for `prose worker`: add --state postgres")
    from openprose.cli.worker_cmd import check_queue
    from openprose.workers.queue import DEFAULT_QUEUE

    check_queue("serve", DEFAULT_QUEUE)  # the workers extra is installed
    return True


def _server(root: Path, backend: str, workers: bool) -> MCPServer:
    """The server for ``root``; the SDK is loaded only now, once the options proved good."""
    from openprose.mcp_server.server import create_server
    from openprose.mcp_server.transport import plain_logging

    server = create_server(root, backend=backend, workers=workers)
    plain_logging()  # after the SDK configured its own
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK's per-session chatter
    return server
