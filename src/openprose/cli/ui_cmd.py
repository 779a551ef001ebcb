"""``prose ui``: serve a read-only web view of the project's runs on 127.0.0.1, live while
they go on. The printed address carries a token generated for this server (as Jupyter's
does); a request without it gets 401."""

from __future__ import annotations

import contextlib
import secrets
import socket
from pathlib import Path

import click

from openprose.cli.common import fail, project_option, state_option, stores


@click.command("ui")
@project_option
@state_option
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="Port on 127.0.0.1 (default: a free one).")
@click.option("--open", "open_browser", is_flag=True, help="Open the view in a browser.")
def ui_command(project: Path, backend: str | None, port: int, open_browser: bool) -> None:
    """Serve a web view of the project's runs (runs list, each run's program, timeline,
    bindings, agents and tool calls, updated live) on 127.0.0.1 until Ctrl-C."""
    try:
        import uvicorn

        from openprose.ui import create_app
    except ImportError as err:
        fail("ui", f"needs the 'ui' extra ({err.name} is missing): "
                   "pip install 'openprose[ui]'")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as err:
        fail("ui", f"cannot listen on 127.0.0.1:{port}: {err.strerror}")
    port = listener.getsockname()[1]
    token = secrets.token_urlsafe(24)
    with stores(project, backend, "ui") as opened:
        app = create_app(opened, token, port)
        url = f"http://127.0.0.1:{port}/?token={token}"
        click.echo(f"prose ui: serving {project.resolve()} at {url}", err=True)
        click.echo(url)
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1)  # open event streams
        server = uvicorn.Server(config)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn has stopped already
            server.run(sockets=[listener])
