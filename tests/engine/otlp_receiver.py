"""A local OTLP/HTTP trace receiver for tests: decodes each ExportTraceServiceRequest posted to
``/v1/traces`` and keeps its spans (and the raw bodies, to search for what must not be there)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: int  # 0 unset, 1 ok, 2 error
    links: list[tuple[str, str]]
    children: list[Span] = field(default_factory=list)


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def _attrs(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


class Receiver:
    """``with Receiver() as r:`` serves on 127.0.0.1; ``r.endpoint`` is its base URL."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.bodies: list[bytes] = []
        self.received = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.received:
            self.bodies.append(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for s in scope.spans:
                        self.spans.append(Span(
                            s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                            _attrs(s.attributes),
                            [(e.name, _attrs(e.attributes)) for e in s.events],
                            s.status.code,
                            [(link.trace_id.hex(), link.span_id.hex()) for link in s.links]))
            self.received.notify_all()

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def trace(self, trace_id: str) -> Span:
        """The root span of ``trace_id`` with its children linked (in start order)."""
        spans = [s for s in self.spans if s.trace_id == trace_id]
        by_id = {s.span_id: s for s in spans}
        roots = []
        for s in spans:
            s.children = []
        for s in spans:
            (by_id[s.parent_id].children if s.parent_id in by_id else roots).append(s)
        assert len(roots) == 1, [r.name for r in roots]
        return roots[0]


def tree(span: Span, depth: int = 0) -> list[str]:
    """The span tree as indented lines: name, then the key attributes and events."""
    notes = [f"{k}={span.attributes[k]}" for k in (
        "openprose.key", "gen_ai.request.model", "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens") if k in span.attributes]
    notes += [f"event:{name}" for name, _ in span.events]
    if span.status == 2:
        notes.append("ERROR")
    lines = ["  " * depth + span.name + (f"  [{', '.join(notes)}]" if notes else "")]
    for child in span.children:
        lines += tree(child, depth + 1)
    return lines
