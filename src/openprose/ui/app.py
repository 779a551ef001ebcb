"""The web view's Starlette application: a token gate, strict headers, GET routes only.

Every request must come to a loopback host name (a DNS-rebinding page reaches 127.0.0.1
under its own name, refused here) and carry the token: in the URL once (``?token=``, which
sets an HttpOnly, SameSite=Strict cookie and redirects to the same page without it), then in
the cookie. Anything else gets 401. What a run holds is untrusted text: the templates
escape everything (Jinja2 autoescape) and the Content-Security-Policy allows no inline
script or style, only this package's static files.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import anyio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from openprose.cli.common import size_text
from openprose.cli.watch_cmd import Wakeup, run_dir
from openprose.state import StateError
from openprose.ui import pages

HERE = Path(__file__).parent
LOOPBACK = frozenset({"127.0.0.1", "localhost", "[::1]"})
HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
     b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
     b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
#: A page shows a run as it is now: never kept. The static files are named by their
#: content (``?v=``): kept, so a page's stylesheet and script cost no request after the first.
NO_STORE = (b"cache-control", b"no-store")
KEPT = (b"cache-control", b"private, max-age=31536000, immutable")


def cookie_name(port: int) -> str:
    """One cookie per port: two views on one machine do not take each other's token."""
    return f"openprose_ui_{port}"


class TokenGate:
    """ASGI middleware: loopback Host, GET/HEAD only, the token, and the headers."""

    def __init__(self, app: ASGIApp, token: str, port: int) -> None:
        self.app, self.token, self.cookie = app, token, cookie_name(port)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = scope["path"].startswith("/static/") and message["status"] == 200
                message["headers"] = [*message.get("headers", []), *HEADERS,
                                      KEPT if kept else NO_STORE]
            await send(message)

        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if name.lower() not in LOOPBACK:
            await PlainTextResponse("400: this view answers only to 127.0.0.1 and localhost",
                                    400)(scope, receive, send_with_headers)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await PlainTextResponse("405: this view only reads", 405, headers={
                "allow": "GET, HEAD"})(scope, receive, send_with_headers)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = next((value for key, value in query if key == "token"), None)
        if given is not None and self._valid(given):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            path = "/" + scope["path"].lstrip("/")  # never "//host": another site
            response = Response(status_code=303, headers={
                "location": path + (f"?{rest}" if rest else "")})
            response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict",
                                path="/")
            await response(scope, receive, send_with_headers)
            return
        cookies = SimpleCookie(headers.get(b"cookie", b"").decode("latin-1"))
        held = cookies.get(self.cookie)
        if held is None or not self._valid(held.value):
            await PlainTextResponse("401: open the address `prose ui` printed (it carries the "
                                    "token)", 401)(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _valid(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())


def create_app(stores: list[Any], token: str, port: int,
               cache: pages.Cache | None = None) -> ASGIApp:
    """The view of ``stores`` (opened by the caller, who closes them)."""
    cache = cache if cache is not None else pages.Cache()
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.globals["static_version"] = hashlib.sha256(b"".join(
        path.read_bytes() for path in sorted((HERE / "static").iterdir()))).hexdigest()[:12]
    for name in ("runs.html", "run.html", "live.html"):
        env.get_template(name)  # compiled now, not by a first visit

    def render(name: str, code: int = 200, /, **data: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(name).render(**data), code)

    def number(request: Request, key: str) -> int:
        text = request.query_params.get(key, "1")
        return int(text) if text.isdigit() else 1

    def runs(request: Request) -> Response:
        data = pages.run_list(stores, request.query_params.get("status", ""),
                              request.query_params.get("program", ""), number(request, "page"),
                              cache)
        return render("runs.html", **data)

    def store_of(run_id: str) -> Any:
        store = pages.find_store(stores, run_id)
        if store is None:
            raise LookupError(f"no run {run_id!r} in this project")
        return store

    def run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        fragment = request.query_params.get("part") == "live"
        try:
            store = store_of(run_id)
            data = pages.run_page(cache, store, run_id, number(request, "spage"),
                                  number(request, "bpage"))
        except (LookupError, StateError) as err:
            return render("missing.html", 404, message=str(err))
        return render("live.html" if fragment else "run.html", **data)

    def binding(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        eid_text = request.query_params.get("eid", "")
        if eid_text and not eid_text.isdigit():
            return render("missing.html", 404, message=f"eid {eid_text!r}: a block execution "
                                                       "number (a positive integer)")
        try:
            found = pages.binding_value(store_of(run_id), run_id, request.path_params["name"],
                                        int(eid_text) if eid_text else None)
        except (LookupError, StateError) as err:
            return render("missing.html", 404, message=str(err))
        if found is None:
            return render("missing.html", 404, message=f"run {run_id} has no binding "
                                                       f"{request.path_params['name']!r}")
        return render("binding.html", run_id=run_id, binding=found,
                      size=size_text(len(found.value.encode())))

    async def events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            store = await anyio.to_thread.run_sync(store_of, run_id)
        except LookupError as err:
            return PlainTextResponse(str(err), 404)
        return StreamingResponse(_changes(request, store, run_id),
                                 media_type="text/event-stream")

    routes = [
        Route("/", runs),
        Route("/runs/{run_id}", run),
        Route("/runs/{run_id}/bindings/{name}", binding),
        Route("/runs/{run_id}/events", events),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return TokenGate(Starlette(routes=routes), token, port)


async def _changes(request: Request, store: Any, run_id: str) -> AsyncIterator[str]:
    """Server-sent events: ``change`` whenever the run records something, ``end`` once it
    has ended. Woken by file events on the filesystem backend, by polling otherwise."""
    last = None
    yield "retry: 1000\n\n"
    with Wakeup(run_dir(store, run_id)) as wakeup:
        while not await request.is_disconnected():
            started = time.monotonic()
            try:
                mark = await anyio.to_thread.run_sync(pages.change_mark, store, run_id)
            except StateError:
                yield "event: gone\ndata: \n\n"
                return
            cost = time.monotonic() - started
            if mark != last:  # the first too: the page may predate this connection
                yield f"event: change\ndata: {mark[0]}\n\n"
                last = mark
            if mark[0] in pages.ENDED:
                yield "event: end\ndata: \n\n"
                return
            # a big run costs time to read: look no more than a fifth of the time
            await anyio.sleep(min(2.0, 4 * cost))
            await anyio.to_thread.run_sync(wakeup.wait, abandon_on_cancel=True)
