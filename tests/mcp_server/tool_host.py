"""A scripted host model that steps a program through the MCP tools.

The engine's interpreter decides what comes next (so any program is walked with the
engine's semantics), but everything it would write goes through the server's tools instead,
as a host model's calls would: ``start_run``, ``spawn_session`` with the interpolated prompt
and context names, a subagent that reads its context with ``read_binding``, keeps memory with
``read_memory``/``write_memory`` and finishes with ``write_binding``, ``update_state``,
``push_frame``/``pop_frame``, ``record_verdict``, VM writes of the bindings no session makes,
and ``complete_run``. The model's answers come from the scripted provider, so the same
program and script run by the engine directly must leave the same run behind.

The MCP client lives on its own thread and event loop; the interpreter's synchronous journal
calls wait on it there.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from tests.conftest import no_sleep

from openprose.engine import runner
from openprose.engine.errors import EngineError, ProgramError, ProgramFailed
from openprose.engine.interpreter import Interpreter, Options, Totals
from openprose.engine.provider import Provider, SessionRequest, SessionResult, Usage
from openprose.engine.scripted import ScriptedProvider
from openprose.engine.values import to_text
from openprose.language import compile_or_raise
from openprose.language import nodes as n
from openprose.mcp_server.follow import round_of, statement_of

EID: contextvars.ContextVar[int | None] = contextvars.ContextVar("eid", default=None)
#: The name an arrow sequence ending in a session binds, while the interpreter binds it.
SEQUENCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("sequence", default=None)


class Refused(AssertionError):
    """A tool call answered with is_error (the text is the reason)."""


class Bridge:
    """An MCP client on a thread of its own; ``call`` blocks, ``acall`` awaits (blocks too
    when ``serial``: then when each answer arrives cannot reorder the walk's next calls)."""

    serial = False

    def __init__(self, server: MCPServer | StdioServerParameters, era: dict[str, Any]) -> None:
        self.server, self.era = server, era
        self.loop = asyncio.new_event_loop()
        self.ready: Future[None] = Future()
        self.stop: asyncio.Event | None = None
        self.client: Client | None = None
        self.calls: list[str] = []
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self.main(),),
                                       daemon=True)

    async def main(self) -> None:
        self.stop = asyncio.Event()
        try:
            async with Client(self.server, **self.era) as client:
                self.client = client
                self.ready.set_result(None)
                await self.stop.wait()
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            raise

    def __enter__(self) -> Bridge:
        self.thread.start()
        self.ready.result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.stop is not None
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(timeout=30)
        self.loop.close()

    async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        self.calls.append(tool)
        result = await self.client.call_tool(tool, arguments)
        text = result.content[0].text if result.content else ""
        if result.is_error:
            raise Refused(f"{tool}: {text}")
        return dict(result.structured_content or {}, _text=text)

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return asyncio.run_coroutine_threadsafe(self._call(tool, arguments),
                                                self.loop).result(timeout=60)

    async def acall(self, tool: str, **arguments: Any) -> dict[str, Any]:
        if self.serial:  # the walk's event loop waits: no answer lands mid-step
            return self.call(tool, **arguments)
        future = asyncio.run_coroutine_threadsafe(self._call(tool, arguments), self.loop)
        return await asyncio.wrap_future(future)


class HostIO:
    """The session's IO as the engine sees it; the subagent's real IO is the tools."""

    def __init__(self, host: ToolHost, spec: Any) -> None:
        self.host, self.spec = host, spec
        self.token: str | None = None
        self.wants_memory = False

    def read_context(self, name: str) -> str:
        return self.host.bridge.call("read_binding", token=self.token, name=name)["value"]

    def write_output(self, text: str) -> None:
        raise AssertionError("the scripted subagent returns its output")

    def read_memory(self) -> str | None:
        self.wants_memory = True  # resume: the subagent reads it with its token
        return None

    def write_memory(self, text: str) -> None:
        self.host.bridge.call("write_memory", token=self.token, memory=text)
        self.host.memories.add(self.spec.agent)


class HostSession:
    def __init__(self, host: ToolHost, spec: Any) -> None:
        self.host, self.spec = host, spec
        self.io = HostIO(host, spec)

    def binding_location(self, name: str, execution_id: int | None) -> str:
        return name

    def finish(self, output: str | None, usage: Usage) -> str:
        if not self.host.reports:  # state.md shows the session without it
            return output or ""
        self.host.bridge.call("update_state", vm_token=self.host.vm, status="complete",
                              statement=statement_of(self.spec.key),
                              execution_id=self.spec.execution_id)
        return output or ""

    async def finish_batched(self, output: str | None, usage: Usage) -> str:
        if not self.host.reports:
            return output or ""
        await self.host.bridge.acall("update_state", vm_token=self.host.vm, status="complete",
                                     statement=statement_of(self.spec.key),
                                     execution_id=self.spec.execution_id)
        return output or ""

    def abort(self, error: str) -> None:
        self.host.bridge.call("update_state", vm_token=self.host.vm, status="failed",
                              statement=statement_of(self.spec.key),
                              execution_id=self.spec.execution_id, note=error[:200])


class ToolHost:
    """The journal the interpreter writes through: every write is a tool call."""

    writes_wait = False

    def __init__(self, bridge: Bridge, vm: str, inputs: dict[str, str],
                 reports: bool = True) -> None:
        self.bridge, self.vm = bridge, vm
        self.reports = reports  # update_state 'complete' after each session
        self.known: set[str] = set(inputs)
        self.memories: set[str] = set()

    def session_result(self, key: str) -> None:
        return None

    def verdict(self, key: str) -> None:
        return None

    def open_session(self, spec: Any) -> HostSession:
        return HostSession(self, spec)

    async def open_session_batched(self, spec: Any) -> HostSession:
        return HostSession(self, spec)

    def record_verdict(self, key: str, input_hash: str, value: bool | str, reason: str,
                       source: str, line: int) -> None:
        self.bridge.call("record_verdict", vm_token=self.vm, statement=statement_of(key),
                         value=value, reason=reason, execution_id=EID.get(),
                         iteration=round_of(key))

    def bind(self, name: str, value: Any, kind: str, execution_id: int | None,
             source: str) -> None:
        self.known.add(name)
        if kind == "param":  # push_frame wrote the parameters
            return
        if SEQUENCE.get() == name:
            return  # the sequence's last session wrote it with its own token
        self.bridge.call("write_binding", token=self.vm, name=name, value=to_text(value),
                         execution_id=execution_id)

    def location(self, name: str, execution_id: int | None) -> str:
        return name

    def has_memory(self, agent: str, persist: str) -> bool:
        return agent in self.memories

    def decision(self, key: str, branches: int) -> None:
        return None

    def record_decision(self, key: str, decision: Any) -> None:
        return None

    def push_frame(self, block: str, args: dict[str, Any], parent: int | None,
                   max_depth: int, key: str) -> int:
        self.known.update(args)
        frame = self.bridge.call("push_frame", vm_token=self.vm, block=block,
                                 args={k: to_text(v) for k, v in args.items()}, parent=parent)
        return frame["execution_id"]

    def pop_frame(self, execution_id: int) -> None:
        self.bridge.call("pop_frame", vm_token=self.vm, execution_id=execution_id)

    def note(self, key: str, status: str, source: str, line: int) -> None:
        return None

    def child(self, handle: str, program_text: str) -> ToolHost:
        raise AssertionError("imports are not walked by this host")

    def record_imports(self, imports: dict[str, Any]) -> None:
        raise AssertionError("imports are not walked by this host")

    def finish(self, status: str, error: str | None) -> None:
        self.bridge.call("complete_run", vm_token=self.vm, status=status, error=error or "")


class Subagents(Provider):
    """Each session is a subagent that works with its session token only; the host's own
    judgments come from the same script."""

    name = "tool-host"

    def __init__(self, host: ToolHost, script: dict[str, Any]) -> None:
        self.host = host
        self.model = ScriptedProvider(script)

    async def run_session(self, request: SessionRequest, io: Any) -> SessionResult:
        host, spec = self.host, io.spec
        context = [name for name, _ in spec.context if name in host.known]
        spawned = await host.bridge.acall(
            "spawn_session", vm_token=host.vm, statement=statement_of(spec.key),
            prompt=request.prompt, execution_id=spec.execution_id, context=context)
        io.token = token = spawned["session_token"]
        assert token in spawned["_text"] and "get_brief" in spawned["_text"]
        brief = await host.bridge.acall("get_brief", token=token)  # the subagent's first call
        assert brief["task"] == request.prompt.strip()
        assert [c["name"] for c in brief.get("context", [])] == context
        for name in context:
            await host.bridge.acall("read_binding", token=token, name=name)
        if io.wants_memory:
            memory = await host.bridge.acall("read_memory", token=token)
            request = dataclasses.replace(request, memory=memory["memory"])
        result = await self.model.run_session(request, io)
        await host.bridge.acall("write_binding", token=token, value=result.output,
                                summary=result.output[:40])
        if spec.binding:
            host.known.add(spec.binding)
        return result

    async def judge(self, request: Any) -> Any:
        return await self.model.judge(request)


class Untimed(Totals):
    """Totals that note no call durations: a parallel loop's next iteration starts at once
    rather than a fraction of a measured call later, so how long calls took cannot change
    the order of a one-at-a-time walk."""

    def note_call(self, seconds: float) -> None:
        return None


class HostInterpreter(Interpreter):
    async def bind(self, name: str, kind: str, expr: Any, stmt: Any, ctx: Any) -> Any:
        """``let x = a -> session b``: the engine binds ``x`` again after ``b`` wrote it; a
        host leaves it to the session, which wrote it with its own token."""
        arrow = isinstance(expr, n.Arrow) and isinstance(expr.steps[-1], n.Session)
        token = SEQUENCE.set(name if arrow else None)
        try:
            return await super().bind(name, kind, expr, stmt, ctx)
        finally:
            SEQUENCE.reset(token)

    async def judge(self, node: Any, ctx: Any, key: str, *args: Any, **kwargs: Any
                    ) -> bool | str:
        EID.set(ctx.execution_id)  # record_verdict names the frame the condition is in
        return await super().judge(node, ctx, key, *args, **kwargs)


def walk(server: MCPServer | StdioServerParameters, era: dict[str, Any], source: str,
         file: str, inputs: dict[str, str], script: dict[str, Any],
         bridge_type: type[Bridge] = Bridge, concurrency: int = 16, reports: bool = True
         ) -> tuple[str, str, list[str]]:
    """Step the program ``file`` (in the server's project) through the tools of ``server``, in
    process or a ``prose serve`` over stdio; (run id, status, tools called). ``concurrency``
    1 steps one session or judgment at a time, in the same order every time."""
    program = compile_or_raise(source, file)
    serial = concurrency == 1
    with bridge_type(server, era) as bridge:
        bridge.serial = serial
        started = bridge.call("start_run", program=file, inputs=inputs)
        host = ToolHost(bridge, started["vm_token"], inputs, reports)
        interpreter = HostInterpreter(program, source, host, Subagents(host, script),
                                      file=file, inputs=dict(inputs),
                                      options=Options(sleep=no_sleep, loop_limit=50,
                                                      max_concurrency=concurrency),
                                      totals=Untimed() if serial else None)
        status, error = "completed", None
        try:
            asyncio.run(interpreter.run())
        except ProgramError as err:
            status, error = "failed", str(ProgramFailed(err))
        except EngineError as err:
            status, error = "failed", f"{type(err).__name__}: {err}"
        host.finish(status, error)
        return started["run_id"], status, bridge.calls


def engine_run(root: Path, source: str, file: str, inputs: dict[str, str],
               script: dict[str, Any]) -> runner.Outcome:
    program = compile_or_raise(source, file)
    job = runner.Job(source=source, file=file, program=program, project_root=root,
                     inputs=dict(inputs), options=Options(sleep=no_sleep, loop_limit=50))
    return asyncio.run(runner.execute(job, ScriptedProvider(script)))
