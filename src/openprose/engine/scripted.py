"""The scripted provider: deterministic sessions and verdicts from a YAML or JSON file.

Tests, demos, benchmarks and anyone checking the engine from outside use it instead of a
model. Every key is optional::

    default_output: "ok"       # text for sessions no rule matches (omit: they fail)
    default_verdict: false     # verdict for conditions no rule matches
    latency: 0.0               # seconds each call takes, unless its rule says otherwise
    call_log: calls.jsonl      # append one JSON line per call (relative to this file)
    sessions:
      - match: "Summari[sz]e"  # regex searched in the prompt, then a newline, then the
                               # context as the engine would inline it
        output: "Summary of \\g<0>"   # a re.Match.expand template (\\g<0>, \\1, ...)
        latency: 0.2
        fail: 2                # attempts 1 and 2 fail (retryable), attempt 3 succeeds
        error: "rate limited"  # message of those failures
        memory: "new memory"   # persistent agents: memory after the session
    conditions:                # if/elif/loop conditions, matched on the condition text
      - match: "bug-free"
        verdicts: [false, false, true]   # the n-th judgment in one loop gets the n-th
        reason: "scripted"               # entry; the last repeats
    choices:                   # choice criteria; verdicts are option labels
      - match: "severity"
        verdicts: ["Critical"]

Unmatched choices pick the first option. Rules are tried in order; the first match wins.
Results depend only on the request (prompt, context, attempt, judgment round), never on
call order, so runs and resumed runs see the same answers.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from openprose.engine.errors import ProviderError, ProviderUnavailable
from openprose.engine.provider import (
    JudgeRequest,
    Provider,
    SessionIO,
    SessionRequest,
    SessionResult,
    Usage,
    Verdict,
    inline_context,
)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str]
    output: str | None = None
    latency: float | None = None
    fail: int = 0
    error: str = "scripted failure"
    memory: str | None = None
    verdicts: tuple[bool | str, ...] = ()
    reason: str = "scripted"


@dataclass(frozen=True, slots=True)
class Call:
    """One entry of the call log."""

    kind: str
    key: str
    phase: str
    attempt: int = 1
    text: str = ""
    at: float = 0.0


class ScriptedProvider(Provider):
    name = "scripted"

    def __init__(self, script: dict[str, Any] | None = None, *, call_log: Path | None = None):
        script = dict(script or {})
        self.default_output: str | None = script.get("default_output")
        self.default_verdict: bool = bool(script.get("default_verdict", False))
        self.latency = float(script.get("latency", 0.0))
        self.sessions = [_rule(r, "sessions") for r in script.get("sessions") or ()]
        self.conditions = [_rule(r, "conditions") for r in script.get("conditions") or ()]
        self.choices = [_rule(r, "choices") for r in script.get("choices") or ()]
        self.call_log_path = call_log
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedProvider:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError) as err:
            raise ProviderUnavailable(f"cannot read script {path}: {err}") from err
        if data is not None and not isinstance(data, dict):
            raise ProviderUnavailable(f"script {path} must be a mapping at the top level")
        data = data or {}
        log = data.get("call_log")
        return cls(data, call_log=path.parent / log if log else None)

    # ----------------------------------------------------------------------- provider API

    async def run_session(self, request: SessionRequest, io: SessionIO) -> SessionResult:
        text = request.prompt
        if request.context:
            text += "\n" + inline_context(request.context)
        rule, match = _first(self.sessions, text)
        self._log("session", request.key, "start", request.attempt, request.prompt)
        await self._wait(rule)
        if rule is not None and request.attempt <= rule.fail:
            self._log("session", request.key, "fail", request.attempt)
            raise ProviderError(rule.error)
        if rule is not None and match is not None and rule.output is not None:
            output = match.expand(rule.output)
        elif self.default_output is not None:
            output = self.default_output
        else:
            self._log("session", request.key, "fail", request.attempt)
            raise ProviderError(f"no scripted output matches: {request.prompt[:80]!r}",
                                retryable=False)
        if request.persistent and rule is not None and rule.memory is not None:
            io.write_memory(rule.memory)
        elif request.persistent:
            io.write_memory(f"{request.memory or ''}\n- {request.prompt[:200]}".strip())
        self._log("session", request.key, "end", request.attempt)
        tokens = len(request.prompt.split())
        return SessionResult(output, Usage(tokens, len(output.split())))

    async def judge(self, request: JudgeRequest) -> Verdict:
        rules = self.choices if request.options else self.conditions
        rule, _ = _first(rules, request.text)
        self._log("judge", request.key, "start", text=request.text)
        await self._wait(rule)
        value: bool | str
        if rule is not None and rule.verdicts:
            value = rule.verdicts[min(request.round, len(rule.verdicts) - 1)]
        elif request.options:
            value = request.options[0]
        else:
            value = self.default_verdict
        if request.options and value not in request.options:
            raise ProviderError(f"scripted choice {value!r} is not an option of "
                                f"{list(request.options)}", retryable=False)
        if not request.options:
            value = _as_bool(value)
        self._log("judge", request.key, "end")
        return Verdict(value, rule.reason if rule else "scripted default")

    # ----------------------------------------------------------------------- helpers

    async def _wait(self, rule: _Rule | None) -> None:
        latency = rule.latency if rule is not None and rule.latency is not None else self.latency
        if latency > 0:
            await asyncio.sleep(latency)

    def _log(self, kind: str, key: str, phase: str, attempt: int = 1, text: str = "") -> None:
        call = Call(kind, key, phase, attempt, text, time.time())
        with self._lock:
            self.calls.append(call)
            if self.call_log_path is not None:
                line = json.dumps({"kind": kind, "key": key, "phase": phase,
                                   "attempt": attempt, "at": call.at})
                with open(self.call_log_path, "a", encoding="utf-8") as handle:
                    handle.write(line + "\n")

    def record_commit(self, key: str) -> None:
        """Note in the call log that the engine durably recorded ``key``'s result."""
        self._log("session", key, "committed")


def _first(rules: list[_Rule], text: str) -> tuple[_Rule | None, re.Match[str] | None]:
    for rule in rules:
        match = rule.pattern.search(text)
        if match is not None:
            return rule, match
    return None, None


def _as_bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"true", "yes", "1"}
    return bool(value)


def _rule(raw: object, section: str) -> _Rule:
    if not isinstance(raw, dict) or "match" not in raw:
        raise ProviderUnavailable(f"every entry of '{section}' needs a 'match' regex: {raw!r}")
    try:
        pattern = re.compile(str(raw["match"]), re.DOTALL)
    except re.error as err:
        raise ProviderUnavailable(f"bad regex {raw['match']!r} in '{section}': {err}") from err
    verdicts = raw.get("verdicts", ())
    if not isinstance(verdicts, list | tuple):
        verdicts = (verdicts,)
    return _Rule(
        pattern=pattern,
        output=None if raw.get("output") is None else str(raw["output"]),
        latency=None if raw.get("latency") is None else float(raw["latency"]),
        fail=int(raw.get("fail", 0)),
        error=str(raw.get("error", "scripted failure")),
        memory=None if raw.get("memory") is None else str(raw["memory"]),
        verdicts=tuple(verdicts),
        reason=str(raw.get("reason", "scripted")),
    )
