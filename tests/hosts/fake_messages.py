"""A local HTTP server that speaks the Anthropic Messages API (streaming or not), for real
hosts such as Claude Code in tests. The replies come from a *policy*: a function of the
request body returning the assistant's content blocks, so a scripted "host model" can
follow a conversation however the host interleaves its main agent and subagents."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.hosts.local_http import JSONHandler, LoopbackServer

Block = dict[str, Any]


@dataclass
class Reply:
    """What the model answers: content blocks; the stop reason follows from them."""

    content: list[Block]
    stop_reason: str | None = None

    def reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b["type"] == "tool_use" for b in self.content) else "end_turn"


Policy = Callable[[dict], Reply]


def text(value: str) -> Block:
    return {"type": "text", "text": value}


_ids = itertools.count(1)


def tool_use(name: str, arguments: dict) -> Block:
    return {"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name,
            "input": arguments}


def seen_text(body: dict) -> str:
    """Every text the model was given in ``body`` (system prompt and messages), joined."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("text", "content") and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk([body.get("system", []), body["messages"]])
    return "\n".join(found)


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _stream(reply: Reply, model: str) -> bytes:
    usage = {"input_tokens": 10, "output_tokens": 0, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    out = [_sse("message_start", {"type": "message_start", "message": {
        "id": f"msg_{next(_ids):04d}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})]
    for index, block in enumerate(reply.content):
        if block["type"] == "tool_use":
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": start}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": delta}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": reply.reason(), "stop_sequence": None}, "usage": {"output_tokens": 5}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


@dataclass
class FakeMessagesAPI(LoopbackServer):
    """Serve ``policy`` on 127.0.0.1; every request body is kept in ``requests``, and the
    API key it came with in ``keys``."""

    policy: Policy
    requests: list[dict] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        api = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                if self.path.startswith("/v1/messages/count_tokens"):
                    self._send(200, "application/json", json.dumps({"input_tokens": 100}).encode())
                    return
                api.requests.append(body)
                api.keys.append(self.headers.get("x-api-key") or self.headers.get(
                    "authorization", "").removeprefix("Bearer ") or None)
                try:
                    reply = api.policy(body)
                except Exception as exc:  # reported by the test, not swallowed
                    api.errors.append(f"{type(exc).__name__}: {exc}")
                    reply = Reply([text(f"policy error: {exc}")])
                model = body.get("model", "claude-test")
                if body.get("stream"):
                    self._send(200, "text/event-stream", _stream(reply, model))
                else:
                    message = {"id": f"msg_{next(_ids):04d}", "type": "message",
                               "role": "assistant", "model": model, "content": reply.content,
                               "stop_reason": reply.reason(), "stop_sequence": None,
                               "usage": {"input_tokens": 10, "output_tokens": 5}}
                    self._send(200, "application/json", json.dumps(message).encode())

        self.serve(Handler)
