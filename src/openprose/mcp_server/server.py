"""The OpenProse MCP server: a host model embodies the VM through tools while the server
holds the run and enforces the contract.

    mcp = create_server(Path("."))
    mcp.run()                      # stdio

Tools come in groups, one module each, every one registered as ``register(mcp, ctx)`` with
the :class:`~openprose.mcp_server.context.ServerContext`: :mod:`tools_runs` (start, status,
resume, complete), :mod:`tools_sessions` (spawn, write/read bindings, memory, fail) and
:mod:`tools_state` (statuses, frames, verdicts), and :mod:`tools_engine` (guided and delegated
runs: next_step, submit_verdict, run_program, get_run, cancel_run, list_runs,
compile_program). Resources, resource updates, the watcher of
outside writes and the prompts are added here too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, InputRequiredResult
from mcp_types import Tool as ToolInfo
from pydantic import ValidationError

from openprose.mcp_server import (
    prompts,
    resources,
    schemas,
    tools_engine,
    tools_runs,
    tools_sessions,
    tools_state,
)
from openprose.mcp_server.context import Mode, ServerContext
from openprose.mcp_server.refusal import Refusal
from openprose.mcp_server.resources import RunCatalog
from openprose.mcp_server.runs import RunRegistry
from openprose.mcp_server.updates import RunUpdates
from openprose.mcp_server.watch import watching
from openprose.state import MAX_VALUE_BYTES

INSTRUCTIONS = (
    "OpenProse runs programs of AI sessions. Before you run one, call get_instructions with "
    "the run mode and follow what it returns: 'guided' (the usual choice: the server runs "
    "the control flow, you hand its sessions to subagents), 'embodied' (you are the program's VM "
    "and step it with these tools; the server follows the program and refuses steps it does "
    "not allow) or 'in-context' (a tiny program kept in the conversation).")


def unfit_text(value: Any, where: str) -> str | None:
    """Why ``value`` (an argument, walked through lists and objects, keys too) cannot be
    taken, naming the part at ``where``: text with a lone surrogate, which no file, database or
    JSON reply can hold (a JSON client cannot send one; an in-process one can), or a text
    longer than :data:`MAX_VALUE_BYTES` in UTF-8."""
    if isinstance(value, str):
        if len(value) * 4 <= MAX_VALUE_BYTES:  # cannot be too long: only the encoding check
            size = len(value)
            fits = value.isascii() or _encodes(value)
        else:
            size = len(value.encode("utf-8", "surrogatepass"))
            fits = _encodes(value)
        if not fits:
            return f"{where} holds a lone surrogate (not UTF-8 text)"
        if size > MAX_VALUE_BYTES:
            return (f"{where} is {size:,} bytes, more than the {MAX_VALUE_BYTES // 2**20} MiB "
                    "a value may hold")
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            why = unfit_text(key, f"{where} key {str(key)[:40]!r}") or unfit_text(
                item, f"{where}.{str(key)[:40]}")
            if why:
                return why
    elif isinstance(value, list):
        for index, item in enumerate(value):
            why = unfit_text(item, f"{where}[{index}]")
            if why:
                return why
    return None


#: The longest refusal a tool answers with: its head and tail are kept, the middle of what it
#: quotes (an argument of megabytes, echoed) is cut.
MAX_ERROR_CHARS = 8000


def clipped(text: str) -> str:
    """``text`` within :data:`MAX_ERROR_CHARS`: its beginning and end, saying what was cut."""
    head, tail = MAX_ERROR_CHARS * 3 // 4, MAX_ERROR_CHARS // 8
    return f"{text[:head]} [... {len(text) - head - tail:,} characters cut ...] {text[-tail:]}"


def mistyped(tool: str, error: ValidationError) -> str:
    """A refusal naming each argument of the wrong type and what it should be (pydantic's
    own report adds the model's name and a link to its documentation)."""
    problems = "; ".join(f"{'.'.join(str(part) for part in item['loc']) or 'arguments'}: "
                         f"{item['msg']}" for item in error.errors())
    return (f"Error executing tool {tool}: refused (rule: arguments have the types the tool "
            f"declares): {problems}")


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ProseServer(MCPServer):
    """An MCP server whose every tool, however and whenever registered, takes only the
    arguments it declares: a host's typo (``contexts`` for ``context``) or an invented key
    (``target_binding``) is refused naming it, instead of being dropped while the call goes on
    as if it were absent; the listed input schemas say so (``additionalProperties: false``).
    Every text argument of a tool or a prompt is checked by :func:`unfit_text`
    before anything runs, so what no store can hold is refused naming it, not crashed on."""

    async def list_tools(self) -> list[ToolInfo]:
        tools = await super().list_tools()
        for tool in tools:
            tool.input_schema = schemas.closed(tool.input_schema)
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None
                        ) -> CallToolResult | InputRequiredResult:
        try:
            return await self._checked_call(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):  # pydantic's report, in our words
                exc.args = (mistyped(name, exc.__cause__),)
            text = str(exc)
            if len(text) > MAX_ERROR_CHARS:  # a refusal quoting a megabyte argument
                exc.args = (clipped(text),)
            raise

    async def _checked_call(self, name: str, arguments: dict[str, Any],
                            context: Context[Any, Any] | None
                            ) -> CallToolResult | InputRequiredResult:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            accepted = list(tool.parameters.get("properties", {}))
            unknown = sorted(set(arguments) - set(accepted))
            if unknown:
                raise Refusal("a tool takes only the arguments it declares",
                              f"{name} has no argument(s) {', '.join(map(repr, unknown))} "
                              f"(it takes: {', '.join(accepted) or 'none'})")
            for key, value in arguments.items():
                why = unfit_text(value, key)
                if why:
                    raise Refusal("an argument is UTF-8 text of a bounded size",
                                  f"{name}: {why}")
        try:
            return await super().call_tool(name, arguments, context)
        finally:
            server_context(self).registry.let_go()

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None,
                         context: Context[Any, Any] | None = None) -> Any:
        for key, value in (arguments or {}).items():
            why = unfit_text(value, f"argument {key[:40]!r}")
            if why:
                raise MCPError(INVALID_PARAMS, f"{name}: {why}")
        return await super().get_prompt(name, arguments, context)


def create_server(project_root: str | Path, *, home: str | Path | None = None,
                  name: str = "openprose", watch: bool = True,
                  modes: dict[str, Mode] | None = None,
                  backend: str = "filesystem", workers: bool = False) -> MCPServer:
    """The server for the project at ``project_root`` (runs under ``.prose/``). ``watch``:
    notice outside writes to live filesystem runs; ``modes``: run modes besides ``host``;
    ``backend``: the state backend of new runs whose call names none; ``workers``:
    ``run_program`` queues runs for ``prose worker`` processes (``backend`` postgres)."""
    root = Path(project_root).resolve()
    updates = RunUpdates()
    catalog = RunCatalog(root, home=home)
    ctx = ServerContext(root, catalog, updates, RunRegistry(catalog), dict(modes or {}),
                        default_backend=backend, workers=workers)
    engine = tools_engine.EngineModes(ctx)
    connections = 0

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[ServerContext]:
        nonlocal connections
        connections += 1
        try:
            if not watch or ctx.watcher is not None:  # one watcher however many connections
                yield ctx
                return
            async with watching(root, updates, home=home) as watcher:
                ctx.watcher = watcher
                try:
                    yield ctx
                finally:
                    ctx.watcher = None
        finally:
            connections -= 1
            if not connections:  # the last connection went: runs are interrupted, resumable
                await engine.aclose()
                ctx.registry.close()  # host-driven runs' driver locks are released

    mcp = ProseServer(name, instructions=INSTRUCTIONS, lifespan=lifespan,
                    subscriptions=updates.bus)
    mcp.openprose = ctx  # type: ignore[attr-defined]  # for tests and the guided mode
    updates.attach(mcp)
    resources.register(mcp, catalog, ctx.outside_writes)
    prompts.register(mcp, root)
    tools_runs.register(mcp, ctx)
    tools_sessions.register(mcp, ctx)
    tools_state.register(mcp, ctx)
    tools_engine.register(mcp, ctx, engine)
    schemas.compact_tools(mcp)
    return mcp


def server_context(mcp: MCPServer) -> ServerContext:
    """The context of a server made by :func:`create_server`."""
    return mcp.openprose  # type: ignore[attr-defined, no-any-return]
