"""The Anthropic provider: each session is a small Messages API agent loop.

The session gets tools bound to its capability — read a context binding, write its own
binding, and (persistent agents) read/write its memory — so it writes its output itself, as
the state contract says. Conditions are judged with a forced ``verdict`` tool call, given the
statement's program lines and the bindings in scope (a judgment may first read a value shown
only in part with ``read_binding``).
Rate limits, overload, 5xx and timeouts are retried, waiting as the server's ``retry-after``
asks. Model aliases come from configuration (``OPENPROSE_MODEL_<ALIAS>``), not code paths.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anthropic

from openprose.engine import briefs, judging
from openprose.engine.errors import ProviderError, ProviderUnavailable
from openprose.engine.provider import (
    JudgeRequest,
    Provider,
    SessionIO,
    SessionRequest,
    SessionResult,
    Usage,
    Verdict,
)
from openprose.engine.retry import Sleep, real_sleep
from openprose.engine.work_tools import TOOLS as WORK_TOOLS
from openprose.state.config import MAX_TURNS_SETTING

DEFAULT_MODELS = {
    "opus": "claude-opus-5-5",
    "sonnet": "claude-sonnet-5-5",
    "haiku": "claude-haiku-5-5",
}
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
#: Model turns one session may take (each a request, most of them tool calls) before it
#: fails; the setting overrides it.
DEFAULT_MAX_TURNS = 60
JUDGE_READS = 3  # read_binding turns a judgment may take before it must answer

_READ = {
    "name": "read_binding",
    "description": "Read the full value of one context binding you were given, by name.",
    "input_schema": {"type": "object", "properties": {"name": {"type": "string"}},
                     "required": ["name"]},
}
_WRITE = {
    "name": "write_output",
    "description": "Write your complete result into your output binding. Call it once, "
                   "when your work is done; a later call replaces the earlier value.",
    "input_schema": {"type": "object", "properties": {"content": {"type": "string"}},
                     "required": ["content"]},
}
_MEMORY_READ = {
    "name": "read_memory",
    "description": "Read your persistent memory from earlier sessions.",
    "input_schema": {"type": "object", "properties": {}},
}
_MEMORY_WRITE = {
    "name": "write_memory",
    "description": "Replace your persistent memory with a compact summary of what you should "
                   "remember next time (decisions, open questions, facts learned).",
    "input_schema": {"type": "object", "properties": {"content": {"type": "string"}},
                     "required": ["content"]},
}


def model_aliases(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Alias → model id: the defaults, overridden by ``OPENPROSE_MODEL_<ALIAS>`` settings."""
    env = os.environ if env is None else env
    models = dict(DEFAULT_MODELS)
    for key, value in env.items():
        if key.startswith("OPENPROSE_MODEL_") and value:
            models[key.removeprefix("OPENPROSE_MODEL_").lower()] = value
    return models


# What cached input costs relative to plain input (Anthropic's prompt-caching pricing).
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float

    def cost(self, u: Any) -> float:
        written = getattr(u, "cache_creation_input_tokens", 0) or 0
        read = getattr(u, "cache_read_input_tokens", 0) or 0
        tokens_in = u.input_tokens + written * CACHE_WRITE_FACTOR + read * CACHE_READ_FACTOR
        return (tokens_in * self.input + u.output_tokens * self.output) / 1e6


def model_prices(env: Mapping[str, str] | None = None) -> dict[str, Price]:
    """Prices from ``OPENPROSE_PRICE_<ALIAS or MODEL>=INPUT,OUTPUT`` (USD per million tokens;
    in a model id write ``_`` for ``-``). Without a price a session's cost is recorded as 0."""
    env = os.environ if env is None else env
    prices: dict[str, Price] = {}
    for key, value in env.items():
        if not key.startswith("OPENPROSE_PRICE_") or not value:
            continue
        name = key.removeprefix("OPENPROSE_PRICE_").lower().replace("_", "-")
        try:
            tokens_in, tokens_out = (float(part) for part in value.split(","))
        except ValueError:
            raise ProviderUnavailable(f"{key}={value!r}: expected INPUT,OUTPUT in USD per "
                                      f"million tokens, e.g. 3,15") from None
        prices[name] = Price(tokens_in, tokens_out)
    return prices


class AnthropicProvider(Provider):
    name = "anthropic"
    reads_context = True

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        models: Mapping[str, str] | None = None,
        default_model: str = "sonnet",
        max_tokens: int = 8192,
        max_turns: int | None = None,
        max_retries: int = 5,
        sleep: Sleep = real_sleep,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: settings (API key, base URL, model aliases, prices); default the
        process environment."""
        env = os.environ if env is None else env
        api_key = api_key or env.get("ANTHROPIC_API_KEY")
        if not api_key:
            raise ProviderUnavailable(
                "no Anthropic API key: set ANTHROPIC_API_KEY (in the environment or in "
                ".prose/.env), or run without a model: --provider scripted --script FILE, "
                "or --dry-run for a plan and cost estimate")
        self.client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url or env.get("ANTHROPIC_BASE_URL"), max_retries=0)
        self.models = dict(models) if models is not None else model_aliases(env)
        self.prices = model_prices(env)
        self.default_model = default_model
        self.max_tokens = max_tokens
        self.max_turns = max_turns or _turns(env.get(MAX_TURNS_SETTING))
        self.max_retries = max_retries
        self.sleep = sleep

    def model_id(self, alias: str | None) -> str:
        alias = alias or self.default_model
        return self.models.get(alias, alias)

    def usage(self, alias: str | None, response: Any) -> Usage:
        """Tokens of one response and, when the model has a price, what they cost."""
        u = response.usage
        alias = alias or self.default_model
        price = self.prices.get(alias) or self.prices.get(self.model_id(alias))
        return Usage(u.input_tokens + (getattr(u, "cache_read_input_tokens", 0) or 0)
                     + (getattr(u, "cache_creation_input_tokens", 0) or 0),
                     u.output_tokens, price.cost(u) if price else 0.0)

    async def aclose(self) -> None:
        await self.client.close()

    # ----------------------------------------------------------------------- sessions

    async def run_session(self, request: SessionRequest, io: SessionIO) -> SessionResult:
        tools = [_READ, _WRITE] + ([_MEMORY_READ, _MEMORY_WRITE] if request.persistent else [])
        work = request.work
        if work is not None:
            tools += work.definitions() + await work.server_tools()
        tools = [*tools[:-1], {**tools[-1], "cache_control": {"type": "ephemeral"}}]
        brief = briefs.brief_of(request)
        text = briefs.system_text(brief, SESSION_TOOLS)
        if work is not None:
            text += "\n" + work_note(request)
        system = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
        task = _session_task(request, brief)
        messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
        allowed = {item.name for item in request.context}
        wrote = False
        usage = Usage()
        for _ in range(self.max_turns):
            response = await self._create(model=self.model_id(request.model), system=system,
                                          tools=tools, messages=messages,
                                          max_tokens=self.max_tokens)
            usage += self.usage(request.model, response)
            if response.stop_reason == "pause_turn":  # a long server-tool turn: go on
                messages.append({"role": "assistant",
                                 "content": [b.model_dump(exclude_none=True)
                                             for b in response.content]})
                continue
            if response.stop_reason != "tool_use":
                text = "".join(b.text for b in response.content if b.type == "text").strip()
                if wrote:
                    return SessionResult(None, usage, text[:200])
                return SessionResult(text, usage, text[:200])
            messages.append({"role": "assistant",
                             "content": [b.model_dump(exclude_none=True)
                                         for b in response.content]})
            results = []
            for block in response.content:
                if block.type != "tool_use":
                    continue
                if work is not None and block.name in WORK_TOOLS:
                    content, failed = await work.call(block.name, block.input)
                else:
                    content, failed = _run_tool(block.name, block.input, io, allowed)
                wrote = wrote or (block.name == "write_output" and not failed)
                results.append({"type": "tool_result", "tool_use_id": block.id,
                                "content": content, "is_error": failed})
            messages.append({"role": "user", "content": results})
        raise ProviderError(f"session did not finish within {self.max_turns} turns (a turn "
                            f"is one model request; {MAX_TURNS_SETTING} raises the limit)",
                            retryable=False)

    # ----------------------------------------------------------------------- judgments

    async def judge(self, request: JudgeRequest) -> Verdict:
        if request.options:
            value_schema: dict[str, Any] = {"type": "string", "enum": list(request.options)}
            ask = "Pick the option that best fits the criteria."
        else:
            value_schema = {"type": "boolean"}
            ask = "Decide whether the condition holds. When unsure, answer false."
        verdict = {"name": "verdict", "description": "Report your judgment.",
                   "input_schema": {"type": "object",
                                    "properties": {"value": value_schema,
                                                   "reason": {"type": "string"}},
                                    "required": ["value", "reason"]}}
        parts = [f"{ask} Judge it by what the run has produced, shown below."
                 f"\n\nCondition:\n{request.text}"]
        if request.options:
            parts.append("Options:\n" + "\n".join(f"- {o}" for o in request.options))
        described = judging.describe(request.context, request.program)
        if described:
            parts.append(described)
        tools = [verdict] + ([_READ] if request.read is not None else [])
        messages: list[dict[str, Any]] = [{"role": "user", "content": "\n\n".join(parts)}]
        usage = Usage()
        for turn in range(JUDGE_READS + 1):
            forced = request.read is None or turn == JUDGE_READS
            response = await self._create(
                model=self.model_id(None), max_tokens=1024, tools=tools, messages=messages,
                tool_choice={"type": "tool", "name": "verdict"} if forced else {"type": "any"})
            usage += self.usage(None, response)
            results = []
            for block in response.content:
                if block.type == "tool_use" and block.name == "verdict":
                    value = block.input.get("value")
                    if request.options and value not in request.options:
                        raise ProviderError(f"verdict {value!r} is not an option")
                    return Verdict(value if request.options else bool(value),
                                   str(block.input.get("reason", "")), usage)
                if block.type == "tool_use" and request.read is not None:
                    try:
                        content, failed = request.read(str(block.input.get("name", ""))), False
                    except KeyError as err:
                        content, failed = str(err.args[0]), True
                    results.append({"type": "tool_result", "tool_use_id": block.id,
                                    "content": content, "is_error": failed})
            if not results:
                break
            messages += [{"role": "assistant",
                          "content": [b.model_dump(exclude_none=True) for b in response.content]},
                         {"role": "user", "content": results}]
        raise ProviderError("the model returned no verdict")

    # ----------------------------------------------------------------------- transport

    async def _create(self, **kwargs: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            try:
                return await self.client.messages.create(**kwargs)
            except anthropic.APIStatusError as err:
                if err.status_code not in _RETRY_STATUS or attempt == self.max_retries:
                    raise ProviderError(f"Anthropic API {err.status_code}: "
                                        f"{self._without_key(err.message)}",
                                        retryable=err.status_code in _RETRY_STATUS) from None
                await self.sleep(_retry_after(err.response.headers, attempt))
            except (anthropic.APITimeoutError, anthropic.APIConnectionError) as err:
                if attempt == self.max_retries:
                    raise ProviderError("Anthropic API unreachable: "
                                        f"{self._without_key(str(err))}") from None
                await self.sleep(min(30.0, 2.0**attempt))
        raise AssertionError("unreachable")

    def _without_key(self, text: str) -> str:
        """``text`` (an error the API or a proxy wrote, kept in the run and shown) with the
        API key replaced: a proxy at ANTHROPIC_BASE_URL may echo what it was sent."""
        key = self.client.api_key
        return text.replace(key, "***") if key else text


def _turns(value: str | None) -> int:
    try:
        turns = int(value) if value else DEFAULT_MAX_TURNS
    except ValueError:
        raise ProviderUnavailable(f"{MAX_TURNS_SETTING}={value!r}: expected a whole number "
                                  "of model turns per session") from None
    if turns < 1:
        raise ProviderUnavailable(f"{MAX_TURNS_SETTING}={value!r}: must be 1 or more")
    return turns


def _retry_after(headers: Mapping[str, str], attempt: int) -> float:
    for name in ("retry-after-ms", "retry-after"):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw) / (1000 if name.endswith("-ms") else 1)
        except ValueError:
            continue
        return max(0.0, min(seconds, 120.0))
    return min(30.0, 2.0**attempt)


def _run_tool(name: str, args: Any, io: SessionIO, allowed: set[str]) -> tuple[str, bool]:
    try:
        if name == "read_binding":
            binding = str(args.get("name", ""))
            if binding not in allowed:
                return f"'{binding}' is not in your context ({', '.join(sorted(allowed))})", True
            return io.read_context(binding), False
        if name == "write_output":
            io.write_output(str(args.get("content", "")))
            return "written", False
        if name == "read_memory":
            return io.read_memory() or "(no memory yet)", False
        if name == "write_memory":
            io.write_memory(str(args.get("content", "")))
            return "memory updated", False
    except Exception as err:  # a refused capability is reported to the model, not raised
        return f"{type(err).__name__}: {err}", True
    return f"unknown tool {name}", True


#: How a session of this provider reaches its capability (its tools).
SESSION_TOOLS = briefs.Tools(
    read="read what you need with read_binding",
    memory="You are a persistent agent: read your memory first, and before you finish "
           "replace it with a compact account of what to remember.",
    finish="When your work is complete, call write_output once with your full result: that "
           "is what the rest of the program sees. Then answer with a one-line summary.")


def work_note(request: SessionRequest) -> str:
    """What the session is told about its work tools and permissions."""
    perms = request.work.gate.permissions.to_dict() if request.work is not None else {}
    return ("You work in the project directory with the tools read, write, edit, glob, grep "
            "and bash (paths relative to the project). Your permissions: read "
            f"{perms.get('read')}, write {perms.get('write')}, shell {perms.get('bash')}, "
            f"network {perms.get('network')}; .prose/ is off limits. A refused call comes "
            "back as an error naming the rule: do not retry it." + skills_note(request))


def skills_note(request: SessionRequest) -> str:
    """The session's skills: name and description up front, the folder to read on demand."""
    work = request.work
    skills = work.skills() if work is not None else []
    if work is None or not skills:
        return ""
    project = work.gate.project
    lines = ["", "Your skills (when one fits the task, read its SKILL.md first, then the "
             "files it names, with the read tool):"]
    for skill in skills:
        where = skill.folder.relative_to(project) if skill.folder.is_relative_to(project) \
            else skill.folder
        lines.append(f"- {skill.name}: {skill.description} ({where}/SKILL.md)")
    return "\n".join(lines)


def _session_task(request: SessionRequest, brief: briefs.Brief) -> str:
    task = briefs.task_text(brief, SESSION_TOOLS)
    if request.memory:
        task += "\n\nYour memory so far:\n" + request.memory
    return task
