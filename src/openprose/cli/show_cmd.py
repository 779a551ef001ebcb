"""``prose show RUN [BINDING]``: one run in detail, or one binding's value.

Reads without opening the run for writing, so it is safe while the run goes on (driven by
``prose run`` or by a host through the MCP server), on any backend.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from openprose.cli.common import (
    USAGE,
    Col,
    console,
    emit_json,
    fail,
    find_run,
    fitted_table,
    json_option,
    plain,
    project_option,
    size_text,
    state_option,
    stores,
    styled,
)
from openprose.cli.runs_cmd import human_duration, run_time
from openprose.terminal import printable

GROUP_AT = 4  # a statement run this many times or more gets one summary row
MAX_BINDING_ROWS = 40
_ITERATION = re.compile(r"\[\d+\]")


def parse_binding(text: str) -> tuple[str, int | None]:
    """``name`` or ``name@N`` (N the block execution that made it)."""
    name, at, execution = text.partition("@")
    if not at:
        return name, None
    if not execution.isdigit() or int(execution) < 1:
        raise click.UsageError(f"binding {text!r}: after '@' comes a block execution id "
                               "(a positive integer)")
    return name, int(execution)


@click.command("show")
@click.argument("run_id", metavar="RUN")
@click.argument("binding", required=False)
@state_option
@json_option
@project_option
def show_command(run_id: str, binding: str | None, backend: str | None, as_json: bool,
                 project: Path) -> None:
    """Show run RUN (an id, a unique prefix of one, or `latest`): status, timeline, active
    constructs, bindings, agents, tokens and errors. With BINDING (NAME or NAME@N), print
    that binding's value."""
    from openprose.state import InvalidNameError, NotFoundError, StateError
    from openprose.state.view import load_view

    with stores(project, backend, "show") as opened:
        store, found = find_run(opened, run_id, "show")
        try:
            if binding is not None:
                _show_binding(store, found, binding, as_json)
                return
            view = load_view(store, found)
            segments = {agent: store.segment_count(found, agent)
                        for agent, _ in view.agents}
        except (NotFoundError, InvalidNameError) as err:
            fail("show", str(err), USAGE)
        except StateError as err:
            fail("show", str(err))
    if as_json:
        from openprose.state.render import active_constructs

        data = view.to_dict()
        data["active"] = active_constructs(view)
        for agent in data["agents"]:
            agent["segments"] = next(count for a, count in segments.items()
                                     if a.name == agent["name"] and a.scope == agent["scope"])
        emit_json(data)
        return
    _print_view(view, segments)


def _show_binding(store: Any, run_id: str, text: str, as_json: bool) -> None:
    from openprose.state import BindingRef, NotFoundError
    from openprose.state.names import check_name

    name, execution_id = parse_binding(text)
    check_name(name, "binding name")
    found = store.stored_binding(run_id, BindingRef(name, execution_id))
    if found is None:
        where = f" in block execution {execution_id}" if execution_id else ""
        raise NotFoundError(f"run {run_id} has no binding '{name}'{where}")
    if as_json:
        emit_json({"run_id": run_id, "name": found.name, "execution_id": found.execution_id,
                   "kind": found.kind, "source": found.source, "value": found.value})
    else:
        # on a terminal, control characters written out; piped, the value exactly (click
        # would strip what looks like a colour code)
        value = printable(found.value) if sys.stdout.isatty() else found.value
        click.echo(value, nl=not value.endswith("\n"), color=True)


def _print_view(view: Any, segments: dict[Any, int]) -> None:
    from openprose.state.render import active_constructs

    out = console()
    took = run_time(view.started, view.updated, not view.finished)
    out.print(f"[bold]run {view.id}[/]  {styled(view.status)}")
    out.print(f"program  {plain(view.program_path or '(inline)')}  ({view.backend})")
    out.print(f"started  {view.started}  ·  {'ran' if view.finished else 'running'} {took}")
    cost = f"  ·  ${view.usage.cost_usd:.4f}" if view.usage.cost_usd else ""
    tokens = view.usage.input_tokens + view.usage.output_tokens
    out.print(f"sessions {view.usage.sessions}  ·  tokens {tokens:,} "
              f"({view.usage.input_tokens:,} in, {view.usage.output_tokens:,} out){cost}")
    if view.error:
        out.print(f"[red]error[/]    {plain(view.error)}", overflow="fold")
    where = view.failed_line
    if view.status == "failed" and where:
        lines = view.source.split("\n")
        text = lines[where - 1].strip() if where <= len(lines) else ""
        out.print(f"[red]failed at[/] line {where}: {plain(text)}", overflow="ellipsis",
                  no_wrap=True)
    out.print()
    _timeline(out, view)
    constructs = active_constructs(view)
    if constructs:
        out.print("[bold]active constructs[/]" if not view.finished
                  else "[bold]constructs when the run stopped[/]")
        for line in constructs:
            out.print(plain(line), overflow="ellipsis", no_wrap=True)
        out.print()
    stack = [f for f in view.frames if f.status == "executing"]
    if stack and not view.finished:
        out.print("[bold]call stack[/] (innermost first)")
        for frame in sorted(stack, key=lambda f: -f.execution_id)[:20]:
            out.print(f"  {frame.block} (execution {frame.execution_id}, depth {frame.depth})")
        out.print()
    _tool_calls(out, view)
    _bindings(out, view)
    if view.agents:
        out.print("[bold]agents[/]")
        for agent, where in view.agents:
            out.print(f"  {agent.name} ({agent.scope}): {segments.get(agent, 0)} segment(s) "
                      f"· {plain(where)}", overflow="ellipsis", no_wrap=True)


def _statement(view: Any, line: int) -> str:
    lines = view.source.split("\n")
    return lines[line - 1].strip() if 0 < line <= len(lines) else "?"


def _detail(step: Any) -> str:
    if step.kind == "verdict":
        verdict = str(step.verdict).lower() if isinstance(step.verdict, bool) else step.verdict
        return f"{verdict}: {step.reason}" if step.reason else str(verdict)
    if step.error and step.status != "cancelled":
        return step.error
    if step.binding is not None:
        scope = f"@{step.binding.execution_id}" if step.binding.execution_id else ""
        return f"→ {step.binding.name}{scope}"
    return ""


def _timeline(out: Any, view: Any) -> None:
    from rich import box

    if not view.steps:
        out.print("no steps recorded yet\n")
        return
    groups: dict[tuple[str, str], list[Any]] = {}
    for step in view.steps:
        groups.setdefault((_ITERATION.sub("[*]", step.key), step.kind), []).append(step)
    rows: list[list[str]] = []
    for (_, kind), steps in groups.items():
        first = steps[0]
        what = _statement(view, first.line) if first.line else first.key
        if kind == "verdict":
            what = f"? {what}"
        if len(steps) < GROUP_AT:
            for step in steps:
                took = "" if step.duration is None else human_duration(step.duration)
                rows.append([str(step.line or ""), plain(what), styled(step.status), took,
                             plain(_detail(step))])
            continue
        states = Counter(step.status for step in steps)
        times = [s.duration for s in steps if s.duration is not None]
        took = f"~{human_duration(sum(times) / len(times))}" if times else ""
        summary = ", ".join(f"{count} {status}" for status, count in states.most_common())
        failed = next((s for s in steps if s.status == "failed"), None)
        detail = f"first error: {failed.error}" if failed and failed.error else \
            _detail(steps[-1]) if kind == "verdict" else ""
        rows.append([str(first.line or ""), plain(f"{what} ×{len(steps)}"), summary, took,
                     plain(detail)])
    columns = [Col("line", "right"), Col("statement", drop=3, least=16), Col("status"),
               Col("time", "right", drop=2), Col("detail", drop=4, least=30)]
    out.print(fitted_table(out, columns, rows, box=box.SIMPLE_HEAD, pad_edge=False,
                           show_edge=False, title_justify="left", title="[bold]timeline[/]"))
    out.print()


def _tool_calls(out: Any, view: Any) -> None:
    """What the sessions did to the project: each work-tool call under its session, the
    refused ones marked, with the rule that decided it."""

    if not view.tools:
        return
    steps = {step.key: step for step in view.steps if step.kind == "session"}
    refused = sum(1 for entry in view.tools if entry.status == "refused")
    out.print(f"[bold]tool calls[/] ({len(view.tools)}, {refused} refused)")
    current = None
    for entry in view.tools:
        if entry.key != current:
            current = entry.key
            step = steps.get(entry.key)
            line = step.line if step is not None else int(entry.meta.get("line") or 0)
            what = _statement(view, line) if line else entry.key
            out.print(f"  line {line or '?'}: {plain(what)}  [dim]agent "
                      f"{plain(str(entry.meta.get('agent', '?')))}[/]",
                      overflow="ellipsis", no_wrap=True)
        meta = entry.meta
        mark = "[green]ok[/]     " if entry.status == "allowed" else "[red]REFUSED[/]"
        subject = " ".join(str(meta.get("subject", "")).split())
        tail = []
        if entry.status == "allowed":
            if meta.get("tool") == "bash":
                tail.append(f"exit {meta.get('exit_code', '(killed at its timeout)')}")
            tail.append(size_text(meta.get("bytes"), spaced=False))
        tail.append(f"({meta.get('rule', '')})")
        out.print(f"    {mark} {plain(str(meta.get('tool', '?')))} {plain(subject)}  "
                  f"{plain(' '.join(tail))}", overflow="ellipsis", no_wrap=True)
    out.print()


def _bindings(out: Any, view: Any) -> None:
    from rich import box

    if not view.bindings:
        return
    rows: dict[str, list[Any]] = {}
    many = len(view.bindings) > MAX_BINDING_ROWS
    for info in view.bindings:
        name = info.ref.name
        if many and (info.ref.execution_id is not None or re.fullmatch(r"anon_\d+", name)):
            name = "anon_*" if name.startswith("anon_") else f"{name}@*"
        rows.setdefault(name if many else f"{info.ref.name}@{info.ref.eid}", []).append(info)
    cells: list[list[str]] = []
    for members in rows.values():
        if len(members) == 1:
            info = members[0]
            scope = f"exec {info.ref.execution_id}" if info.ref.execution_id else "root"
            cells.append([plain(info.ref.name), info.kind, scope,
                          size_text(info.size, spaced=False), plain(info.preview or "")])
            continue
        total = sum(m.size or 0 for m in members)
        kinds = "/".join(sorted({m.kind for m in members}))
        base = members[0].ref.name if members[0].ref.execution_id else "anon_*"
        cells.append([plain(f"{base} ×{len(members)}"), kinds, "many",
                      size_text(total, spaced=False), plain(members[-1].preview or "")])
    columns = [Col("name"), Col("kind", drop=3), Col("scope", drop=4),
               Col("size", "right", drop=5), Col("preview", drop=2, least=30)]
    out.print(fitted_table(out, columns, cells, box=box.SIMPLE_HEAD, pad_edge=False,
                           show_edge=False, title_justify="left", title="[bold]bindings[/]"))
    out.print()
