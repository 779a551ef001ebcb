"""MCP server benchmark (issue 11, done-when 4).

    python bench/mcp.py [--sections results,tools,round-trip,...] [--trips 200] [--statements 200]

Starts the installed ``prose serve`` (the ``prose`` beside this Python) in a throwaway project
and talks to it over a real stdio pipe with the SDK's client, as a host does. Sections:

- ``results``: bytes a host reads back from ``spawn_session`` (a session whose context is a
  1 KB or a 1 MB binding) and from ``write_binding`` (a 1 KB or a 1 MB value): the JSON of
  the tool result, text and structured content. Target: the same for both sizes, <= 600 B.
- ``tools``: the size of the ``tools/list`` result every host reads into its context, and the
  largest tools in it. Target: <= 10 KB.
- ``round-trip``: median (and 90th percentile) wall time of one ``write_binding`` of a 1 KB
  value over stdio, call to result, each on its own session; beside it, measured in turn with
  each write (a loaded machine slows all four alike): ``read_binding`` of that value (no
  durable write), a call of a tool that does nothing on the same transport (the SDK's and the
  pipe's share), and the fsync floor (appending a 1 KB line beside the run's files and
  fsyncing it). Target (issue 25): write_binding <= 1.5x (do-nothing call + fsync). Beside
  it, the commit's own file work (issue 30): a 1 KB file made in a staging folder and renamed
  into a folder of the trip's earlier files, then the 1 KB append and fsync, as the filesystem
  backend commits a binding; what a write costs the disk with no server around it.
- ``guided-overhead`` (issues 12, 25): per-statement wall time of a guided run of
  ``--statements`` sequential sessions, the host answering each at once (next_step,
  write_binding), beside ``prose run``'s engine on the scripted provider in process (both
  from the program text, so compiling counts on both sides) and two calls of a tool that does
  nothing, each round measuring all three; the fastest of ``--repeat`` rounds. Target:
  guided <= 1.25x (two do-nothing calls + prose run). Beside it, the same parts *in series*
  (issue 30): ``prose run`` whose provider makes the two do-nothing calls before answering
  each session, so each statement's commit follows its round trips as a guided one does.
  Measured apart, each part runs warm (commits back to back, calls back to back); in series
  every part pays for what ran between (a disk idle between commits, caches the other
  process left), so the sum understates what any host-driven statement can cost.
- ``guided-bytes`` (issue 12): bytes a host reads per guided session (the next_step result
  carrying it and the write_binding confirmation) for 1 KB and 1 MB values. Target: <= 1.5 KB,
  the same for both.
- ``main-bytes`` (issue 25): bytes the main agent sees (structured content as JSON, what Claude
  Code shows) per guided session (its next_step item and write confirmation) and per judgment,
  for 1 KB and 1 MB values and a 200-character and a 7.7 KB agent role; then whole guided runs
  of corpus programs with long agent roles (``--corpus``). Targets: <= 1024 and <= 1536, the
  same for every size. ``PYTHONPATH=<checkout>/src`` measures another checkout's server.
- ``plugin`` (issue 13): bytes of our tool descriptions a host sends with every turn, and
  Claude Code's projected token cost of the plugin (``claude plugin details``, with Claude Code
  from ``OPENPROSE_TEST_CLAUDE`` or PATH, in a throwaway HOME).
- ``subagent-tools`` (issue 25): in the real Claude Code with the plugin, a guided run of a
  program with a parallel block (tests/hosts' scripted host model on a local fake of the
  Messages API): bytes of tool definitions in each request of the main agent and of a
  session's subagent, ours and all, for the plugin's ``openprose:session`` agent and for a
  ``general-purpose`` one. Target for ours per subagent request: <= 3 KB.

- ``embodied`` (issue 22): the same corpus programs run guided (a host answering next_step)
  and embodied (tests/mcp_server/tool_host.py's scripted host stepping the program, which the
  server follows): the main agent's requests (its tool calls) and the bytes of their results it
  reads (structured content as JSON), and ``start_run``'s own bytes in each mode.
  ``PYTHONPATH=<checkout>/src`` measures another checkout's server (its ``start_run`` bytes
  and guided runs; the embodied walker needs ``get_brief``).

- ``busy-loop`` (issue 29): a guided run of a program that only computes (``repeat N:`` over
  a plain assignment, ``--rounds``, 30,000 by default) while the same client keeps calling
  ``list_tools``: the slowest and the median ``list_tools`` answer during the loop (the loop
  held the event loop: the first answer came when it ended), and the loop's wall time per
  round for a third, two thirds and all of the rounds (how the cost of a round grows).

- ``against`` (issue 30; only when named): this checkout's server and another checkout's
  (``--against OTHER/src``), both alive at once and taking turns round by round: guided
  per-statement time, write_binding and a do-nothing call (each side's own transport) of
  each, with the median of the rounds' ratios. Separate runs on a shared machine moved by
  more than the changes did; turns make load and the disk's moods hit both alike.

A section is a function taking the connected client and the options and printing its lines;
add one to ``SECTIONS``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# Run as a script, this file's folder leads sys.path and this module would shadow the SDK.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

import anyio  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from pydantic import BaseModel  # noqa: E402

PROSE = str(Path(sys.executable).with_name("prose"))
REPO = Path(__file__).resolve().parents[1]
KB, MB = 1024, 1024 * 1024
DIGEST = 'input material: "what to digest"\nlet digest = session "Digest the material"\n' \
         "  context: material\n"


class BenchError(Exception):
    """A tool refused a call the benchmark needs."""


def wire_bytes(result: BaseModel) -> int:
    """Size of a result as JSON, the way it crosses the pipe."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        text = " ".join(getattr(part, "text", "") for part in result.content)
        raise BenchError(f"{tool} refused: {text}")
    return result


def sequential(n: int, tag: str) -> str:
    """A program of ``n`` sessions one after another, each binding ``part<i>``; ``tag`` in
    their prompts makes each program new (nothing parsed is reused)."""
    return "".join(f'let part{i} = session "Write part {i} of {tag}"\n' for i in range(n))


async def start(client: Client, source: str, inputs: dict[str, str] | None = None
                ) -> tuple[str, dict[str, str]]:
    """Start a host-driven run of ``source``: its VM token and statement ids by binding."""
    started = (await call(client, "start_run", program=source, inputs=inputs or {}))
    content = started.structured_content
    ids = {entry["binds"]: entry["id"] for entry in content["outline"] if entry.get("binds")}
    return content["vm_token"], ids


async def section_results(client: Client, options: argparse.Namespace) -> None:
    print("result sizes (bytes of JSON a host reads back; target: same for both, <= 600)")
    print(f"{'tool':<15} {'1 KB':>8} {'1 MB':>8}")
    spawned, written = [], []
    for size in (KB, MB):
        vm, ids = await start(client, DIGEST, {"material": "m" * size})
        session = await call(client, "spawn_session", vm_token=vm, statement=ids["digest"],
                             prompt="Digest the material", context=["material"])
        spawned.append(wire_bytes(session))
        token = session.structured_content["session_token"]
        written.append(wire_bytes(await call(client, "write_binding", token=token,
                                              value="d" * size)))
    print(f"{'spawn_session':<15} {spawned[0]:>8} {spawned[1]:>8}")
    print(f"{'write_binding':<15} {written[0]:>8} {written[1]:>8}")
    digits = 2 * (len(str(MB)) - len(str(KB)))  # the byte count, in text and structured content
    if written[1] - written[0] == digits:
        print(f"  (write_binding differs only by the byte count's {digits // 2} extra digits, "
              "in text and structured content)")


async def section_tools(client: Client, options: argparse.Namespace) -> None:
    listed = await client.list_tools()
    sizes = sorted(((wire_bytes(tool), tool.name) for tool in listed.tools), reverse=True)
    print(f"tools/list: {wire_bytes(listed)} bytes, {len(listed.tools)} tools "
          "(target <= 10240)")
    print("  largest: " + ", ".join(f"{name} {size}" for size, name in sizes[:5]))
    parts = {"descriptions": sum(len((tool.description or "").encode()) for tool in listed.tools),
             "input schemas": sum(len(json.dumps(tool.input_schema, separators=(",", ":")))
                                  for tool in listed.tools),
             "output schemas": sum(len(json.dumps(tool.output_schema or {},
                                                  separators=(",", ":")))
                                   for tool in listed.tools)}
    print("  of which " + ", ".join(f"{name} {size}" for name, size in parts.items()))


async def section_round_trip(client: Client, options: argparse.Namespace) -> None:
    """write_binding against its floor, measured interleaved (each trip times a write, a
    read, a do-nothing call and an fsync in turn) so load on a shared machine hits all alike."""
    trips = options.trips
    source = sequential(trips, "the trip")
    vm, ids = await start(client, source)
    value = "w" * KB
    writes, reads, empties, syncs, commits = [], [], [], [], []
    async with empty_client() as empty:
        for _ in range(20):  # warm both ends
            await call(empty, "noop", token="x")
        for i in range(trips):
            session = await call(client, "spawn_session", vm_token=vm,
                                 statement=ids[f"part{i}"],
                                 prompt=f"Write part {i} of the trip")
            token = session.structured_content["session_token"]
            began = time.perf_counter()
            await call(client, "write_binding", token=token, value=value)
            writes.append(time.perf_counter() - began)
            began = time.perf_counter()
            await call(client, "read_binding", token=vm, name=f"part{i}")
            reads.append(time.perf_counter() - began)
            began = time.perf_counter()
            await call(empty, "noop", token="x")
            empties.append(time.perf_counter() - began)
            syncs += fsync_floor(options.project, 1)
            commits.append(file_commit(options.project, i))
    shutil.rmtree(options.project / "commit-floor")
    for label, timings, note in (
            ("write_binding 1 KB over stdio", writes, ""),
            ("read_binding 1 KB over stdio", reads, " (no durable write)"),
            ("a tool that does nothing over stdio", empties, " (the SDK at both ends, the pipe)"),
            ("fsync floor 1 KB", syncs, " (append + fsync beside the run's files)"),
            ("a binding's commit on the disk alone", commits,
             " (file made, renamed in; append + fsync)")):
        ordered = sorted(timings)
        print(f"{label}: median {statistics.median(ordered) * 1e3:.2f} ms, p90 "
              f"{ordered[int(len(ordered) * 0.9)] * 1e3:.2f} ms over {trips} calls{note}")
    floor = statistics.median(empties) + statistics.median(syncs)
    ratio = statistics.median(writes) / floor
    print(f"write_binding / (do-nothing call + fsync) = {statistics.median(writes) * 1e3:.2f} / "
          f"{floor * 1e3:.2f} ms = {ratio:.2f}x (target <= 1.5x)")
    with_files = statistics.median(empties) + statistics.median(commits)
    print(f"write_binding / (do-nothing call + the commit's file work) = "
          f"{statistics.median(writes) * 1e3:.2f} / {with_files * 1e3:.2f} ms = "
          f"{statistics.median(writes) / with_files:.2f}x")
    print(f"load average while measuring: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")


def file_commit(project: Path, number: int) -> float:
    """Wall time of the file work of committing one 1 KB binding, with no server around it:
    the file made in a staging folder and renamed into ``bindings/`` beside the trip's
    earlier ones, then a 1 KB line appended to a journal and fsynced."""
    root = project / "commit-floor"
    (root / "bindings").mkdir(parents=True, exist_ok=True)
    (root / "staging").mkdir(exist_ok=True)
    temp = root / "staging" / f"part{number}.tmp"
    journal = os.open(root / "journal.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:  # the journal is open already, as the backend keeps it
        began = time.perf_counter()
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"w" * KB)
        os.close(fd)
        os.replace(temp, root / "bindings" / f"part{number}.md")
        os.write(journal, b"j" * KB + b"\n")
        os.fsync(journal)
        return time.perf_counter() - began
    finally:
        os.close(journal)


def fsync_floor(project: Path, trips: int) -> list[float]:
    """Wall times of appending a 1 KB line to a file in ``project`` and fsyncing it: what
    one durable journal commit costs on this disk, with no server around it."""
    path = project / "fsync-floor.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    line = b"f" * KB + b"\n"
    timings = []
    try:
        for _ in range(trips):
            began = time.perf_counter()
            os.write(fd, line)
            os.fsync(fd)
            timings.append(time.perf_counter() - began)
    finally:
        os.close(fd)
        path.unlink()
    return timings


async def guided_walk(client: Client, source: str, value: str,
                      inputs: dict[str, str] | None = None,
                      writes: list[float] | None = None) -> list[Any]:
    """Run ``source`` guided, the host writing ``value`` for every session at once: each
    next_step result that carried a session, and each write_binding confirmation (its wall
    time appended to ``writes``, when given)."""
    started = await call(client, "start_run", program=source, inputs=inputs or {},
                         mode="guided")
    vm = started.structured_content["vm_token"]
    seen: list[Any] = []
    while True:
        step = await call(client, "next_step", vm_token=vm, wait_s=5.0)
        content = step.structured_content
        if content["status"] != "running":
            if content["status"] != "completed":
                raise SystemExit(f"guided run ended {content['status']}: {content}")
            return seen
        sessions = [item for item in content.get("pending", []) if item["kind"] == "session"]
        if sessions:
            seen.append(step)
        for item in sessions:
            sent = time.perf_counter()
            seen.append(await call(client, "write_binding", token=item["token"], value=value,
                                   summary="done"))
            if writes is not None:
                writes.append(time.perf_counter() - sent)


#: A server with one tool that does nothing, on the same stdio transport as ``prose serve``:
#: what a tool call costs the SDK (both ends) and the pipe before any of our work.
EMPTY_SERVER = """
import anyio
from mcp.server.mcpserver import MCPServer
from openprose.mcp_server.transport import serve_stdio

mcp = MCPServer("empty")


@mcp.tool()
async def noop(token: str = "") -> str:
    \"\"\"Does nothing.\"\"\"
    return "ok"


anyio.run(serve_stdio, mcp)
"""


def empty_client() -> Client:
    """A client of a server whose one tool does nothing, over stdio like ``prose serve``."""
    server = StdioServerParameters(command=sys.executable, args=["-c", EMPTY_SERVER])
    return Client(server, mode="legacy")


async def prose_run(source: str, round_trips: Client | None = None) -> float:
    """Wall time of ``prose run``'s engine on the scripted provider, compile included. With
    ``round_trips``, each session first makes two do-nothing calls on that client: the
    floor's parts in the order a guided statement has them."""
    from openprose.engine import runner
    from openprose.engine.interpreter import Options
    from openprose.engine.scripted import ScriptedProvider
    from openprose.language import compile_or_raise

    class RoundTrips(ScriptedProvider):
        async def run_session(self, request: Any, io: Any) -> Any:
            await call(round_trips, "noop", token="x")
            await call(round_trips, "noop", token="x")
            return await super().run_session(request, io)

    provider = (ScriptedProvider if round_trips is None else RoundTrips)(
        {"default_output": "w" * 100})
    with tempfile.TemporaryDirectory(prefix="prose-bench-run-") as tmp:
        began = time.perf_counter()
        job = runner.Job(source=source, file="bench.prose",
                         program=compile_or_raise(source, "bench.prose"),
                         project_root=Path(tmp), options=Options())
        outcome = await runner.execute(job, provider)
        took = time.perf_counter() - began
    if outcome.status != "completed":
        raise SystemExit(f"prose run ended {outcome.status}: {outcome.error}")
    return took


async def section_guided_overhead(client: Client, options: argparse.Namespace) -> None:
    """A guided statement against its floor (two do-nothing calls + prose run's own
    statement) and against the same parts in series, all measured in turn in each round so
    load hits all alike."""
    n, repeat = options.statements, options.repeat
    guided, scripted, pairs, serial = [], [], [], []
    async with empty_client() as empty:
        for _ in range(20):
            await call(empty, "noop", token="x")
        for round_ in range(repeat):  # a new program each round: nothing parsed is reused
            source = sequential(n, f"round {round_}")
            began = time.perf_counter()
            await guided_walk(client, source, "w" * 100)
            guided.append((time.perf_counter() - began) / n)
            scripted.append(await prose_run(source) / n)
            serial.append(await prose_run(source, round_trips=empty) / n)
            began = time.perf_counter()
            for _ in range(n):
                await call(empty, "noop", token="x")
                await call(empty, "noop", token="x")
            pairs.append((time.perf_counter() - began) / n)
    best, base, two, chained = min(guided), min(scripted), min(pairs), min(serial)
    floor = two + base
    print(f"guided run, {n} sequential sessions, host answering at once over stdio "
          f"(start_run, then next_step + write_binding per session; fastest of {repeat})")
    print(f"  per statement: guided {best * 1e3:.2f} ms; prose run (scripted, in process, "
          f"compile included) {base * 1e3:.2f} ms; two do-nothing calls {two * 1e3:.2f} ms")
    print(f"  guided / (two do-nothing calls + prose run) = {best * 1e3:.2f} / "
          f"{floor * 1e3:.2f} ms = {best / floor:.2f}x (target <= 1.25x); guided / prose run "
          f"{best / base:.2f}x")
    print(f"  the same parts in series (prose run, two do-nothing calls before each session) "
          f"{chained * 1e3:.2f} ms = {chained / floor:.2f}x their sum; guided / in series "
          f"{best / chained:.2f}x")
    print(f"load average while measuring: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")


async def section_guided_bytes(client: Client, options: argparse.Namespace) -> None:
    print("guided: bytes a host reads per session (next_step with one session + its "
          "write_binding confirmation; JSON, text and structured; target <= 1536, same for "
          "both)")
    print(f"{'value':<8} {'next_step':>10} {'write':>8} {'total':>8}")
    for label, size in (("1 KB", KB), ("1 MB", MB)):
        step, written = await guided_walk(client, DIGEST, "d" * size, {"material": "m" * size})
        sizes = wire_bytes(step), wire_bytes(written)
        print(f"{label:<8} {sizes[0]:>10} {sizes[1]:>8} {sum(sizes):>8}")


#: Issue 25: an agent with a long role, three large branch results, then a judged loop.
ROLE = "You are a careful analyst: you check every figure against its source, say what " \
       "you could not verify, and keep your notes short. " * 60
JUDGED = f"""\
input material: "what to study"
agent analyst:
  prompt: "{ROLE}"
parallel:
  market = session: analyst
    prompt: "Study the market"
    context: material
  costs = session: analyst
    prompt: "Study the costs"
    context: material
  risks = session: analyst
    prompt: "Study the risks"
    context: material
let draft = "none yet"
loop until **the draft is approved** (max: 3):
  draft = session: analyst
    prompt: "Write the draft"
    context: {{ market, costs, risks }}
output final = session "Polish"
  context: draft
"""


def seen_bytes(content: dict[str, Any]) -> int:
    """Bytes of structured content as Claude Code shows it to the model (JSON)."""
    return len(json.dumps(content, ensure_ascii=False).encode())


async def walk_all(client: Client, source: str, inputs: dict[str, str], value: str
                   ) -> dict[str, list[int]]:
    """Run ``source`` guided, the host answering everything at once (sessions with
    ``value``; a condition false twice, then true; a choice its first option). Bytes the
    main agent sees: each session item plus its write confirmation, each judgment item,
    each next_step result (structured content, and the whole result on the wire)."""
    started = await call(client, "start_run", program=source, inputs=inputs, mode="guided")
    vm = started.structured_content["vm_token"]
    found: dict[str, list[int]] = {"session": [], "judgment": [], "step": [], "wire": []}
    answered: set[str] = set()
    judged = 0
    while True:
        step = await call(client, "next_step", vm_token=vm, wait_s=5.0)
        content = step.structured_content
        found["step"].append(seen_bytes(content))
        found["wire"].append(wire_bytes(step))
        if content["status"] != "running":
            if content["status"] != "completed":
                raise BenchError(f"guided run ended {content['status']}: {content}")
            return found
        for item in content.get("pending", []):
            if item["token"] in answered:
                continue
            answered.add(item["token"])
            if item["kind"] == "session":
                written = await call(client, "write_binding", token=item["token"],
                                     value=value, summary="done")
                found["session"].append(seen_bytes(item)
                                        + seen_bytes(written.structured_content))
                continue
            found["judgment"].append(seen_bytes(item))
            judged += 1
            verdict: bool | str = item["options"][0] if item.get("options") else judged % 3 == 0
            await call(client, "submit_verdict", token=item["token"], value=verdict,
                       reason="checked")


def corpus_inputs(source: str) -> dict[str, str]:
    from openprose.language import compile_or_raise

    return {decl.name: f"sample {decl.name}"
            for decl in compile_or_raise(source, "corpus.prose").inputs}


async def section_main_bytes(client: Client, options: argparse.Namespace) -> None:
    """Issue 25: what the main agent's context pays per guided session and per judgment,
    whatever the values' sizes and the agents' roles; and whole runs of corpus programs
    with long agent roles."""
    print("guided: bytes the main agent sees (structured content as JSON, what Claude Code "
          "shows); targets: per session <= 1024, per judgment <= 1536, the same for all sizes")
    print(f"{'values':<7} {'role':>6} {'session max':>12} {'judgment max':>13} "
          f"{'next_step total':>16} {'on the wire':>12}")
    for label, size in (("1 KB", KB), ("1 MB", MB)):
        for role in (ROLE[:200], ROLE):
            source = JUDGED.replace(ROLE, role)
            found = await walk_all(client, source, {"material": "m" * size}, "v" * size)
            print(f"{label:<7} {len(role):>6} {max(found['session']):>12} "
                  f"{max(found['judgment']):>13} {sum(found['step']):>16} "
                  f"{sum(found['wire']):>12}")
    corpus = Path(options.corpus)
    print(f"whole guided runs of corpus programs with long agent roles ({corpus}), values "
          "100 B: next_step bytes in all (structured / on the wire), the largest session and "
          "judgment")
    for name in ("38-skill-scan.prose", "47-language-self-improvement.prose"):
        path = corpus / name
        if not path.is_file():
            print(f"  {name}: skipped (not found)")
            continue
        source = path.read_text(encoding="utf-8")
        try:
            found = await walk_all(client, source, corpus_inputs(source), "r" * 100)
        except BenchError as err:
            print(f"  {name}: {err}")
            continue
        print(f"  {name}: {len(found['step'])} next_step calls, {sum(found['step'])} B "
              f"structured / {sum(found['wire'])} B on the wire; {len(found['session'])} "
              f"sessions (max {max(found['session'], default=0)} B), "
              f"{len(found['judgment'])} judgments (max {max(found['judgment'], default=0)} B)")


async def section_plugin(client: Client, options: argparse.Namespace) -> None:
    """What the Claude Code plugin costs a host's context: Claude Code's own projection of
    the skill (``claude plugin details``) and the tool descriptions sent with every turn."""
    listed = await client.list_tools()
    prefix = "mcp__plugin_openprose_openprose__"
    carried = [len(json.dumps({"name": prefix + tool.name, "description": tool.description,
                               "input_schema": tool.input_schema}).encode())
               for tool in listed.tools]
    print(f"tool descriptions a host sends the model every turn: {sum(carried)} bytes for "
          f"{len(carried)} tools (name, description, input schema as Claude Code names them)")
    claude = os.environ.get("OPENPROSE_TEST_CLAUDE") or shutil.which("claude")
    if not claude:
        print("claude plugin details: skipped (Claude Code not found: set "
              "OPENPROSE_TEST_CLAUDE or put claude on PATH)")
        return
    with tempfile.TemporaryDirectory(prefix="prose-bench-claude-") as home:
        env = {**os.environ, "HOME": home, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "DISABLE_TELEMETRY": "1"}
        for args in (["plugin", "marketplace", "add", str(REPO)],
                     ["plugin", "install", "openprose@openprose"],
                     ["plugin", "details", "openprose"]):
            done = subprocess.run([claude, *args], env=env, cwd=home, capture_output=True,
                                  text=True, timeout=120)
            if done.returncode != 0:
                raise SystemExit(f"claude {' '.join(args)}: {done.stdout}{done.stderr}")
    lines = done.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Projected")), None)
    if start is None:
        raise SystemExit(f"claude plugin details printed no projection:\n{done.stdout}")
    print("claude plugin details openprose (Claude Code's projection):")
    for line in lines[start + 1:]:
        if line.strip() and not line.strip().startswith(("On-invoke cost", "Token counts")):
            print("  " + line.strip())


def tool_definition_bytes(claude: str, agent: str) -> dict[str, tuple[int, int, int]]:
    """main/subagent -> (our tools, our bytes, all bytes) of the first request of each kind
    in a guided run in Claude Code, sessions handed to subagents of type ``agent``."""
    sys.path.insert(0, str(REPO))
    from tests.hosts.claude_code import PLUGIN_DIR, TOOL_PREFIX, claude_env
    from tests.hosts.fake_messages import FakeMessagesAPI
    from tests.hosts.host_model import SESSION_MARK, HostModel, first_user_text
    from tests.hosts.test_plugin_runs import INPUTS, PROGRAM

    with tempfile.TemporaryDirectory(prefix="prose-bench-agents-") as tmp:
        project = Path(tmp) / "project"
        (project / "examples").mkdir(parents=True)
        (project / "examples" / "review.prose").write_text(PROGRAM)
        model = HostModel("guided", "examples/review.prose", INPUTS, agent=agent)
        with FakeMessagesAPI(model) as api:
            done = subprocess.run(
                [claude, "-p", "prose run examples/review.prose topic=tides", "--plugin-dir",
                 str(PLUGIN_DIR), "--allowedTools", f"{TOOL_PREFIX.rstrip('_')},Agent"],
                env=claude_env(Path(tmp) / "home", api.url), cwd=project,
                capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or api.errors:
            raise BenchError(f"claude -p failed: {api.errors} {done.stdout}{done.stderr}")
    found = {}
    for kind in ("main", "subagent"):
        body = next(b for b in model.bodies
                    if (SESSION_MARK in first_user_text(b)) == (kind == "subagent"))
        ours = [t for t in body["tools"] if t["name"].startswith(TOOL_PREFIX)]
        found[kind] = (len(ours), len(json.dumps(ours).encode()),
                       len(json.dumps(body["tools"]).encode()))
    return found


async def section_subagent_tools(client: Client, options: argparse.Namespace) -> None:
    """Tool definitions per request of the main agent and of a session's subagent."""
    claude = os.environ.get("OPENPROSE_TEST_CLAUDE") or shutil.which("claude")
    if not claude:
        print("subagent-tools: skipped (Claude Code not found: set OPENPROSE_TEST_CLAUDE or "
              "put claude on PATH)")
        return
    print(f"{'subagent type':<20} {'request':<9} {'our tools':>9} {'our bytes':>10} "
          f"{'all bytes':>10}")
    for agent in ("openprose:session", "general-purpose"):
        found = await anyio.to_thread.run_sync(tool_definition_bytes, claude, agent)
        for kind, (count, ours, every) in found.items():
            print(f"{agent:<20} {kind:<9} {count:>9} {ours:>10} {every:>10}")


Section = Callable[[Client, argparse.Namespace], Awaitable[None]]
#: Programs with sequences, if/elif/else, choice, judged loops, parallel and blocks.
EMBODIED_PROGRAMS = ("25-conditionals.prose", "24-choice-blocks.prose",
                     "16-parallel-reviews.prose", "14-composition-blocks.prose",
                     "40-rlm-self-refine.prose", "18-mixed-parallel-sequential.prose",
                     "20-fixed-loops.prose")
#: Calls a session's subagent makes (its own context), not the main agent.
SUBAGENT_TOOLS = frozenset({"get_brief", "read_binding", "read_memory", "write_memory"})


def embodied_walk(options: argparse.Namespace, name: str, source: str, reports: bool = True
                  ) -> tuple[int, int]:
    """(main-agent requests, bytes of their results) of an embodied walk of ``source``: a
    ``prose serve`` over stdio stepped by the tests' scripted host (answers as guided runs
    get them: a condition false twice then true, a choice its first option)."""
    sys.path.insert(0, str(REPO))
    from tests.mcp_server.tool_host import Bridge, walk

    seen: list[tuple[str, dict[str, Any], int]] = []

    class Counting(Bridge):
        async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await super()._call(tool, arguments)
            content = {k: v for k, v in result.items() if k != "_text"}
            seen.append((tool, arguments, seen_bytes(content)))
            return result

    project = options.project / f"embodied-{reports}-{name}"
    project.mkdir()
    (project / name).write_text(source, encoding="utf-8")
    keep = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
    server = StdioServerParameters(command=PROSE, args=["serve", "--project", str(project)],
                                   env={"HOME": str(project), **keep})
    script = {"sessions": [{"match": ".", "output": "r" * 100}],
              "conditions": [{"match": ".", "verdicts": [False, False, True]}]}
    walk(server, {"mode": "legacy"}, source, name, corpus_inputs(source), script,
         bridge_type=Counting, concurrency=1, reports=reports)
    main = [(tool, size) for tool, arguments, size in seen
            if tool not in SUBAGENT_TOOLS
            and not (tool == "write_binding" and not str(arguments.get("token", ""))
                     .startswith("vm."))]
    return len(main), sum(size for _, size in main)


async def guided_requests(client: Client, source: str) -> tuple[int, int]:
    """(main-agent requests, bytes of their results) of a guided run of ``source``: start_run,
    each next_step and submit_verdict (sessions are written by subagents); answers as
    :func:`embodied_walk`'s."""
    started = await call(client, "start_run", program=source, inputs=corpus_inputs(source),
                         mode="guided")
    vm = started.structured_content["vm_token"]
    requests, size = 1, seen_bytes(started.structured_content)
    rounds: dict[str, int] = {}
    answered: set[str] = set()
    while True:
        step = await call(client, "next_step", vm_token=vm, wait_s=5.0)
        requests, size = requests + 1, size + seen_bytes(step.structured_content)
        content = step.structured_content
        if content["status"] != "running":
            return requests, size
        for item in content.get("pending", []):
            if item["token"] in answered:
                continue
            answered.add(item["token"])
            if item["kind"] == "session":
                await call(client, "write_binding", token=item["token"], value="r" * 100)
                continue
            seen = rounds[item["condition"]] = rounds.get(item["condition"], -1) + 1
            verdict: bool | str = item["options"][0] if item.get("options") else seen >= 2
            done = await call(client, "submit_verdict", token=item["token"], value=verdict,
                              reason="scripted")
            requests, size = requests + 1, size + seen_bytes(done.structured_content or {})


async def section_embodied(client: Client, options: argparse.Namespace) -> None:
    """Issue 22: what an embodied run costs the main agent beside a guided one."""
    corpus = Path(options.corpus)
    print("main agent: requests (tool calls) and bytes of their results, guided vs embodied; "
          "start_run's bytes in each mode; embodied without update_state after each session "
          "(state.md shows sessions on its own)")
    print(f"{'program':<36} {'guided req':>10} {'bytes':>8} {'embodied req':>12} {'bytes':>8} "
          f"{'no reports':>10} {'bytes':>8} {'start guided':>12} {'start embodied':>14}")
    for name in EMBODIED_PROGRAMS:
        path = corpus / name
        if not path.is_file():
            print(f"{name:<36} skipped (not found)")
            continue
        source = path.read_text(encoding="utf-8")
        inputs = corpus_inputs(source)
        starts = []
        for mode in ("guided", "host"):
            started = await call(client, "start_run", program=source, inputs=inputs, mode=mode)
            starts.append(seen_bytes(started.structured_content))
            if mode == "guided":
                await call(client, "cancel_run", run_id=started.structured_content["run_id"])
        guided = await guided_requests(client, source)
        shown = ""
        for reports, width in ((True, 12), (False, 10)):
            try:
                embodied = await anyio.to_thread.run_sync(embodied_walk, options, name, source,
                                                          reports)
                shown += f" {embodied[0]:>{width}} {embodied[1]:>8}"
            except Exception as err:  # an older server: no get_brief for the walker
                shown += f" {'(' + type(err).__name__ + ')':>{width + 9}}"
        print(f"{name:<36} {guided[0]:>10} {guided[1]:>8}{shown} {starts[0]:>12} "
              f"{starts[1]:>14}")


def busy_program(rounds: int) -> str:
    return f'let x = "a"\nrepeat {rounds}:\n  x = "b"\noutput o = x\n'


async def busy_run(client: Client, rounds: int, probe: bool) -> tuple[float, list[float]]:
    """A guided run of ``rounds`` rounds of computing: its wall time, and the list_tools
    latencies measured (``probe``) while it ran."""
    latencies: list[float] = []
    status: dict[str, str] = {}
    began = time.perf_counter()

    async def drive() -> None:
        started = await call(client, "start_run", program=busy_program(rounds), mode="guided")
        vm = started.structured_content["vm_token"]
        while True:
            step = await call(client, "next_step", vm_token=vm, wait_s=5.0)
            if step.structured_content["status"] != "running":
                status["done"] = step.structured_content["status"]
                return

    async with anyio.create_task_group() as group:
        group.start_soon(drive)
        await anyio.sleep(0.5)  # the run is under way
        while probe and "done" not in status:
            sent = time.perf_counter()
            await client.list_tools()
            latencies.append(time.perf_counter() - sent)
            await anyio.sleep(0.05)
    return time.perf_counter() - began, latencies


async def section_busy_loop(client: Client, options: argparse.Namespace) -> None:
    rounds = options.rounds
    print(f"guided run of repeat {rounds} over a plain assignment; list_tools meanwhile")
    total, latencies = await busy_run(client, rounds, probe=True)
    print(f"  list_tools during the loop: {len(latencies)} calls, slowest "
          f"{max(latencies) * 1e3:.0f} ms, median {statistics.median(latencies) * 1e3:.0f} ms; "
          f"the run took {total:.1f} s")
    for part in (rounds // 3, 2 * rounds // 3, rounds):
        wall, _ = await busy_run(client, part, probe=False)
        print(f"  {part:>6} rounds: {wall:.1f} s, {wall / part * 1e6:.0f} us per round")
    print(f"load average while measuring: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")


async def timed_walk(client: Client, n: int, tag: str) -> tuple[float, float]:
    """A guided walk of ``n`` sequential sessions: wall time per statement and the median
    write_binding call."""
    source = sequential(n, tag)
    writes: list[float] = []
    began = time.perf_counter()
    await guided_walk(client, source, "w" * 100, writes=writes)
    return (time.perf_counter() - began) / n, statistics.median(writes)


async def section_against(client: Client, options: argparse.Namespace) -> None:
    """This checkout's server against another checkout's (``--against OTHER/src``), both
    alive at once and taking turns, the first of each pair alternating: load and the disk's
    moods hit both alike, which separate runs of the benchmark do not (they moved by more
    than the changes did)."""
    if not options.against:
        raise BenchError("the against section needs --against OTHER_CHECKOUT/src")
    other = {"PYTHONPATH": options.against}
    rounds, n = options.repeat * 4, options.statements // 2
    project = options.project / "against"
    project.mkdir()
    theirs = StdioServerParameters(command=PROSE, args=["serve", "--project", str(project)],
                                   env={"HOME": str(options.project), **other})
    their_noop = StdioServerParameters(command=sys.executable, args=["-c", EMPTY_SERVER],
                                       env=other)
    async with Client(theirs, mode="legacy") as other_client, empty_client() as empty, \
            Client(their_noop, mode="legacy") as other_empty:
        sides = {"this": (client, empty), "other": (other_client, other_empty)}
        found: dict[str, dict[str, list[float]]] = {name: {"statement": [], "write_binding": [],
                                                           "do-nothing call": []}
                                                    for name in sides}
        for side in sides.values():
            await timed_walk(side[0], 20, "warm-up")
        for round_ in range(rounds):
            for name in sorted(sides, reverse=round_ % 2 == 1):
                walker, noop = sides[name]
                statement, write = await timed_walk(walker, n, f"round {round_}")
                began = time.perf_counter()
                for _ in range(n):
                    await call(noop, "noop", token="x")
                found[name]["statement"].append(statement)
                found[name]["write_binding"].append(write)
                found[name]["do-nothing call"].append((time.perf_counter() - began) / n)
    print(f"this checkout against {options.against}: {rounds} rounds in turn, {n} sessions "
          "each (medians; this/other is the median of the rounds' ratios)")
    for what in ("statement", "write_binding", "do-nothing call"):
        mine, theirs_ = found["this"][what], found["other"][what]
        ratio = statistics.median(a / b for a, b in zip(mine, theirs_, strict=True))
        print(f"  {what + ':':<17} this {statistics.median(mine) * 1e3:.2f} ms, other "
              f"{statistics.median(theirs_) * 1e3:.2f} ms, this/other {ratio:.3f}")
    print(f"load average while measuring: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")


SECTIONS: dict[str, Section] = {
    "results": section_results,
    "tools": section_tools,
    "round-trip": section_round_trip,
    "guided-overhead": section_guided_overhead,
    "guided-bytes": section_guided_bytes,
    "main-bytes": section_main_bytes,
    "plugin": section_plugin,
    "subagent-tools": section_subagent_tools,
    "embodied": section_embodied,
    "busy-loop": section_busy_loop,
    "against": section_against,
}


async def main(options: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="prose-bench-mcp-") as tmp:
        project = options.project = Path(tmp)
        # PYTHONPATH passes on: PYTHONPATH=<other checkout>/src measures that checkout.
        keep = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
        server = StdioServerParameters(command=PROSE,
                                       args=["serve", "--project", str(project)],
                                       env={"HOME": tmp, **keep})
        async with Client(server, mode="legacy") as client:
            for name in options.sections:
                await SECTIONS[name](client, options)
                print()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default=",".join(name for name in SECTIONS
                                                       if name != "against"),
                        help=f"comma-separated, from {', '.join(SECTIONS)}")
    parser.add_argument("--trips", type=int, default=200,
                        help="write_binding calls timed in round-trip")
    parser.add_argument("--statements", type=int, default=200,
                        help="sessions of the program timed in guided-overhead")
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"),
                        help="the corpus main-bytes runs programs of")
    parser.add_argument("--rounds", type=int, default=30_000,
                        help="rounds of busy-loop's computing program")
    parser.add_argument("--against", default="",
                        help="another checkout's src folder, for the against section")
    parser.add_argument("--repeat", type=int, default=3,
                        help="guided-overhead runs each side this often and keeps the fastest")
    options = parser.parse_args(argv)
    options.sections = [name.strip() for name in options.sections.split(",") if name.strip()]
    unknown = [name for name in options.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(SECTIONS)}")
    return options


if __name__ == "__main__":
    try:
        anyio.run(main, parse())
    except* BenchError as failed:
        first: BaseException = failed
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        sys.exit(f"bench/mcp.py: {first}")
