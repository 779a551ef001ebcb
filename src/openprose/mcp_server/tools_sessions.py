"""Tools around sessions: ``spawn_session`` (a grant: a short handle for a subagent),
``get_brief`` (the subagent's brief), ``write_binding``, ``read_binding``, ``read_memory``
and ``write_memory``."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ToolAnnotations

from openprose.engine.briefs import Brief, ContextEntry, host_model, short_failure
from openprose.engine.journal import SessionSpec
from openprose.engine.permissions import (
    Permissions,
    brief_permissions,
    grant_fields,
    permissions_for,
)
from openprose.engine.runner import given_inputs
from openprose.language import nodes as n
from openprose.language.analysis import BINDING_KINDS, SESSION_KINDS, Agent, Statement
from openprose.mcp_server.briefing import HOST_TOOLS, brief_reply, start_line
from openprose.mcp_server.context import ServerContext
from openprose.mcp_server.engine_results import FailAck
from openprose.mcp_server.follow import same_text
from openprose.mcp_server.guided import SessionItem
from openprose.mcp_server.refusal import Refusal, state_errors
from openprose.mcp_server.results import (
    BriefResult,
    MemoryResult,
    ReadResult,
    SpawnResult,
    WriteResult,
    reply,
)
from openprose.mcp_server.runs import (
    VM_PREFIX,
    WRITTEN_ONCE,
    DrivenRun,
    KeptWrite,
    Pending,
    agent_ref,
    digest,
    followed_session,
    session_key,
)
from openprose.mcp_server.tools_runs import binding_uri_name
from openprose.state import FOLLOWED_STEP, AgentRef, BindingRef, SessionStart

READ_LIMIT = 100_000
PROMPT_SHOWN = 600  # characters of the program's prompt a refusal shows


def session_node(statement: Statement) -> n.Session | None:
    if statement.node is None:
        return None
    return next((node for node in n.walk(statement.node) if isinstance(node, n.Session)), None)


def session_model(statement: Statement, agent: Agent | None) -> str | None:
    node = session_node(statement)
    own = node.property("model") if node is not None else None
    if own is not None and isinstance(own.value, n.Name | n.String):
        return own.value.id if isinstance(own.value, n.Name) else own.value.text
    return agent.model if agent is not None else None


def session_brief(driven: DrivenRun, statement: Statement, binding: str, prompt: str,
                  context: list[BindingRef], agent: Agent | None,
                  memory: AgentRef | None, permissions: Permissions | None) -> Brief:
    """The brief of an embodied session: the task the VM wrote, its agent's role and model,
    the context it may read (names, kinds, sizes), whether it keeps memory, and what it may
    do (its permissions, when the program gives any)."""
    entries = []
    for ref in context:
        found = driven.resolve(ref.name, ref.execution_id)
        entries.append(ContextEntry(ref.name, found.kind if found else "",
                                    len(found.value) if found else 0,
                                    driven.run.binding_location(ref)))
    return Brief(task=prompt.strip(), binding=binding, agent=agent.name if agent else "",
                 role=(agent.prompt or "").strip() if agent else "",
                 model=session_model(statement, agent), context=tuple(entries),
                 persistent=memory is not None, run=driven.id,
                 permissions=brief_permissions(permissions))


def statement_permissions(driven: DrivenRun, statement: Statement, agent: Agent | None,
                          execution_id: int | None) -> Permissions | None:
    """The permissions of a session statement a host runs: its own block over its agent's;
    a pattern naming a binding (a const) takes the binding's value, or the const's text
    before the run has bound it."""
    def value(item: n.Node) -> str:
        if isinstance(item, n.Name):
            found = driven.resolve(item.id, execution_id)
            return found.value if found is not None else _const_text(driven, item.id)
        return item.text if isinstance(item, n.String) else ""

    return permissions_for(session_node(statement), agent.node if agent else None, value)


def _const_text(driven: DrivenRun, name: str) -> str:
    """The text of ``const name = "literal"`` in the program."""
    for statement in driven.outline.statements.values():
        node = statement.node
        if isinstance(node, n.Let) and node.kind == "const" and node.target == name and \
                isinstance(node.value, n.String) and not node.value.interpolations:
            return node.value.text
    return name


def grant_text(result: SpawnResult) -> str:
    """The text content of a grant: the handle in one line, for hosts that show text."""
    where = f" in execution {result.execution_id}" if result.execution_id else ""
    agent = f" (agent {result.agent})" if result.agent else ""
    return (f"Session for '{result.binding}'{where}{agent} granted, token: "
            f"{result.session_token}. {result.start}")


def restored_brief(driven: DrivenRun, pending: Pending, context: list[BindingRef]) -> Brief:
    """The brief of a session granted before this server started: the VM's prompt is gone,
    so the task is the statement itself."""
    st = pending.statement
    definition = driven.outline.agents.get(st.agent) if st.agent else None
    memory = agent_ref(definition) if definition is not None else None
    task = f"Do what this program statement asks (line {st.line}):\n{st.source}"
    permissions = statement_permissions(driven, st, definition, pending.ref.execution_id)
    return session_brief(driven, st, pending.ref.name, task, context, definition, memory,
                         permissions)


def confirmation_text(result: WriteResult) -> str:
    lines = [f"Binding written: {result.binding}", f"Location: {result.location}"]
    if result.execution_id:
        lines.append(f"Execution ID: {result.execution_id}")
    lines.append(f"Bytes: {result.bytes}")
    if result.summary:
        lines.append(f"Summary: {result.summary}")
    return "\n".join(lines)


def register(mcp: MCPServer, ctx: ServerContext) -> None:
    registry = ctx.registry

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def spawn_session(vm_token: str, statement: str, prompt: str = "",
                            execution_id: int | None = None, context: list[str] | None = None
                            ) -> Annotated[CallToolResult, SpawnResult]:
        """Start the session the program reached (execution_id: its block frame; prompt
        and context are the program's). Returns a subagent's handle."""
        driven = registry.host_run(vm_token)
        driven.live()
        st = driven.statement(statement)
        if st.kind not in SESSION_KINDS:
            raise Refusal("spawn_session starts session and resume statements only",
                          f"statement {st.id} is a {st.kind} statement", st)
        eid = driven.frame_for(st, execution_id)
        followed = None
        if driven.follower is not None:
            followed = await driven.follower.session_for(st, eid)
        try:
            return _grant(driven, st, eid, prompt, context, followed)
        except Exception:
            if followed is not None and driven.follower is not None:
                driven.follower.release(followed[0].token)  # refused: it is next again
            raise


    def pending_session(token: str, rule: str) -> tuple[Any, Any, Any]:
        """The embodied run, handle and pending session of a session token, or the refusal
        under ``rule`` when its session is not pending here."""
        driven, handle = registry.by_session_token(token)
        driven.live()
        pending = driven.pending_for(token, handle.binding)
        if pending is None:
            raise Refusal(rule, f"no session of this server is pending for "
                                f"'{handle.binding.name}'")
        return driven, handle, pending

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_brief(token: str) -> Annotated[CallToolResult, BriefResult]:
        """A session subagent's first call: its role, task and context."""
        route = ctx.session_route(token)
        if route is not None:
            return await route.brief(token)  # type: ignore[no-any-return]
        driven, handle, pending = pending_session(
            token, "a session's brief is read while it is pending")
        found = pending.brief or restored_brief(driven, pending, list(handle.context.values()))
        return brief_reply(found, token, HOST_TOOLS)

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    async def write_binding(token: str, value: str = "", summary: str = "", name: str = "",
                            execution_id: int | None = None,
                            copy_of: str = "") -> Annotated[CallToolResult,
                                                                     WriteResult]:
        """Session token: write its binding (value), ending it. VM token: a binding no
        session makes (name; value or copy_of)."""
        route = ctx.session_route(token)
        if route is not None:  # a guided session: the same rule on the binding it names
            _check_own(BindingRef(route.binding(token) or "(anonymous)"), name, None, copy_of)
            return await route.write(token, value, summary or None)  # type: ignore[no-any-return]
        if token.startswith(VM_PREFIX):
            return await _vm_write(ctx, token, name, value, copy_of, execution_id, summary)
        return await _session_write(ctx, token, name, value, copy_of, execution_id, summary)

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def read_binding(token: str, name: str, execution_id: int | None = None,
                           offset: int = 0, limit: int = READ_LIMIT
                           ) -> Annotated[CallToolResult, ReadResult]:
        """Read a binding (offset/limit in characters). VM token: scope chain from
        execution_id; session token: its context; judgment token: its bindings."""
        if offset < 0 or limit < 1:
            raise Refusal("offset is >= 0 and limit >= 1", f"offset {offset}, limit {limit}")
        route = ctx.session_route(token)
        if route is not None:
            return await route.read(token, name, offset, limit)  # type: ignore[no-any-return]
        if token.startswith(VM_PREFIX):
            driven = registry.by_vm_token(token)
            with state_errors("read_binding"):
                if execution_id:
                    driven.run.frame(execution_id)
                binding = driven.run.resolve(name, execution_id or None)
            if binding is None:
                raise Refusal("a name is read through the scope chain",
                              f"no binding '{name}' is visible from "
                              + (f"frame {execution_id}" if execution_id else "the top level"))
            value, eid, kind = binding.value, binding.execution_id, binding.kind
        else:
            driven, handle = registry.by_session_token(token)
            ref = handle.context.get(name)
            if ref is None:
                raise Refusal("a session reads only the bindings it was given as context",
                              f"'{name}' is not in this session's context (it has: "
                              f"{', '.join(handle.context) or 'none'})")
            with state_errors("read_binding"):
                value = handle.read_context(name)
            eid, kind = ref.execution_id, dict(driven.run.binding_index()).get(ref, "let")
        part = value[offset:offset + limit]
        end = offset + len(part)
        result = ReadResult(name=name, execution_id=eid, kind=kind, value=part, offset=offset,
                            total_chars=len(value),
                            next_offset=end if end < len(value) else None)
        more = f"; more from offset {end}" if end < len(value) else ""
        header = f"[{name}{'@' + str(eid) if eid else ''} ({kind}): characters {offset}-{end} " \
                 f"of {len(value)}{more}]"
        return reply(result, f"{header}\n{part}")

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def fail_session(token: str, error: str, retryable: bool = True
                           ) -> Annotated[CallToolResult, FailAck]:
        """Session token: its session could not be done (the program's retry/catch decide
        what follows)."""
        route = ctx.session_route(token)
        if route is not None:
            return await route.fail(token, error, retryable)  # type: ignore[no-any-return]
        driven, _, pending = pending_session(
            token, "a pending session is failed once, with its token")
        st, error = pending.statement, error or "failed (no reason given)"
        record = {"status": "failed", "execution_id": pending.ref.execution_id, "note": error}
        with state_errors("fail_session", st):
            driven.fail_session(pending, error)
            driven.set_status(st, "failed", record)
            driven.render()
        follows = await followed_session(driven, pending)
        if follows is not None and driven.follower is not None:
            await driven.follower.failed(follows, error)
        await ctx.changed(driven.id)
        next_move = ("failed: the VM applies the program's retry and catch rules"
                     + (f"; next: {driven.follower.expected()}" if driven.follower else ""))
        return reply(FailAck(token=token, next=next_move), next_move)

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def read_memory(token: str) -> Annotated[CallToolResult, MemoryResult]:
        """Read the persistent agent's memory (its session token)."""
        route = ctx.session_route(token)
        if route is not None:
            memory = await route.read_memory(token)
            agent, location = await route.memory_owner(token)
        else:
            driven, handle = registry.by_session_token(token)
            driven.live()
            with state_errors("read_memory"):
                memory = handle.read_memory()
                location = handle.memory_location()
            agent = handle.agent.name  # type: ignore[union-attr]
        text = memory or ""
        result = MemoryResult(agent=agent, location=location, memory=memory,
                              bytes=len(text.encode()))
        return reply(result, text or f"(agent '{agent}' has no memory yet)")

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    async def write_memory(token: str, memory: str) -> Annotated[CallToolResult, MemoryResult]:
        """Replace the persistent agent's memory (its session token)."""
        route = ctx.session_route(token)
        if route is not None:
            await route.write_memory(token, memory)
            agent, location = await route.memory_owner(token)
            run_id = None
        else:
            driven, handle = registry.by_session_token(token)
            driven.live()
            with state_errors("write_memory"):
                handle.write_memory(memory)
                location = handle.memory_location()
            agent, run_id = handle.agent.name, driven.id  # type: ignore[union-attr]
        result = MemoryResult(agent=agent, location=location, bytes=len(memory.encode()))
        if run_id is not None:
            await ctx.changed(run_id)
        return reply(result, f"Memory written: {agent}\nLocation: {location}\n"
                             f"Bytes: {result.bytes}")


def _program_session(driven: DrivenRun, st: Statement, eid: int | None, prompt: str,
                     context: list[str] | None, followed: tuple[SessionItem, SessionSpec] | None
                     ) -> tuple[str, list[tuple[str, int | None]]]:
    """The session's prompt and context (names, each with the frame to resolve it from):
    the program's when the server follows it (a given prompt or context must agree), else
    the host's. The program's context may name what a finished block call left in its
    frame."""
    if followed is None:
        if not prompt.strip():
            raise Refusal("a session has a prompt", "the prompt is empty", st)
        return prompt, [(name, eid) for name in dict.fromkeys(context or ())]
    item, spec = followed
    program = item.request.prompt
    if prompt.strip() and not same_text(prompt, program):
        shown = program if len(program) <= PROMPT_SHOWN else program[:PROMPT_SHOWN] + "…"
        raise Refusal("a session's prompt is the program's (leave prompt out: the server "
                      "computes it)", f"the prompt differs from the program's, which is: "
                      f"{shown!r}", st)
    follower = driven.follower
    assert follower is not None
    refs: dict[str, int | None] = {}
    for name, own in spec.context:
        frame = next((f for f in follower.context_frames(name, own, eid)
                      if driven.resolve(name, f) is not None), -1)
        if frame != -1:
            refs.setdefault(name, frame)
    extra = [name for name in context or () if name not in refs]
    if extra:
        raise Refusal("a session's context is the program's (leave context out: the server "
                      "computes it)", f"{', '.join(extra)} not in the program's context ("
                      + (", ".join(refs) or "none") + ")", st)
    return program, list(refs.items())


def _grant(driven: DrivenRun, st: Statement, eid: int | None, prompt: str,
           context: list[str] | None, followed: tuple[SessionItem, SessionSpec] | None
           ) -> CallToolResult:
    prompt, named = _program_session(driven, st, eid, prompt, context, followed)
    refs = []
    for name, frame in named:
        found = driven.resolve(name, frame)
        if found is None:
            where = f"frame {frame}" if frame else "the top level"
            raise Refusal("context names resolve in the scope chain of the session's frame",
                          f"'{name}' is not a binding visible from {where} (loop "
                          "variables and literals go into the prompt)", st)
        refs.append(BindingRef(name, found.execution_id))
    definition = driven.outline.agents.get(st.agent) if st.agent else None
    memory = agent_ref(definition) if definition is not None else None
    if st.kind == "resume":
        with state_errors("spawn_session", st):
            has_memory = memory is not None and driven.run.has_memory(memory)
        if not has_memory:
            raise Refusal("resume: continues an agent that has memory",
                          f"agent '{st.agent}' has no memory yet; its first session is "
                          f"'session: {st.agent}'", st)
    if st.binds is not None:
        ref = BindingRef(st.binds, eid)
        kind = st.binding_kind if st.binding_kind in BINDING_KINDS else "let"
    else:
        ref = BindingRef(driven.run.next_anonymous(), eid)
        kind = "anonymous"
    sequence = driven.sequence[(st.id, eid or 0)] + 1
    key = session_key(st.id, eid, sequence)
    input_hash = digest("\n".join([prompt, *(name for name, _ in named)]))[:16]
    permissions = statement_permissions(driven, st, definition, eid)
    start = SessionStart(key, input_hash, ref, kind, st.source, tuple(refs), memory,
                         {"line": st.line, "statement": st.id,
                          "binding": [ref.name, ref.execution_id],
                          **({"path": followed[1].key} if followed else {})},
                         grant_fields(st.agent, permissions, key, st.line,
                                      session_model(st, definition)))
    with state_errors("spawn_session", st):
        granted = driven.run.start_sessions([start])[0]
    if isinstance(granted, Exception):
        raise Refusal("a session is granted exactly its binding", str(granted), st)
    if followed is not None:  # for a restarted server's replay, beside the session's result
        driven.run.record_note(FOLLOWED_STEP + followed[1].key,
                               {"session": key, "hash": followed[1].input_hash})
    driven.sequence[(st.id, eid or 0)] = sequence
    brief = session_brief(driven, st, ref.name, prompt, refs, definition, memory, permissions)
    if followed is not None:  # a retry: the brief says which attempt and what failed before
        request = followed[0].request
        brief = replace(brief, attempt=request.attempt,
                        failures=tuple(short_failure(error) for error in request.failures))
    driven.pending[key] = Pending(st, ref, key, input_hash, granted.token, brief,
                                  followed[0].token if followed else None,
                                  followed[1].key if followed else None)
    model = host_model(session_model(st, definition))
    result = SpawnResult(session_token=granted.token, binding=ref.name,
                         execution_id=ref.execution_id, agent=st.agent or None, model=model,
                         start=start_line(model))
    return reply(result, grant_text(result), exclude_none=True)


async def _session_write(ctx: ServerContext, token: str, name: str, value: str, copy_of: str,
                         execution_id: int | None, summary: str) -> CallToolResult:
    registry = ctx.registry
    try:
        driven, handle = registry.by_session_token(token)
    except Refusal:
        ended = registry.ended_grant(token)
        if ended is None:
            raise
        _check_own(ended[1], name, execution_id, copy_of)
        return _resend(*ended, token, value)
    driven.live()
    _check_own(handle.binding, name, execution_id, copy_of)
    pending = driven.pending_for(token, handle.binding)
    if pending is None:
        raise Refusal("a session writes the binding it was spawned for",
                      f"no session of this server is pending for '{handle.binding.name}'")
    with state_errors("write_binding", pending.statement):
        if handle.agent is not None:
            handle.append_segment(value)
        binding = driven.run.complete_session(token, pending.key, input_hash=pending.input_hash,
                                              value=value)
    del driven.pending[pending.key]
    ref = handle.binding
    driven.completed[(pending.statement.id, ref.execution_id or 0)] = ref
    result = WriteResult(binding=ref.name, location=binding.location or
                         driven.run.binding_location(ref), execution_id=ref.execution_id,
                         bytes=len(value.encode()), summary=summary or None)
    driven.written[digest(token)] = KeptWrite(digest(value), result)
    follows = await followed_session(driven, pending)
    if follows is not None and driven.follower is not None:
        await driven.follower.written(follows, value, summary)
    await ctx.changed(driven.id, [binding_uri_name(ref)])
    return reply(result, confirmation_text(result))


def _check_own(own: BindingRef, name: str, execution_id: int | None, copy_of: str) -> None:
    """A session token's write names its own binding (or none) and gives a value; checked
    the same way before and after the session wrote (a resend is that same write)."""
    if copy_of:
        raise Refusal("a session writes its own output as value",
                      "give value (copy_of is for the VM token)")
    if (name and name != own.name) or (
            execution_id is not None and (execution_id or None) != own.execution_id):
        raise Refusal("a session token writes exactly its own binding",
                      f"this session writes '{own.name}'"
                      + (f" in execution {own.execution_id}" if own.execution_id else "")
                      + f", not '{name or own.name}'"
                      + (f" in execution {execution_id}" if execution_id else ""))


def _resend(driven: DrivenRun, ref: BindingRef, token: str, value: str) -> CallToolResult:
    """A write with a token that has already written (its name and scope checked as its own):
    the same value gets the first confirmation again (nothing is applied twice); another
    value is refused."""
    written = driven.written.get(digest(token))
    if written is not None:
        same = written.value_hash == digest(value)
        result = written.confirmation
    else:  # written before this server started: compare with the stored value
        with state_errors("write_binding"):
            stored = driven.run.read_binding(ref)
        same = stored.value == value
        result = WriteResult(binding=ref.name, location=driven.run.binding_location(ref),
                             execution_id=ref.execution_id, bytes=len(value.encode()))
    if not same:
        raise Refusal("a session's binding is written once; a resend must carry the same value",
                      f"the session for '{ref.name}' already wrote a different value")
    return reply(result, confirmation_text(result))


async def _vm_write(ctx: ServerContext, token: str, name: str, value: str, copy_of: str,
                    execution_id: int | None, summary: str) -> CallToolResult:
    driven = ctx.registry.host_run(token)
    driven.live()
    if not name:
        raise Refusal("the VM token names the binding it writes", "give name")
    if value and copy_of:
        raise Refusal("a VM write has one source", "give either value or copy_of")
    eid = execution_id or None
    block = None
    if eid is not None:
        with state_errors("write_binding"):
            frame = driven.run.frame(eid)
        if frame.status == "completed":
            raise Refusal("a binding is written in a live frame", f"frame {eid} was popped")
        block = frame.block
    writers = driven.outline.writers_of(name, block)
    where = f"block '{block}'" if block else "the program's top level"
    if not writers:
        raise Refusal("the VM writes only names the program binds there",
                      f"no statement at {where} binds '{name}'")
    own = [w for w in writers
           if name in w.names or (w.kind not in SESSION_KINDS and w.kind != "sequence")]
    if not own:
        raise Refusal("a session's binding is written by that session (with its session "
                      "token)", f"'{name}' is produced by a session", writers[0])
    statement = own[0]
    ref = BindingRef(name, eid)
    if any(p.ref == ref for p in driven.pending.values()):
        raise Refusal("a session's binding is written by that session (with its session "
                      "token)", f"the session for '{name}' is still pending", statement)
    kind = statement.binding_kind if statement.binding_kind in BINDING_KINDS else "let"
    if copy_of:
        found = driven.resolve(copy_of, eid)
        if found is None:
            raise Refusal("copy_of names a binding visible from the frame",
                          f"no binding '{copy_of}' is visible from "
                          + (f"frame {eid}" if eid else "the top level"), statement)
        value = found.value
    if driven.follower is not None and statement.kind != "input":  # written when computed
        await driven.follower.vm_write(statement, name, eid, value)
        return await _written(ctx, driven, BindingRef(name, eid), value, summary)
    given = given_inputs(driven.run).get(name) if statement.kind == "input" else None
    if given is not None and given != value:  # bound to it once the program reaches it
        raise Refusal(WRITTEN_ONCE["input"],
                      f"'{name}' is an input the caller gave another value", statement)
    existing = dict(driven.run.binding_index()).get(ref)
    if existing in WRITTEN_ONCE:  # the same value again is a resend: nothing to write
        with state_errors("write_binding", statement):
            same = driven.run.read_binding(ref).value == value
        if not same:
            article = "an" if existing == "input" else "a"
            raise Refusal(WRITTEN_ONCE[existing], f"'{name}' is {article} {existing} that "
                          "already has another value", statement)
    else:
        with state_errors("write_binding", statement):
            driven.run.write_binding(ref, value, kind, statement.source)
        if statement.kind == "input" and driven.follower is not None:
            await driven.follower.input_written(name, value)
    return await _written(ctx, driven, ref, value, summary)


async def _written(ctx: ServerContext, driven: DrivenRun, ref: BindingRef, value: str,
                   summary: str) -> CallToolResult:
    """The confirmation of a VM write (``ref`` holds ``value``)."""
    result = WriteResult(binding=ref.name, location=driven.run.binding_location(ref),
                         execution_id=ref.execution_id, bytes=len(value.encode()),
                         summary=summary or None)
    await ctx.changed(driven.id, [binding_uri_name(ref)])
    return reply(result, confirmation_text(result))
