"""A local HTTP server that speaks the streamed OpenAI Responses API (``POST /v1/responses``),
for Codex CLI as a real host in tests. Replies come from a *policy*: a function of the request
body returning the output items (assistant messages and function calls), so a scripted model
can follow the conversation Codex resends each turn."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.hosts.local_http import JSONHandler, LoopbackServer

Item = dict[str, Any]
Policy = Callable[[dict], list[Item]]

_ids = itertools.count(1)


def message(text: str) -> Item:
    return {"type": "message", "id": f"msg_{next(_ids):04d}", "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def function_call(namespace: str, name: str, arguments: dict[str, Any]) -> Item:
    """A call of ``name`` in the tool group ``namespace`` (Codex groups an MCP server's tools
    as ``mcp__<server>``; a call without it is answered "unsupported call")."""
    n = next(_ids)
    return {"type": "function_call", "id": f"fc_{n:04d}", "call_id": f"call_{n:04d}",
            "namespace": namespace, "name": name, "arguments": json.dumps(arguments),
            "status": "completed"}


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode()


def _stream(items: list[Item], model: str) -> bytes:
    response = {"id": f"resp_{next(_ids):04d}", "object": "response", "model": model,
                "status": "in_progress", "output": []}
    out = [_sse("response.created", {"response": response})]
    out += [_sse("response.output_item.done", {"output_index": i, "item": item})
            for i, item in enumerate(items)]
    done = {**response, "status": "completed", "output": items,
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}
    out.append(_sse("response.completed", {"response": done}))
    return b"".join(out)


@dataclass
class FakeResponsesAPI(LoopbackServer):
    """Serve ``policy`` on 127.0.0.1; every request body is kept in ``requests``."""

    policy: Policy
    requests: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        api = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                if not self.path.rstrip("/").endswith("/responses"):
                    self._send(404, "application/json", b'{"error": "not found"}')
                    return
                api.requests.append(body)
                try:
                    items = api.policy(body)
                except Exception as exc:  # reported by the test, not swallowed
                    api.errors.append(f"{type(exc).__name__}: {exc}")
                    items = [message(f"policy error: {exc}")]
                self._send(200, "text/event-stream", _stream(items, body.get("model", "fake")))

            def do_GET(self) -> None:  # a model list, if the host asks for one
                self._send(200, "application/json", b'{"object": "list", "data": []}')

        self.serve(Handler, '/v1')
