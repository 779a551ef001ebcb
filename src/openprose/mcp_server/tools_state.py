"""Tools for the VM's own records: ``update_state`` (statement statuses, rendered into
state.md), ``push_frame``/``pop_frame`` (block calls) and ``record_verdict`` (judgments)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ToolAnnotations

from openprose.engine import keys
from openprose.language.analysis import SESSION_KINDS
from openprose.mcp_server.context import ServerContext
from openprose.mcp_server.refusal import Refusal, state_errors
from openprose.mcp_server.results import FrameResult, StateResult, VerdictResult, reply
from openprose.mcp_server.runs import digest, followed_session, verdict_key
from openprose.state import FOLLOWED_STEP, BindingRef

Status = Literal["started", "complete", "failed", "skipped", "iteration", "waiting"]
LOOPS = frozenset({"loop", "for", "parallel_for", "repeat", "pipeline"})
ARG_PREVIEW = 200  # a frame records its arguments' first characters; params hold them whole


def register(mcp: MCPServer, ctx: ServerContext) -> None:
    registry = ctx.registry

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    async def update_state(vm_token: str, statement: str, status: Status,
                           execution_id: int | None = None, iteration: int | None = None,
                           note: str = "") -> Annotated[CallToolResult, StateResult]:
        """A statement's status for state.md ('failed' fails its pending session)."""
        driven = registry.host_run(vm_token)
        driven.live()
        st = driven.statement(statement)
        eid = driven.frame_for(st, execution_id)
        record: dict[str, object] = {"status": status, "execution_id": eid}
        if status == "iteration":
            if st.kind not in LOOPS:
                raise Refusal("only loops have iterations",
                              f"statement {st.id} is a {st.kind} statement", st)
            if iteration is None or iteration < 0:
                raise Refusal("an iteration status carries its number (0, 1, ...)",
                              "give iteration", st)
            record["iteration"] = iteration
        failing = driven.pending_in(st.id, eid) if status == "failed" else []
        if status == "complete" and st.kind in SESSION_KINDS:
            pending = driven.pending_in(st.id, eid)
            if pending:
                raise Refusal("a session statement completes when its session wrote its "
                              "binding", f"the session for '{pending[0].ref.name}' is still "
                              "pending", st)
            written = driven.completed.get((st.id, eid or 0))
            if written is None:
                raise Refusal("a session statement completes when its session wrote its "
                              "binding", "its binding was never written", st)
            record["binding"] = written.file_name
        if note:
            record["note"] = note
        with state_errors("update_state", st):
            for pending in failing:  # the session failed: its token stops working
                driven.fail_session(pending, note or "failed")
            driven.set_status(st, status, record)
            driven.render()
        for pending in failing:  # the program's retry and catch decide what comes next
            follows = await followed_session(driven, pending)
            if follows is not None and driven.follower is not None:
                await driven.follower.failed(follows, note or "failed")
        await ctx.changed(driven.id)
        result = StateResult(statement=st.id, status=status, line=st.line, execution_id=eid)
        return reply(result, f"state: {st.id} (line {st.line}) {status}"
                             + (f" {iteration}" if status == "iteration" else ""))

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def push_frame(vm_token: str, block: str, args: dict[str, str] | None = None,
                         args_from: dict[str, str] | None = None, parent: int | None = None,
                         statement: str = "") -> Annotated[CallToolResult,
                                                                    FrameResult]:
        """Enter a block: args {param: value} or args_from {param: binding}; parent: the
        caller's frame; statement: the do. Returns its execution id."""
        driven = registry.host_run(vm_token)
        driven.live()
        definition = driven.outline.blocks.get(block)
        if definition is None:
            raise Refusal("push_frame enters a block the program defines",
                          f"there is no block '{block}' (blocks: "
                          f"{', '.join(driven.outline.blocks) or 'none'})")
        call = driven.statement(statement) if statement else None
        if call is not None and call.kind != "call_block":
            raise Refusal("push_frame's statement is a block call", f"statement {call.id} is "
                          f"a {call.kind} statement", call)
        if parent is not None:
            with state_errors("push_frame"):
                caller = driven.run.frame(parent)
            if caller.status == "completed":
                raise Refusal("a frame's parent is a live frame", f"frame {parent} was popped")
        given, copied = dict(args or {}), dict(args_from or {})
        both = sorted(set(given) & set(copied))
        if both:
            raise Refusal("each parameter has one value", f"{', '.join(both)} given twice")
        named = set(given) | set(copied)
        if named != set(definition.params):
            missing = [p for p in definition.params if p not in named]
            extra = sorted(named - set(definition.params))
            raise Refusal("a block call gives exactly the block's parameters",
                          f"block '{block}' takes ({', '.join(definition.params)})"
                          + (f"; missing {', '.join(missing)}" if missing else "")
                          + (f"; unknown {', '.join(extra)}" if extra else ""), call)
        for param, source in copied.items():
            found = driven.resolve(source, parent)
            if found is None:
                raise Refusal("args_from names bindings visible from the parent frame",
                              f"no binding '{source}' for parameter '{param}'", call)
            given[param] = found.value
        followed = None
        if driven.follower is not None:
            followed = await driven.follower.frame_for(block, given, parent, call)
        source = call.source if call is not None else f"do {block}"
        with state_errors("push_frame", call):
            frame = driven.run.push_frame(block, {k: v[:ARG_PREVIEW] for k, v in given.items()},
                                          parent, definition.max_depth,
                                          key=followed.key if followed else None)
            if followed is not None:
                followed.host = frame.execution_id
            for param in definition.params:
                driven.run.write_binding(BindingRef(param, frame.execution_id), given[param],
                                         "param", source)
            if followed is not None and driven.follower is not None:
                driven.follower.pushed(followed)
            driven.render()
        await ctx.changed(driven.id, [f"{p}@{frame.execution_id}" for p in definition.params])
        result = FrameResult(execution_id=frame.execution_id, block=block, depth=frame.depth,
                             max_depth=definition.max_depth, status="executing")
        return reply(result, f"frame {frame.execution_id}: block {block}, depth {frame.depth} "
                             f"of max_depth {definition.max_depth}")

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def pop_frame(vm_token: str, execution_id: int) -> Annotated[CallToolResult,
                                                                       FrameResult]:
        """Leave a block call whose body is done (top frames only)."""
        driven = registry.host_run(vm_token)
        driven.live()
        with state_errors("pop_frame"):
            frame = driven.run.frame(execution_id)
        if frame.status == "completed":
            raise Refusal("a frame pops once", f"frame {execution_id} was already popped")
        callees = [f.execution_id for f in driven.run.frames()
                   if f.parent == execution_id and f.status != "completed"]
        if callees:
            raise Refusal("only the top frame pops",
                          f"frame {execution_id} has live frame(s) {callees} above it")
        waiting = driven.pending_in(None, execution_id)
        if waiting:
            raise Refusal("a frame pops when its sessions have written their bindings",
                          f"the session for '{waiting[0].ref.name}' in frame {execution_id} is "
                          "pending", waiting[0].statement)
        if driven.follower is not None:
            await driven.follower.pop_allowed(execution_id)
        max_depth = driven.outline.blocks[frame.block].max_depth \
            if frame.block in driven.outline.blocks else frame.depth
        with state_errors("pop_frame"):
            driven.run.pop_frame(execution_id)
            driven.render()
        await ctx.changed(driven.id)
        result = FrameResult(execution_id=execution_id, block=frame.block, depth=frame.depth,
                             max_depth=max_depth, status="completed")
        return reply(result, f"frame {execution_id} popped (block {frame.block})")

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    async def record_verdict(vm_token: str, statement: str, value: bool | str, reason: str,
                             execution_id: int | None = None, iteration: int = 0
                             ) -> Annotated[CallToolResult, VerdictResult]:
        """Record a **condition**'s verdict (if/loop: true/false; choice: an option) and
        reason; iteration: the loop round."""
        driven = registry.host_run(vm_token)
        driven.live()
        st = driven.statement(statement)
        if not st.judged:
            raise Refusal("a verdict is recorded for a **condition**",
                          f"statement {st.id} ({st.kind}) has no condition to judge", st)
        eid = driven.frame_for(st, execution_id)
        if st.options:
            if not isinstance(value, str) or value not in st.options:
                raise Refusal("a choice's verdict is one of its options",
                              f"{value!r} is not one of {', '.join(st.options)}", st)
        elif not isinstance(value, bool):
            raise Refusal("a condition's verdict is true or false", f"got {value!r}", st)
        if iteration < 0:
            raise Refusal("iterations count from 0", f"iteration {iteration}", st)
        if not reason.strip():
            raise Refusal("a verdict carries its reason", "the reason is empty", st)
        key = verdict_key(st.id, eid, iteration)
        asked = None
        if driven.follower is not None:
            asked = await driven.follower.judgment_for(st, eid, iteration,
                                                       driven.run.verdict(key) is not None)
        recorded = driven.run.verdict(key) if asked is None else None
        if recorded is not None and recorded.value != value:
            raise Refusal("a recorded verdict stands (a resume shows it instead of asking "
                          "again)", f"iteration {iteration} was judged {recorded.value!r}: "
                          f"{recorded.reason}", st)
        if recorded is None:
            with state_errors("record_verdict", st):
                driven.run.record_verdict(key, digest(st.source)[:16], value, reason)
            if asked is not None and driven.follower is not None:
                request = asked.request  # noted for a restarted server's replay
                driven.run.record_result(FOLLOWED_STEP + asked.key, status="state", meta={
                    "value": value, "reason": reason,
                    "hash": keys.input_hash(request.text, request.options, request.round)})
                await driven.follower.judged(asked, value, reason)
            await ctx.changed(driven.id)
        result = VerdictResult(statement=st.id, execution_id=eid, iteration=iteration,
                               value=value, reason=recorded.reason if recorded else reason,
                               recorded=recorded is None)
        return reply(result, f"verdict {st.id} round {iteration}: {value!r} "
                             + ("recorded" if recorded is None else "(already recorded)"))

