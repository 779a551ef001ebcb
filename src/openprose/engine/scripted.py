"""The scripted provider: deterministic sessions and verdicts from a YAML or JSON file.

Tests, demos, benchmarks and anyone checking the engine from outside use it instead of a
model. Every key is optional::

    default_output: "ok"       # text for sessions no rule matches (omit: they fail)
    default_verdict: false     # verdict for conditions no rule matches
    latency: 0.0               # seconds each call takes, unless its rule says otherwise
    call_log: calls.jsonl      # append one JSON line per call (relative to this file, and
                               # inside the project, outside .prose/); a call's first
                               # line has its prompt or condition as "text"
    sessions:
      - match: "Summari[sz]e"  # regex searched in the prompt, then a newline, then the
                               # context as the engine would inline it
        output: "Summary of \\g<0>"   # a re.Match.expand template (\\g<0>, \\1, ...)
        latency: 0.2
        fail: 2                # attempts 1 and 2 fail (retryable), attempt 3 succeeds
        error: "rate limited"  # message of those failures
        memory: "new memory"   # persistent agents: memory after the session
        tools:                 # work-tool calls the session makes first, in order, under
          - bash: "pytest -q"  # its permissions (refusals come back as results, as they
          - read: src/app.py   # would to a model); a string is the main argument, a
          - edit: {file_path: src/app.py, old_string: "-", new_string: "+"}  # mapping all
                               # of them. Without 'output' the results are the output.
    conditions:                # if/elif/loop conditions, matched on the condition text,
                               # then a newline, then the judgment's context inlined
      - match: "bug-free"
        verdicts: [false, false, true]   # the n-th judgment in one loop gets the n-th
        reason: "scripted"               # entry; the last repeats
    choices:                   # choice criteria (and context); verdicts are option labels
      - match: "severity"
        verdicts: ["Critical"]

Unmatched choices pick the first option. Rules are tried in order; the first match wins.
Results depend only on the request (prompt, context, attempt, judgment round), never on
call order, so runs and resumed runs see the same answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
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
from openprose.paths import PathRefused, contained, read_file, regular_file


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
    tools: tuple[tuple[str, dict[str, Any]], ...] = ()


@dataclass(frozen=True, slots=True)
class Call:
    """One entry of the call log."""

    kind: str
    key: str
    phase: str
    attempt: int = 1
    text: str = ""
    at: float = 0.0


#: The largest script file read.
MAX_SCRIPT_BYTES = 16 * 1024 * 1024


class ScriptedProvider(Provider):
    name = "scripted"

    def __init__(self, script: dict[str, Any] | None = None, *, call_log: Path | None = None):
        """``script`` as described above; a key this provider does not know, or a value of
        the wrong type, raises :class:`ProviderUnavailable` naming the key."""
        script = dict(script or {})
        _known(script, _TOP, "the script")
        default_output = script.get("default_output")
        self.default_output: str | None = (None if default_output is None
                                           else _text(default_output, "default_output"))
        self.default_verdict: bool = _flag(script.get("default_verdict", False),
                                           "default_verdict")
        self.latency = _seconds(script.get("latency", 0.0), "latency")
        if script.get("call_log") is not None:
            _text(script["call_log"], "call_log")
        self.sessions = _rules(script, "sessions")
        self.conditions = _rules(script, "conditions")
        self.choices = _rules(script, "choices")
        self.call_log_path = call_log
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._log_file: Any = None

    @classmethod
    def from_file(cls, path: str | Path, project: Path | None = None) -> ScriptedProvider:
        """The provider a script file describes (a regular file of at most
        :data:`MAX_SCRIPT_BYTES`). ``project``: its ``call_log`` must lie inside it and
        outside its ``.prose/`` (a script's text is data, and may come from anywhere)."""
        path = Path(path)
        try:
            text = read_file(path, f"script {str(path)!r}", MAX_SCRIPT_BYTES).decode("utf-8")
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (PathRefused, ValueError, yaml.YAMLError) as err:
            raise ProviderUnavailable(f"cannot read script {path}: {err}") from err
        if data is not None and not isinstance(data, dict):
            raise ProviderUnavailable(f"script {path} must be a mapping at the top level")
        data = data or {}
        log = data.get("call_log")
        try:
            return cls(data, call_log=_call_log(log, path, project)
                       if isinstance(log, str) else None)
        except ProviderUnavailable as err:
            raise ProviderUnavailable(f"script {path}: {err}") from None

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
        done = await self._tools(rule, request) if rule is not None and rule.tools else None
        if rule is not None and match is not None and rule.output is not None:
            output = match.expand(rule.output)
        elif done is not None:
            output = done
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
        text = request.text
        if request.context:
            text += "\n" + inline_context(request.context)
        rule, _ = _first(rules, text)
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

    async def _tools(self, rule: _Rule, request: SessionRequest) -> str:
        """Make the rule's work-tool calls; their results, as the session's transcript."""
        if request.work is None:
            raise ProviderError("this run gives sessions no work tools (scripted 'tools:' "
                                "need a run started by prose run or run_program)",
                                retryable=False)
        parts = []
        for name, args in rule.tools:
            text, failed = await request.work.call(name, args)
            self._log("tool", request.key, "error" if failed else "ok", request.attempt,
                      f"{name} {json.dumps(args, ensure_ascii=False)}")
            subject = args.get("command") or args.get("file_path") or args.get("pattern") or ""
            parts.append(f"$ {name} {subject}\n{text}".rstrip())
        return "\n\n".join(parts)

    async def _wait(self, rule: _Rule | None) -> None:
        latency = rule.latency if rule is not None and rule.latency is not None else self.latency
        if latency > 0:
            await asyncio.sleep(latency)

    def _log(self, kind: str, key: str, phase: str, attempt: int = 1, text: str = "") -> None:
        call = Call(kind, key, phase, attempt, text, time.time())
        with self._lock:
            self.calls.append(call)
            if self.call_log_path is not None:
                entry: dict[str, Any] = {"kind": kind, "key": key, "phase": phase,
                                         "attempt": attempt, "at": call.at}
                if text:
                    entry["text"] = text
                line = json.dumps(entry, ensure_ascii=False) + "\n"
                self._call_log().write(line.encode("utf-8"))  # unbuffered: one append each

    def _call_log(self) -> Any:
        """The call log, opened (and checked) on first use and kept open until
        :meth:`aclose`: a session logs three lines, and an open and check per line cost a
        worker's sessions a tenth of their CPU. Never blocking on a FIFO, never through a
        link put there since it was checked."""
        if self._log_file is None:
            assert self.call_log_path is not None
            fd = os.open(self.call_log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                         | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0), 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise ProviderError(f"call_log {self.call_log_path} is not a regular file",
                                    retryable=False)
            self._log_file = open(fd, "ab", buffering=0)  # noqa: SIM115 - kept until aclose
        return self._log_file

    async def aclose(self) -> None:
        with self._lock:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def record_commit(self, key: str) -> None:
        """Note in the call log that the engine durably recorded ``key``'s result."""
        self._log("session", key, "committed")


def _call_log(raw: str, script: Path, project: Path | None) -> Path:
    """Where a script's call log goes (relative to the script): in ``project`` when given,
    outside its ``.prose/``; an existing log must be a regular file (appending to a FIFO
    would block every session)."""
    if project is None:
        path = script.parent / raw
    else:
        try:
            path = contained(raw, [project], base=script.resolve().parent, what="call_log",
                             excluded=[project / ".prose"], within="the project")
        except PathRefused as err:
            raise ProviderUnavailable(str(err)) from None
    if path.exists():
        try:
            regular_file(path, f"call_log {raw!r}")
        except PathRefused as err:
            raise ProviderUnavailable(str(err)) from None
    return path


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


_TOP = ("default_output", "default_verdict", "latency", "call_log", "sessions", "conditions",
        "choices")
_RULE = ("match", "output", "latency", "fail", "error", "memory", "verdicts", "reason", "tools")
#: A scripted tool call's main argument, when it is given as a plain string.
_MAIN_ARG = {"read": "file_path", "write": "file_path", "edit": "file_path",
             "glob": "pattern", "grep": "pattern", "bash": "command"}


def _known(mapping: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in mapping:
        if key not in keys:
            raise ProviderUnavailable(f"unknown key {key!r} in {where} (known: "
                                      f"{', '.join(keys)})")


def _text(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise ProviderUnavailable(f"'{key}' must be a string, got {value!r}")
    return value


def _flag(value: object, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "false", "yes", "no"}:
        return value.strip().lower() in {"true", "yes"}
    raise ProviderUnavailable(f"'{key}' must be true or false, got {value!r}")


def _seconds(value: object, key: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    raise ProviderUnavailable(f"'{key}' must be a number of seconds (0 or more), got {value!r}")


def _rules(script: dict[str, Any], section: str) -> list[_Rule]:
    raw = script.get(section)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ProviderUnavailable(f"'{section}' must be a list of rules, got {raw!r}")
    return [_rule(entry, section, i) for i, entry in enumerate(raw)]


def _rule(raw: object, section: str, i: int) -> _Rule:
    where = f"{section}[{i}]"
    if not isinstance(raw, dict) or "match" not in raw:
        raise ProviderUnavailable(f"every entry of '{section}' needs a 'match' regex: "
                                  f"{where} is {raw!r}")
    _known(raw, _RULE, where)
    try:
        pattern = re.compile(_text(raw["match"], f"{where}.match"), re.DOTALL)
    except re.error as err:
        raise ProviderUnavailable(f"bad regex {raw['match']!r} in {where}: {err}") from err
    verdicts = raw.get("verdicts", ())
    if not isinstance(verdicts, list | tuple):
        verdicts = (verdicts,)
    for verdict in verdicts:
        if not isinstance(verdict, bool | str):
            raise ProviderUnavailable(f"'{where}.verdicts' holds true/false or option labels, "
                                      f"got {verdict!r}")
    fail = raw.get("fail", 0)
    if not isinstance(fail, int) or isinstance(fail, bool) or fail < 0:
        raise ProviderUnavailable(f"'{where}.fail' must be a count of attempts, got {fail!r}")
    optional = {key: None if raw.get(key) is None else _text(raw[key], f"{where}.{key}")
                for key in ("output", "memory")}
    return _Rule(
        pattern=pattern,
        output=optional["output"],
        latency=None if raw.get("latency") is None else _seconds(raw["latency"],
                                                                 f"{where}.latency"),
        fail=fail,
        error=_text(raw.get("error", "scripted failure"), f"{where}.error"),
        memory=optional["memory"],
        verdicts=tuple(verdicts),
        reason=_text(raw.get("reason", "scripted"), f"{where}.reason"),
        tools=_tool_calls(raw.get("tools"), where),
    )


def _tool_calls(raw: object, where: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProviderUnavailable(f"'{where}.tools' must be a list of tool calls, got {raw!r}")
    calls = []
    for i, entry in enumerate(raw):
        at = f"{where}.tools[{i}]"
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ProviderUnavailable(f"'{at}' must be one tool call such as "
                                      f"{{bash: \"pytest -q\"}}, got {entry!r}")
        (name, args), = entry.items()
        if name not in _MAIN_ARG:
            raise ProviderUnavailable(f"unknown tool {name!r} in {at} (known: "
                                      f"{', '.join(_MAIN_ARG)})")
        if isinstance(args, str):
            args = {_MAIN_ARG[name]: args}
        if not isinstance(args, dict):
            raise ProviderUnavailable(f"'{at}.{name}' must be a string or a mapping of "
                                      f"arguments, got {args!r}")
        calls.append((name, dict(args)))
    return tuple(calls)
