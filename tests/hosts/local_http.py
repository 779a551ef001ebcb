"""What the local fakes of model APIs share: a JSON request handler and a loopback server run
on a daemon thread, so each fake (Messages API, Responses API) writes only its own protocol."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class JSONHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def json_body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class LoopbackServer:
    """A fake's server: ``serve(Handler, suffix)`` starts it on a free port of 127.0.0.1 and
    sets ``url``; ``close`` (or leaving the ``with`` block) stops it."""

    url: str

    def serve(self, handler: type[JSONHandler], suffix: str = "") -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}{suffix}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
