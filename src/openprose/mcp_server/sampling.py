"""The sampling provider: a delegated run's sessions and judgments answered by the MCP
client's own model (``sampling/createMessage``), for clients that declare sampling.

A session is one sampling request: the task, the agent's instructions as the system prompt
and the context inlined (the client's model cannot read the run's state); the reply's text is
the binding. A judgment asks for a structured reply, one line of JSON
``{"value": ..., "reason": "..."}``, read leniently (a bare true/false or option label also
counts). Sampling needs a connection on which the server may send requests (the handshake
protocol era); the caller checks that before choosing this provider.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from mcp_types import (
    CreateMessageResult,
    SamplingMessage,
    TextContent,
    Tool,
    ToolResultContent,
    ToolUseContent,
)

from openprose.engine import (
    JudgeRequest,
    Provider,
    ProviderError,
    SessionIO,
    SessionRequest,
    SessionResult,
    Usage,
    Verdict,
    briefs,
)
from openprose.engine.judging import describe
from openprose.engine.provider import inline_context

MAX_TOKENS = 8192
JUDGE_TOKENS = 512
#: Model turns a sampled session with work tools may take.
MAX_TURNS = 60
WORK_NOTE = ("Work on the project with the tools you are given (paths relative to the "
             "project); a refused call names the rule: do not retry it. Your final answer, "
             "in text, is your complete result.")
#: A sampled session has no tools: its context and memory are inlined, its reply is the value.
SESSION_TOOLS = briefs.Tools(read=None, memory=None,
                             finish="Do the task; answer with your complete result only.")


class SamplingProvider(Provider):
    name = "sampling"

    def __init__(self, session: Any, max_tokens: int = MAX_TOKENS, *,
                 tools: bool = False) -> None:
        """``session``: the MCP server session of the client to sample; ``tools``: the
        client declares tools in sampling, so sessions get their work tools."""
        self.session = session
        self.max_tokens = max_tokens
        self.tools = tools

    async def run_session(self, request: SessionRequest, io: SessionIO) -> SessionResult:
        if self.tools and request.work is not None:
            return await self._work_session(request, io)
        brief = briefs.brief_of(request)
        text = await self._sample(session_text(request, brief),
                                  briefs.system_text(brief, SESSION_TOOLS), self.max_tokens)
        return finished(request, io, text)

    async def _work_session(self, request: SessionRequest, io: SessionIO) -> SessionResult:
        """A session whose model works on the project: the client's model calls the work
        tools (each checked by the session's permissions and recorded), until it answers
        with text — the binding's value."""
        work = request.work
        assert work is not None
        brief = briefs.brief_of(request)
        tools = [Tool(name=d["name"], description=d.get("description"),
                      input_schema=d["input_schema"]) for d in work.definitions()]
        system = briefs.system_text(brief, SESSION_TOOLS) + "\n" + WORK_NOTE
        messages = [SamplingMessage(role="user", content=TextContent(
            type="text", text=session_text(request, brief)))]
        for _ in range(MAX_TURNS):
            result = await self._create(messages, system, self.max_tokens, tools)
            blocks = result.content if isinstance(result.content, list) else [result.content]
            uses = [block for block in blocks if isinstance(block, ToolUseContent)]
            if not uses:
                text = "".join(b.text for b in blocks if isinstance(b, TextContent)).strip()
                return finished(request, io, text)
            messages.append(SamplingMessage(role="assistant", content=blocks))
            answers = []
            for use in uses:
                content, failed = await work.call(use.name, use.input)
                answers.append(ToolResultContent(
                    type="tool_result", tool_use_id=use.id, is_error=failed,
                    content=[TextContent(type="text", text=content)]))
            messages.append(SamplingMessage(role="user", content=answers))
        raise ProviderError(f"session did not finish within {MAX_TURNS} turns of the client's "
                            "model", retryable=False)

    async def judge(self, request: JudgeRequest) -> Verdict:
        if request.options:
            ask = ("Pick the option that best fits. Reply with one line of JSON: "
                   '{"value": "<one option, verbatim>", "reason": "<why>"}\nOptions:\n'
                   + "\n".join(f"- {option}" for option in request.options))
        else:
            ask = ('Decide whether the condition holds (when unsure: false). Reply with one '
                   'line of JSON: {"value": true or false, "reason": "<why>"}')
        parts = [f"Condition: {request.text}", ask]
        described = describe(request.context, request.program)
        if described:
            parts.append(described)
        reply = await self._sample("\n\n".join(parts), "You judge conditions of an OpenProse "
                                   "program run. Answer with the JSON line only.", JUDGE_TOKENS)
        value, reason = read_verdict(reply, request.options)
        return Verdict(value, reason)

    async def _create(self, messages: list[SamplingMessage], system: str, max_tokens: int,
                      tools: list[Tool] | None = None) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # sampling is marked deprecated in 2026-07-28
                return await self.session.create_message(messages, max_tokens=max_tokens,
                                                         system_prompt=system, tools=tools)
        except Exception as err:  # the client refused, went away, or cannot be asked
            raise ProviderError(f"the client's model could not be sampled: {err}",
                                retryable=False) from err

    async def _sample(self, text: str, system: str, max_tokens: int) -> str:
        message = SamplingMessage(role="user", content=TextContent(type="text", text=text))
        result = await self._create([message], system, max_tokens)
        if not isinstance(result, CreateMessageResult) or not isinstance(result.content,
                                                                       TextContent):
            raise ProviderError("the client's model replied without text", retryable=False)
        return result.content.text


def read_verdict(reply: str, options: tuple[str, ...]) -> tuple[bool | str, str]:
    """A verdict from a structured reply (JSON ``value``/``reason``), or a bare answer."""
    text = reply.strip()
    value: Any = text
    reason = ""
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            data = json.loads(text[start:end + 1])
        except ValueError:
            data = None
        if isinstance(data, dict) and "value" in data:
            value, reason = data["value"], str(data.get("reason", ""))
    if options:
        for option in options:
            if isinstance(value, str) and value.strip().lower() == option.lower():
                return option, reason
        raise ProviderError(f"the client's model picked {value!r}, not one of {list(options)}")
    if isinstance(value, bool):
        return value, reason
    word = str(value).strip().lower().split()[:1]
    if word and word[0].strip(".,!") in ("true", "yes"):
        return True, reason
    if word and word[0].strip(".,!") in ("false", "no"):
        return False, reason
    raise ProviderError(f"the client's model gave no true/false verdict: {text[:80]!r}")


def session_text(request: SessionRequest, brief: briefs.Brief) -> str:
    """A sampled session's one user message: the task, then its context and memory inlined
    (the client's model cannot read the run's state)."""
    parts = [briefs.task_text(brief, SESSION_TOOLS)]
    if request.context:
        parts.append("Context:\n" + inline_context(request.context))
    if request.memory:
        parts.append("Your memory from earlier sessions:\n" + request.memory)
    return "\n\n".join(parts)


def finished(request: SessionRequest, io: SessionIO, text: str) -> SessionResult:
    """A sampled session's answer as its result; a persistent agent's memory notes the task."""
    if request.persistent:
        io.write_memory(f"{request.memory or ''}\n- {request.prompt[:200]}".strip())
    return SessionResult(text, Usage(), text[:200])
