"""Tools that start, inspect, resume and finish runs: ``start_run``, ``run_status``,
``resume_run``, ``complete_run``."""

from __future__ import annotations

import weakref
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ToolAnnotations

from openprose import prompts
from openprose.engine import inputs as input_rules
from openprose.engine.runner import record_given, run_inputs
from openprose.language.analysis import Analysis, analyze
from openprose.mcp_server.context import ServerContext
from openprose.mcp_server.prompts import PromptError
from openprose.mcp_server.prompts import compiled as compiled_program
from openprose.mcp_server.refusal import Refusal, refuse_all
from openprose.mcp_server.results import (
    BindingEntry,
    CheckerFailure,
    CompleteResult,
    FrameInfo,
    PendingInfo,
    ResumeResult,
    StartResult,
    StatusEntry,
    StatusResult,
    VerdictInfo,
    block_infos,
    compile_errors,
    outline_items,
    reply,
    run_outputs,
)
from openprose.mcp_server.runs import (
    DRIVER_KEY,
    ENGINE,
    FAILED_NEXT,
    GUIDED,
    HOST,
    SESSION_PREFIX,
    WRITTEN_ONCE,
    DrivenRun,
    Driver,
    digest,
    new_vm_token,
    program_call,
)
from openprose.mcp_server.updates import connection_of
from openprose.state import BackendUnavailable, BindingRef, StateError, new_run_id

Backend = Literal["filesystem", "sqlite", "postgres"]
#: start_run's modes: the host walks the program (embodied) or answers the engine (guided);
#: a delegated run is started with run_program.
RunMode = Literal["embodied", "guided"]


def binding_uri_name(ref: BindingRef) -> str:
    return f"{ref.name}@{ref.execution_id}" if ref.execution_id else ref.name


def record_driver(driven: DrivenRun, mode: str, context: Context, *, taking_over: bool = False
                  ) -> str:
    """A fresh VM token for ``driven``, recorded (hash and mode, and who took the run over
    from whom) in its journal; the calling client drives the run from now."""
    token = new_vm_token(driven.id)
    driver = driver_of(context)
    client, now = driver.client, driver.since
    meta = {"mode": mode, "vm": digest(token)}
    if taking_over:
        meta |= {"taken_over_by": client, "taken_over_at": now}
        driven.taken_over = (client, now)
    driven.run.record_result(DRIVER_KEY, status="driver", meta=meta)
    driven.mode, driven.vm_hash, driven.driver = mode, digest(token), driver
    return token


def driver_of(context: Context) -> Driver:
    """The calling client, as the driver of a run from now."""
    return Driver(client_name(context), datetime.now(UTC).isoformat(timespec="seconds"),
                  weakref.ref(connection_of(context.request_context)))


def client_name(context: Context) -> str:
    """The calling client as its ``initialize`` named it (hosts say who they are)."""
    params = getattr(context.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return f"client '{name}'" if name else "another client"


def drives(driven: DrivenRun, context: Context, vm_token: str) -> bool:
    """Whether the caller drives ``driven``: it is the driver's connection (a handshake
    client), or it holds the run's VM token (over the stateless protocol no connection
    outlives a request, so the token is the proof there)."""
    if driven.driver is None or driven.driver.is_connection(
            connection_of(context.request_context)):
        return True
    return bool(vm_token) and driven.vm_hash is not None and \
        digest(vm_token) == driven.vm_hash


def check_hand_over(driven: DrivenRun | None, context: Context, take_over: bool,
                    vm_token: str) -> None:
    """A run another client drives from this server (running, or stopped by cancel_run) is
    taken over only when told to (``take_over``); its own driver resumes a run it stopped.
    A running run is resumed only by a take-over, its driver's own call included (its VM
    token still works: run_status says where it is)."""
    if driven is None or take_over or driven.driver is None:
        return
    running = driven.status == "running"
    if not running and (drives(driven, context, vm_token) or driven.status != "interrupted"):
        return
    holder, since = driven.driver.client, driven.driver.since
    raise Refusal("a run another client drives is taken over only explicitly",
                  f"run {driven.id} is driven by {holder} (since {since}); call "
                  "resume_run(run_id, take_over=true) to take it over: that client's VM token "
                  "then stops working and its next call says who took the run")


def status_of(driven: DrivenRun) -> StatusResult:
    run = driven.run
    position = []
    for sid, record in driven.statuses.items():
        statement = driven.outline.statements.get(sid)
        if statement is not None:
            position.append(StatusEntry(statement=sid, line=statement.line,
                                        status=record["status"],
                                        iteration=record.get("iteration"),
                                        note=record.get("note")))
    position.sort(key=lambda entry: entry.line)
    frames = [FrameInfo(execution_id=f.execution_id, block=f.block, depth=f.depth,
                        parent=f.parent) for f in run.frames() if f.status != "completed"]
    pending = [PendingInfo(statement=p.statement.id, binding=p.ref.name,
                           execution_id=p.ref.execution_id) for p in driven.pending.values()]
    bindings = [BindingEntry(name=ref.name, execution_id=ref.execution_id, kind=kind)
                for ref, kind in run.binding_index()]
    verdicts = [VerdictInfo(key=entry.key.removeprefix(SESSION_PREFIX), value=entry.value,
                            reason=entry.reason)
                for entry in run.journal_entries() if entry.kind == "verdict"]
    follower, failed = driven.follower, None
    text = follower.failure() if follower is not None and run.status == "running" else None
    if follower is not None and text is not None:
        statement = follower.failed_at()
        failed = CheckerFailure(error=follower.error or "", text=text,
                                statement=statement.id if statement else None,
                                line=statement.line if statement else follower.failed_line)
    return StatusResult(run_id=run.id, mode=driven.mode, status=run.status,
                        backend=driven.backend, position=position, frames=frames,
                        pending=pending, bindings=bindings, verdicts=verdicts,
                        checker_failed=failed)


def status_text(status: StatusResult) -> str:
    lines = [f"run {status.run_id}: {status.status} (mode {status.mode}, {status.backend})"]
    if status.checker_failed is not None:
        lines.append(f"{status.checker_failed.text}; {FAILED_NEXT}")
    if status.position:
        lines.append("position: " + "; ".join(
            f"{p.statement} L{p.line} {p.status}" + (f" {p.iteration}" if p.iteration is not None
                                                     else "") for p in status.position))
    if status.frames:
        lines.append("live frames: " + ", ".join(
            f"{f.execution_id} {f.block} depth {f.depth}" for f in status.frames))
    if status.pending:
        lines.append("pending sessions: " + ", ".join(
            f"{p.statement} -> {p.binding}" + (f"@{p.execution_id}" if p.execution_id else "")
            for p in status.pending))
    if status.bindings:
        lines.append("bindings: " + ", ".join(
            f"{b.name}" + (f"@{b.execution_id}" if b.execution_id else "") + f" ({b.kind})"
            for b in status.bindings))
    if status.verdicts:
        lines.append("verdicts: " + "; ".join(f"{v.key} = {v.value} ({v.reason})"
                                              for v in status.verdicts))
    return "\n".join(lines)



#: The spec a host model follows in each run mode (a model cannot get a prompt: only a user
#: can, as a command; ``get_instructions`` hands it the same texts).
SPECS = {"guided": "run-guided", "embodied": "run-tools", "in-context": "run-in-context"}
Instructions = Literal["guided", "embodied", "in-context"]


def register(mcp: MCPServer, ctx: ServerContext) -> None:
    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def start_run(program: str, context: Context, inputs: dict[str, str] | None = None,
                        backend: Backend = ctx.default_backend, mode: RunMode = HOST
                        ) -> Annotated[CallToolResult, StartResult]:
        """Start a run (program: a .prose path in the project, or source). Returns your VM
        token; embodied: also the outline (statement ids); guided: then next_step."""
        try:
            source, path, compiled = await compiled_program(program, ctx.project_root)
        except (PromptError, OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"start_run: {exc}") from None
        file = path or "<program>"
        if not compiled.ok or compiled.program is None:
            raise ToolError(compile_errors(compiled.errors))
        outline = analyze(compiled.program, source)
        if mode == HOST:
            refuse_unfollowed(outline, ctx.modes)
        given = dict(inputs or {})
        unknown = sorted(set(given) - set(outline.inputs))
        if unknown:
            declared = ", ".join(outline.inputs) or "none"
            raise Refusal("inputs are the names the program declares with 'input'",
                          f"unknown input(s) {', '.join(unknown)} (declared: {declared})")
        lock = None
        try:
            store = ctx.catalog.store(backend)
            run_id = new_run_id()
            if mode == HOST:  # an engine mode's engine takes the lock itself
                ctx.registry.check_room()
                lock = store.driver_lock(run_id, new=True)
            run = store.create_run(source, path, run_id=run_id)
        except (BackendUnavailable, StateError) as exc:
            if lock is not None:
                lock.release()
            raise ToolError(f"start_run: the {backend} state backend: {exc}") from None
        driven = DrivenRun(run, outline, file, mode, None, holder=lock)
        token = record_driver(driven, mode, context)
        record_given(run, given)  # each is bound when the program reaches it, as in prose run
        if mode == HOST:
            driven.follow()
            if driven.follower is not None:  # what it computes first is written now
                await driven.follower.quiet()
        driven.render()
        ctx.registry.add(driven)
        extra = None
        if mode != HOST:
            extra = await ctx.modes[mode].started(ctx, driven)
        await ctx.changed(run.id)
        missing = [name for name in outline.inputs if name not in given] if mode == HOST \
            else [name for name, _ in input_rules.missing(compiled.program, given)]
        stepped = mode == HOST  # only a host that steps the run reads its outline
        result = StartResult(run_id=run.id, vm_token=token, mode=mode, backend=store.kind,
                             location=run.location, missing_inputs=missing,
                             outputs=list(outline.outputs),
                             blocks=block_infos(outline) if stepped else [],
                             outline=outline_items(outline) if stepped else [])
        lines = [f"run_id: {run.id}", f"vm_token: {token}", f"mode: {mode}",
                 f"backend: {store.kind}", f"location: {run.location}"]
        if missing:
            lines.append("missing inputs: " + ", ".join(missing))
        if outline.outputs:
            lines.append("outputs: " + ", ".join(outline.outputs))
        for block in result.blocks:
            lines.append(f"block {block.name}({', '.join(block.params)}) max_depth "
                         f"{block.max_depth}")
        if result.outline:
            lines.append("outline (id kind lines ...):")
            lines.extend(item.text() for item in result.outline)
        if extra:
            lines.append(extra)
        return reply(result, "\n".join(lines), exclude_defaults=True)

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_instructions(mode: Instructions) -> str:
        """A run mode's spec: read it first."""
        return prompts.load(SPECS[mode])

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def run_status(vm_token: str) -> Annotated[CallToolResult, StatusResult]:
        """Where the run is: statuses, live frames, pending sessions, bindings, verdicts."""
        driven = ctx.registry.by_vm_token(vm_token)
        status = status_of(driven)
        return reply(status, status_text(status))

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def resume_run(run_id: str, context: Context, take_over: bool = False,
                         inputs: dict[str, str] | None = None, vm_token: str = ""
                         ) -> Annotated[CallToolResult, ResumeResult]:
        """Continue a run: a fresh VM token (the old one stops), status, outline. take_over:
        another client's run; vm_token: the run's own; inputs: missing ones."""
        known = ctx.registry.known(run_id)
        check_hand_over(known, context, take_over, vm_token)
        held = known is not None and known.holder is not None and known.holder.held
        driven = ctx.registry.claim(run_id, take_over)
        try:
            engine_driven = driven.mode in ctx.modes
            driven.follow_again()
            if not (engine_driven and driven.run.status in ("interrupted", "failed")):
                driven.live()
            if driven.mode == ENGINE and not take_over:
                raise Refusal("a run the engine started is not driven by a host VM token "
                              "without an explicit hand-over",
                              f"run {run_id} was started by the engine; pass take_over=true")
            given = dict(inputs or {})
            unknown = sorted(set(given) - set(driven.outline.inputs))
            if unknown:
                declared = ", ".join(driven.outline.inputs) or "none"
                raise Refusal("inputs are the names the program declares with 'input'",
                              f"unknown input(s) {', '.join(unknown)} (declared: {declared})")
            program = driven.outline.program
            assert program is not None
            has = run_inputs(driven.run, program)
            for name in [name for name in given if name in has]:
                if has[name] != given.pop(name):
                    raise Refusal(WRITTEN_ONCE["input"], f"'{name}' already has its value; "
                                  "resume_run's inputs are the ones still missing")
        except Refusal:
            if not held:  # a refused call leaves no lock behind
                ctx.registry.release(driven)
            if driven.run.status != "running":  # nor open files of a finished run
                ctx.catalog.release(run_id)
            raise
        record_given(driven.run, given)  # bound when the program reaches them
        if driven.follower is not None:
            for name, value in given.items():
                await driven.follower.input_written(name, value)
            await driven.follower.quiet()
        mode = HOST if driven.mode == ENGINE else driven.mode
        own = known is not None and drives(known, context, vm_token)
        token = record_driver(driven, mode, context, taking_over=known is not None
                              and known.driver is not None and (take_over or not own))
        extra = None
        if mode != HOST and mode in ctx.modes:
            extra = await ctx.modes[mode].resumed(ctx, driven, context)
        status = status_of(driven)
        result = ResumeResult(run_id=run_id, vm_token=token, mode=mode, status=status.status,
                              outline=outline_items(driven.outline) if mode == HOST else [])
        lines = [f"vm_token: {token}", status_text(status)]
        if result.outline:
            lines += ["outline (id kind lines ...):", *(item.text() for item in result.outline)]
        if extra:
            lines.append(extra)
        return reply(result, "\n".join(lines), exclude_defaults=True)

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def complete_run(vm_token: str, status: Literal["completed", "failed"] = "completed",
                           error: str = "") -> Annotated[CallToolResult,
                                                                  CompleteResult]:
        """Finish the run ('completed' once the program is done); returns where its outputs
        are."""
        driven = ctx.registry.host_run(vm_token)
        driven.live()
        run = driven.run
        problems: list[Refusal] = []
        if driven.follower is not None:
            unfinished = await driven.follower.finish_refusal(status)
            problems += [unfinished] if unfinished is not None else []
            driven.live()  # checked again: another call may have finished it meanwhile
        if status == "completed":
            problems += [Refusal("a run completes only when no session is pending",
                                 f"the session for '{p.ref.name}' has not written its binding",
                                 p.statement) for p in driven.pending.values()]
        # the outputs it wrote (docs/architecture.md): one in a branch not taken is no gap
        outputs = run_outputs(run, driven.outline)
        if status == "completed":
            problems += [Refusal("a run completes only when every frame was popped",
                                 f"frame {f.execution_id} of block '{f.block}' is still live")
                         for f in run.frames() if f.status != "completed"]
        refuse_all(problems)
        abandon(driven)
        if driven.follower is not None:
            driven.follower.close()
        run.finish(status, error or None)
        driven.render()  # after finishing: state.md shows the run's final status
        ctx.registry.release(driven)
        ctx.catalog.release(run.id)
        await ctx.changed(run.id)
        result = CompleteResult(run_id=run.id, status=status, outputs=outputs)
        text = f"run {run.id} {status}" + "".join(f"\noutput {o.name}: {o.location}"
                                                  for o in outputs)
        return reply(result, text)


def abandon(driven: DrivenRun) -> None:
    """A failed run stops waiting for its pending sessions: each is recorded as abandoned
    (its token can write nothing more: the run is no longer live)."""
    for pending in list(driven.pending.values()):
        driven.fail_session(pending, "abandoned: the run finished without it")


def refuse_unfollowed(outline: Analysis, modes: dict[str, Any]) -> None:
    """An embodied run is checked step by step by following its program; the follower does
    not enter imported programs, so a program that calls one is not offered embodied (its
    walk through the imported program could not be checked)."""
    call = program_call(outline)
    if call is None:
        return
    instead = "start_run(program, mode=\"guided\"), where the server runs both programs" \
        if GUIDED in modes else "run_program, which runs it in the engine"
    raise Refusal("an embodied run is one the server can follow step by step",
                  "the program calls an imported program, which an embodied run cannot be "
                  f"checked inside; use {instead}", call)
