"""The server against a hostile or careless host (issue 29): values an embodied host may not
forge, runs another client drives, descriptors and the event loop one client cannot take."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import Implementation
from tests.mcp_server.attack_project import make_project
from tests.mcp_server.host import host

from openprose.mcp_server.runs import DRIVER_KEY
from openprose.mcp_server.server import create_server
from openprose.state import BindingRef, open_store

pytestmark = pytest.mark.anyio
PROSE = str(Path(sys.executable).with_name("prose"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def _client(mcp, name: str) -> Client:
    return Client(mcp, mode="legacy", client_info=Implementation(name=name, version="1"))


async def _appears(path_glob: str, root: Path) -> Path:
    """The first file matching ``path_glob`` under ``root``, once one exists (each look gives
    the event loop a turn: the engine runs in this process)."""
    while True:
        found = next(iter(root.glob(path_glob)), None)
        if found is not None:
            return found
        await anyio.sleep(0)


# ------------------------------------------------------------------ the event loop

async def test_another_client_is_answered_while_a_guided_run_computes(root):
    """A guided program that only computes awaited nothing, so it held the event loop: every
    other client waited for its last round (list_tools 15.7 s behind 30,000 rounds)."""
    source = 'let x = "a"\nrepeat 20000:\n  x = "b"\noutput o = x\n'
    mcp = create_server(root, home=root / "home", watch=False)
    async with _client(mcp, "runner") as runner, _client(mcp, "other") as other:
        started: dict[str, str] = {}

        async def start() -> None:
            result = await runner.call_tool("start_run", {"program": source, "mode": "guided"})
            started.update(result.structured_content or {})

        with anyio.fail_after(600):  # a bound, not a measure: the loop takes minutes at worst
            async with anyio.create_task_group() as group:
                group.start_soon(start)
                first = await _appears(".prose/runs/*/bindings/x.md", root)  # rounds under way
                assert (await other.list_tools()).tools
                assert not (first.parent / "o.md").exists()  # answered before the loop ended
        cancelled = await runner.call_tool("cancel_run", {"run_id": started["run_id"],
                                                          "vm_token": started["vm_token"]})
        assert not cancelled.is_error, cancelled.content[0].text


# ------------------------------------------------------------------ runs another client drives

def _taken_by(root: Path, run_id: str) -> str | None:
    run = open_store(root, "filesystem", home=root / "home").open_run(run_id)
    record = run.journal(DRIVER_KEY)
    return record.meta.get("taken_over_by") if record is not None else None


async def test_stopping_or_taking_another_clients_run_needs_its_token_or_take_over(root):
    """cancel_run needed only the run id (list_runs shows it), and resume_run after it handed
    the caller a fresh VM token for a run another client drove."""
    mcp = create_server(root, home=root / "home", watch=False)
    async with _client(mcp, "owner") as owner, _client(mcp, "intruder") as intruder:
        started = (await owner.call_tool("start_run", {
            "program": "p.prose", "inputs": {"topic": "t"}, "mode": "guided"})
                   ).structured_content
        run_id, vm = started["run_id"], started["vm_token"]
        refused = await intruder.call_tool("cancel_run", {"run_id": run_id})
        assert refused.is_error and "client 'owner'" in refused.content[0].text
        assert "take_over=true" in refused.content[0].text
        assert not (await owner.call_tool("cancel_run", {"run_id": run_id})).is_error
        refused = await intruder.call_tool("resume_run", {"run_id": run_id})
        assert refused.is_error and "client 'owner'" in refused.content[0].text, \
            refused.content[0].text
        assert _taken_by(root, run_id) is None  # the refusals changed nothing
        resumed = await owner.call_tool("resume_run", {"run_id": run_id})  # its own run
        assert not resumed.is_error, resumed.content[0].text
        vm = resumed.structured_content["vm_token"]
        taken = await intruder.call_tool("cancel_run", {"run_id": run_id, "take_over": True})
        assert not taken.is_error, taken.content[0].text
        assert _taken_by(root, run_id) == "client 'intruder'"
        late = await owner.call_tool("run_status", {"vm_token": vm})
        assert late.is_error and "taken over by client 'intruder'" in late.content[0].text
        # the taker drives it now: its resume needs no take_over
        assert not (await intruder.call_tool("resume_run", {"run_id": run_id})).is_error
        # a token proves the driver as well as its session does
        again = (await owner.call_tool("resume_run", {"run_id": run_id, "take_over": True})
                 ).structured_content
        by_token = await intruder.call_tool("cancel_run", {"run_id": run_id,
                                                           "vm_token": again["vm_token"]})
        assert not by_token.is_error, by_token.content[0].text
        assert _taken_by(root, run_id) == "client 'owner'"


# ------------------------------------------------------------------ descriptors

LIMIT = 128  # RLIMIT_NOFILE of the server below


def _limited_stdio(project: Path) -> StdioServerParameters:
    """``prose serve`` over stdio under a descriptor limit of :data:`LIMIT`."""
    start = ("import os, resource, sys; "
             f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, {LIMIT})); "
             "os.execv(sys.argv[1], sys.argv[1:])")
    return StdioServerParameters(command=sys.executable,
                                 args=["-c", start, PROSE, "serve", "--project", str(project)],
                                 env={"HOME": str(project.parent)})


def _descriptors_of(project: Path) -> int:
    """Descriptors the server for ``project`` holds open (found by its command line)."""
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            if b"serve" in command and str(project).encode() in command:
                return len(list((entry / "fd").iterdir()))
        except OSError:
            continue
    raise AssertionError("the server's process was not found")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
async def test_unfinished_embodied_runs_never_take_the_servers_last_descriptor(root):
    """Each unfinished embodied run kept two descriptors open (its journal and its driver
    lock); about 122 start_run calls under a 256-descriptor limit ended in 'too many open
    files', whose logging failed the same way and ended the server. Between calls a run
    keeps only its lock, and past a limit start_run is refused, saying why."""
    async with Client(_limited_stdio(root), mode="legacy") as client:
        first = (await client.call_tool("start_run", {
            "program": "p.prose", "inputs": {"topic": "t"}})).structured_content
        before = _descriptors_of(root)
        started, refused = [first["vm_token"]], []
        for _ in range(LIMIT):  # more than the server could hold open
            result = await client.call_tool("start_run", {"program": "p.prose",
                                                          "inputs": {"topic": "t"}})
            if result.is_error:
                refused.append(result.content[0].text)
                break
            started.append(result.structured_content["vm_token"])
            if len(started) == 5:
                assert _descriptors_of(root) - before <= 4  # one per run: its driver lock
        assert refused and "unfinished runs" in refused[0], refused
        assert "complete_run" in refused[0]
        done = await client.call_tool("complete_run", {"vm_token": started[0],
                                                       "status": "failed"})
        assert not done.is_error, done.content[0].text
        again = await client.call_tool("start_run", {"program": "p.prose",
                                                     "inputs": {"topic": "t"}})
        assert not again.is_error, again.content[0].text
        assert (await client.list_tools()).tools


def _open_journals(project: Path) -> set[str]:
    """Run ids of ``project`` whose journal this process holds open."""
    found = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = Path(fd.readlink())
        except OSError:
            continue
        if target.name == "journal.jsonl" and target.is_relative_to(project):
            found.add(target.parent.name)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
async def test_between_calls_only_the_run_last_reached_keeps_its_journal_open(root):
    """After every call the server closed the journal of each run a host drives, so each
    write_binding opened it again: the run the last call reached keeps its logs (its next
    write appends at once), any other keeps only its driver lock."""
    async with host(root, {"mode": "legacy"}, watch=False) as h:
        first = await h.call("start_run", program="p.prose", inputs={"topic": "t"})
        assert _open_journals(root.resolve()) == {first["run_id"]}
        second = await h.call("start_run", program="p.prose", inputs={"topic": "t"})
        assert _open_journals(root.resolve()) == {second["run_id"]}
        await h.call("run_status", vm_token=first["vm_token"])  # reads: opens nothing
        assert _open_journals(root.resolve()) == set()


# ------------------------------------------------------------------ values the program computes

COMPUTING = """\
const style = "brief"
let greeting = "hello {style}"
let {x, y} = session "Give x and y as JSON"
let a = session "Say a"
output res = a
"""


async def test_an_embodied_host_cannot_forge_what_the_program_computes(root):
    """The VM token wrote any value to a const, a let of a literal, a name destructured from
    a session and an output copying a session's binding, even before the program reached
    it; complete_run reported the forgery. The server writes what the program computes
    when it binds it (as prose run does); the host's write is a resend, refused otherwise."""
    (root / "v.prose").write_text(COMPUTING)
    async with host(root, {"mode": "legacy"}, watch=False) as h:
        vm = (await h.call("start_run", program="v.prose"))["vm_token"]

        async def vm_write(name: str, **source: str) -> str | None:
            result = await h.client.call_tool("write_binding", {"token": vm, "name": name,
                                                                **source})
            return result.content[0].text if result.is_error else None

        async def answer(statement: str, prompt: str, value: str) -> None:
            token = (await h.call("spawn_session", vm_token=vm, statement=statement,
                                  prompt=prompt))["session_token"]
            await h.call("write_binding", token=token, value=value)

        assert "computes 'style' as 'brief'" in await vm_write("style", value="forged")
        assert "computes 'greeting'" in await vm_write("greeting", value="hi")
        assert await vm_write("greeting", value="hello brief") is None  # a resend
        assert "has not reached" in await vm_write("x", value="1")
        assert "has not reached" in await vm_write("res", value="forged")
        await answer("2", "Give x and y as JSON", '{"x": "1", "y": "2"}')
        assert "computes 'x' as '1'" in await vm_write("x", value="9")
        assert "has not reached" in await vm_write("res", copy_of="x")
        await answer("3", "Say a", "A")
        assert "computes 'res' as 'A'" in await vm_write("res", copy_of="x")
        assert await vm_write("res", copy_of="a") is None
        await h.call("complete_run", vm_token=vm)
    run = open_store(root, "filesystem", home=root / "home").open_run(
        next(p.name for p in (root / ".prose" / "runs").iterdir()))
    expected = {"style": "brief", "greeting": "hello brief", "x": "1", "y": "2", "a": "A",
                "res": "A"}  # what prose run gives with these answers
    assert {name: run.read_binding(BindingRef(name)).value for name in expected} == expected
