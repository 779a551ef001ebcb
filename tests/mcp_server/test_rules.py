"""Every rule the tools keep: a call breaking it is refused with the rule, the statement and
the line in the text the model reads, and the run is left exactly as it was (every file of
it byte for byte)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.mcp_server.host import ERAS, Host, Refused, host

pytestmark = pytest.mark.anyio

PROGRAM = """\
input topic: "What to look into"
agent scout:
  model: haiku
  prompt: "You scout."
agent keeper:
  persist: true
  prompt: "You remember."
const limit = "3"
block dig(area) (max_depth: 2):
  let found = session "Dig {area}"
    context: area
let first = session: scout
  prompt: "Scout {topic}"
do dig(first)
loop until **deep enough** (max: 3):
  session "Go deeper"
choice **which path**:
  option "left":
    session "Left"
  option "right":
    session "Right"
resume: keeper
  prompt: "Recall"
output result = first
block other():
  session "Elsewhere"
"""
# statement ids: 3 const limit, 4 block dig, 5 let first (session: scout), 6 do dig,
# 7 loop (judged) with 7.0 inside, 8 choice with 8.o0.0 and 8.o1.0, 9 resume: keeper,
# 10 output result, dig.0 the session in block dig, other.0 in block other.


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "dig.prose").write_text(PROGRAM)
    return project


def fingerprint(root: Path, run_id: str) -> dict[str, bytes]:
    base = root / ".prose" / "runs" / run_id
    return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}


class Run:
    """A started run of PROGRAM and the calls that refusals are checked against."""

    def __init__(self, h: Host, root: Path, started: dict[str, Any]) -> None:
        self.h, self.root, self.started = h, root, started
        self.id, self.vm = started["run_id"], started["vm_token"]

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return await self.h.call(tool, **arguments)

    async def refused(self, tool: str, *expected: str, **arguments: Any) -> str:
        """``tool`` is refused, the text names the rule and every ``expected`` part, and
        nothing changed (pending sessions stay pending)."""
        before = fingerprint(self.root, self.id)
        pending = await self.pending()
        text = await self.h.refused(tool, **arguments)
        assert "refused (rule: " in text or "validation error" in text, text
        assert await self.pending() == pending
        for part in expected:
            assert part in text, f"{part!r} not in {text!r}"
        assert fingerprint(self.root, self.id) == before, f"{tool} changed the run: {text}"
        return text

    async def pending(self) -> list[Any] | None:
        try:
            return (await self.h.call("run_status", vm_token=self.vm))["pending"]
        except Refused:  # a token replaced or a run finished: nothing is pending any more
            return None

    async def session(self, statement: str, prompt: str = "", **arguments: Any) -> str:
        spawned = await self.call("spawn_session", vm_token=self.vm, statement=statement,
                                  prompt=prompt, **arguments)
        return spawned["session_token"]

    async def to_the_loop(self) -> None:
        """Walk the program up to its loop: statement 5's session, the call of dig."""
        token = await self.session("5", "Scout caves")
        await self.call("write_binding", token=token, value="tunnels")
        frame = await self.call("push_frame", vm_token=self.vm, block="dig",
                                args_from={"area": "first"}, statement="6")
        dug = await self.session("dig.0", "Dig tunnels", execution_id=frame["execution_id"])
        await self.call("write_binding", token=dug, value="gems")
        await self.call("pop_frame", vm_token=self.vm, execution_id=frame["execution_id"])


@asynccontextmanager
async def started(root: Path, era: dict[str, Any] | None = None) -> AsyncIterator[Run]:
    async with host(root, era if era is not None else {"mode": "legacy"}, watch=False) as h:
        run = await h.call("start_run", program="dig.prose", inputs={"topic": "caves"})
        yield Run(h, root, run)


@pytest.mark.parametrize("era", ERAS)
async def test_tokens_are_checked(era: dict, root: Path) -> None:
    async with started(root, era) as run:
        await run.refused("run_status", "not a VM token", vm_token="hello")
        await run.refused("run_status", "run id 'x'", vm_token="vm.x.y")
        await run.refused("spawn_session", "not a VM token", vm_token="ses_abc",
                          statement="5", prompt="p")
        await run.refused("write_binding", "unknown", token="ses_nope", value="v")
        token = await run.session("5", "Scout caves")
        await run.refused("spawn_session", "not a VM token", vm_token=token, statement="5",
                          prompt="p")
        await run.refused("read_memory", "rule: a session token is what a session writes",
                          token=run.vm)


async def test_spawn_session_rules(root: Path) -> None:
    async with started(root) as run:
        await run.refused("spawn_session", "no statement '99'", "rule: a call names a "
                          "statement", vm_token=run.vm, statement="99", prompt="p")
        await run.refused("spawn_session", "statement 7 is a loop statement",
                          "[statement 7, line 15]", vm_token=run.vm, statement="7", prompt="p")
        await run.refused("spawn_session", "top level", "[statement 5, line 12]",
                          vm_token=run.vm, statement="5", prompt="p", execution_id=1)
        await run.refused("spawn_session", "inside block 'dig'", "[statement dig.0, line 10]",
                          vm_token=run.vm, statement="dig.0", prompt="p")
        await run.refused("spawn_session", "no frame 4", vm_token=run.vm, statement="dig.0",
                          prompt="p", execution_id=4)
        await run.refused("spawn_session", "the prompt differs from the program's, which "
                          "is: 'Scout caves'", "rule: a session's prompt is the program's",
                          vm_token=run.vm, statement="5", prompt="Scout the moon")
        await run.refused("spawn_session", "nothing not in the program's context (none)",
                          "rule: a session's context is the program's", vm_token=run.vm,
                          statement="5", context=["nothing"])
        await run.refused("spawn_session", "statement 9 is not next", "next: spawn_session 5",
                          "[statement 9, line 22]", vm_token=run.vm, statement="9")
        token = await run.session("5", "  Scout\n caves ")  # the same text, spaced otherwise
        await run.refused("spawn_session", "statement 5 has started already", vm_token=run.vm,
                          statement="5")
        await run.call("write_binding", token=token, value="tunnels")
        await run.refused("spawn_session", "statement 5 is not next",
                          "statement 5 has already run here", "next: push_frame dig(area=",
                          vm_token=run.vm, statement="5")
        frame = await run.call("push_frame", vm_token=run.vm, block="dig",
                               args_from={"area": "first"}, statement="6")
        eid = frame["execution_id"]
        await run.refused("spawn_session", f"frame {eid} is a frame of block 'dig'",
                          vm_token=run.vm, statement="other.0", execution_id=eid)
        dug = await run.call("spawn_session", vm_token=run.vm, statement="dig.0",
                             execution_id=eid)
        brief = await run.call("get_brief", token=dug["session_token"])
        assert brief["task"] == "Dig tunnels" and brief["context"][0]["name"] == "area"
        await run.call("write_binding", token=dug["session_token"], value="gems")
        await run.call("pop_frame", vm_token=run.vm, execution_id=eid)
        await run.refused("spawn_session", f"frame {eid} was popped", vm_token=run.vm,
                          statement="dig.0", execution_id=eid)


async def test_write_binding_rules_for_sessions(root: Path) -> None:
    async with started(root) as run:
        token = await run.session("5", "Scout caves")
        await run.refused("write_binding", "this session writes 'first', not 'other'",
                          "rule: a session token writes exactly its own binding",
                          token=token, value="v", name="other")
        await run.refused("write_binding", "copy_of is for the VM token", token=token,
                          copy_of="topic")
        await run.refused("write_binding", "'first' is produced by a session",
                          "[statement 5, line 12]", token=run.vm, name="first", value="v")
        await run.refused("read_binding", "'limit' is not in this session's context",
                          token=token, name="limit")
        await run.refused("update_state", "the session for 'first' is still pending",
                          "[statement 5, line 12]", vm_token=run.vm, statement="5",
                          status="complete")
        await run.refused("complete_run", "the session for 'first' has not written",
                          "the program has not finished; next: write_binding of 'first' by "
                          "its pending session (statement 5)", vm_token=run.vm)
        first = await run.call("write_binding", token=token, value="tunnels", summary="s")
        assert "tunnels" not in str({k: v for k, v in first.items()})
        again = await run.call("write_binding", token=token, value="tunnels", summary="s")
        assert again == first
        await run.refused("write_binding", "already wrote a different value",
                          token=token, value="caverns")
        await run.refused("read_binding", "has ended", token=token, name="topic")


async def test_write_binding_rules_for_the_vm(root: Path) -> None:
    async with started(root) as run:
        await run.refused("write_binding", "give name", token=run.vm, value="v")
        await run.refused("write_binding", "give either value or copy_of", token=run.vm,
                          name="result", value="v", copy_of="topic")
        await run.refused("write_binding", "no statement at the program's top level binds "
                          "'found'", token=run.vm, name="found", value="v")
        await run.refused("write_binding", "no binding 'nothing' is visible", "[statement 10",
                          token=run.vm, name="result", copy_of="nothing")
        await run.call("write_binding", token=run.vm, name="limit", value="3")  # a resend
        await run.refused("write_binding", "computes 'limit' as '3'", "[statement 3, line 8]",
                          token=run.vm, name="limit", value="4")
        await run.refused("write_binding", "has not reached a statement binding 'result'",
                          token=run.vm, name="result", copy_of="topic")
        await run.to_the_loop()
        frame = await run.call("run_status", vm_token=run.vm)  # dig's frame, popped
        assert frame["frames"] == []
        await run.refused("write_binding", "frame 1 was popped", token=run.vm, name="found",
                          value="v", execution_id=1)


async def test_write_binding_in_a_frame(root: Path) -> None:
    async with started(root) as run:
        token = await run.session("5", "Scout caves")
        await run.call("write_binding", token=token, value="tunnels")
        frame = await run.call("push_frame", vm_token=run.vm, block="dig",
                               args_from={"area": "first"}, statement="6")
        await run.refused("write_binding", "no statement at block 'dig' binds 'result'",
                          token=run.vm, name="result", value="v",
                          execution_id=frame["execution_id"])


async def test_read_binding_rules(root: Path) -> None:
    async with started(root) as run:
        await run.refused("read_binding", "no binding 'missing' is visible", token=run.vm,
                          name="missing")
        await run.refused("read_binding", "offset is >= 0", token=run.vm, name="topic",
                          offset=-1)
        await run.refused("read_binding", "no frame with execution_id 3", token=run.vm,
                          name="topic", execution_id=3)
        read = await run.call("read_binding", token=run.vm, name="topic", offset=1, limit=2)
        assert (read["value"], read["total_chars"], read["next_offset"]) == ("av", 5, 3)


async def test_update_state_rules(root: Path) -> None:
    async with started(root) as run:
        await run.refused("update_state", "no statement 'x'", vm_token=run.vm, statement="x",
                          status="started")
        await run.refused("update_state", "its binding was never written",
                          "[statement 5, line 12]", vm_token=run.vm, statement="5",
                          status="complete")
        await run.refused("update_state", "statement 5 is a session statement",
                          "rule: only loops have iterations", vm_token=run.vm, statement="5",
                          status="iteration", iteration=1)
        await run.refused("update_state", "give iteration", vm_token=run.vm, statement="7",
                          status="iteration")
        await run.refused("update_state", "inside block 'dig'", vm_token=run.vm,
                          statement="dig.0", status="started")
        await run.refused("update_state", "Input should be", vm_token=run.vm, statement="7",
                          status="teleported")
        await run.call("update_state", vm_token=run.vm, statement="7", status="iteration",
                       iteration=0, note="first round")
        text = (root / ".prose" / "runs" / run.id / "state.md").read_text()
        assert "# (iteration 0)" in text and "first round" in text, text


async def test_frame_rules(root: Path) -> None:
    async with started(root) as run:
        await run.refused("push_frame", "there is no block 'mine'", vm_token=run.vm,
                          block="mine")
        await run.refused("push_frame", "block 'dig' takes (area); missing area",
                          vm_token=run.vm, block="dig", args={"depth": "1"})
        await run.refused("push_frame", "area given twice", vm_token=run.vm, block="dig",
                          args={"area": "x"}, args_from={"area": "topic"})
        await run.refused("push_frame", "no binding 'nothing' for parameter 'area'",
                          vm_token=run.vm, block="dig", args_from={"area": "nothing"})
        await run.refused("push_frame", "statement 5 is a session statement",
                          vm_token=run.vm, block="dig", args={"area": "x"}, statement="5")
        await run.refused("push_frame", "no call of block 'dig' is next",
                          "next: spawn_session 5", vm_token=run.vm, block="dig",
                          args={"area": "x"})
        first = await run.session("5", "Scout caves")
        await run.call("write_binding", token=first, value="tunnels")
        await run.refused("push_frame", "the call of block 'dig' expects arguments "
                          "area='tunnels'", vm_token=run.vm, block="dig", args={"area": "y"})
        one = await run.call("push_frame", vm_token=run.vm, block="dig",
                             args_from={"area": "first"}, statement="6")
        assert (one["depth"], one["max_depth"]) == (1, 2)
        await run.refused("push_frame", "no call of block 'dig' from frame 1 is next",
                          vm_token=run.vm, block="dig", args={"area": "y"},
                          parent=one["execution_id"])
        await run.refused("pop_frame", "frame 1 (block 'dig') has statements still to run",
                          "next: spawn_session dig.0 in frame 1", vm_token=run.vm,
                          execution_id=one["execution_id"])
        token = await run.session("dig.0", "Dig tunnels", execution_id=one["execution_id"])
        assert (await run.call("read_binding", token=token, name="area"))["value"] == "tunnels"
        await run.refused("pop_frame", "the session for 'found' in frame 1 is pending",
                          vm_token=run.vm, execution_id=one["execution_id"])
        await run.refused("complete_run", "the session for 'found' has not written",
                          vm_token=run.vm)
        await run.call("write_binding", token=token, value="gems")
        await run.call("pop_frame", vm_token=run.vm, execution_id=one["execution_id"])
        await run.refused("pop_frame", "already popped", vm_token=run.vm,
                          execution_id=one["execution_id"])
        await run.refused("push_frame", "frame 1 was popped", vm_token=run.vm, block="dig",
                          args={"area": "w"}, parent=one["execution_id"])


NESTED = """block inner(x) (max_depth: 2):
  session "Inner {x}"
  do inner(x)
block outer(y):
  do inner(y)
do outer("a")
"""


async def test_nested_frame_rules(root: Path) -> None:
    (root / "nested.prose").write_text(NESTED)
    async with host(root, {}, watch=False) as h:
        run = await h.call("start_run", program="nested.prose")
        vm = run["vm_token"]
        outer = (await h.call("push_frame", vm_token=vm, block="outer", args={"y": "a"},
                              statement="2"))["execution_id"]
        inner = (await h.call("push_frame", vm_token=vm, block="inner", args={"x": "a"},
                              parent=outer))["execution_id"]
        text = await h.refused("pop_frame", vm_token=vm, execution_id=outer)
        assert "only the top frame pops" in text
        text = await h.refused("complete_run", vm_token=vm)
        assert f"frame {outer} of block 'outer' is still live" in text
        assert "the program has not finished" in text
        spawned = await h.call("spawn_session", vm_token=vm, statement="inner.0",
                               execution_id=inner)
        await h.call("write_binding", token=spawned["session_token"], value="v")
        text = await h.refused("push_frame", vm_token=vm, block="inner", args={"x": "a"},
                               parent=inner)
        assert "no call of block 'inner' from frame" in text
        assert "the program failed: block 'inner' exceeded max_depth 2" in text
        text = await h.refused("complete_run", vm_token=vm)
        assert "the program failed: block 'inner' exceeded max_depth 2" in text
        assert "complete_run with status 'failed'" in text
        # only the innermost frame can be popped: the hint names it alone
        assert f"pop_frame {inner}" in text and f"pop_frame {outer}" not in text, text


async def test_verdict_rules(root: Path) -> None:
    async with started(root) as run:
        await run.refused("record_verdict", "statement 5 (session) has no condition",
                          vm_token=run.vm, statement="5", value=True, reason="r")
        await run.refused("record_verdict", "'middle' is not one of left, right",
                          "[statement 8, line 17]", vm_token=run.vm, statement="8",
                          value="middle", reason="r")
        await run.refused("record_verdict", "got 'maybe'", vm_token=run.vm, statement="7",
                          value="maybe", reason="r")
        await run.refused("record_verdict", "the reason is empty", vm_token=run.vm,
                          statement="7", value=False, reason=" ")
        await run.refused("record_verdict", "no verdict for statement 7 iteration 0 is "
                          "wanted now", "next: spawn_session 5", vm_token=run.vm,
                          statement="7", value=False, reason="r")
        await run.to_the_loop()
        await run.refused("spawn_session", "statement 7.0 is not next",
                          "next: record_verdict 7 iteration 0", vm_token=run.vm,
                          statement="7.0")
        await run.refused("record_verdict", "no verdict for statement 8 iteration 0",
                          "next: record_verdict 7 iteration 0", vm_token=run.vm,
                          statement="8", value="left", reason="r")
        await run.refused("record_verdict", "no verdict for statement 7 iteration 1",
                          vm_token=run.vm, statement="7", value=False, reason="r", iteration=1)
        recorded = await run.call("record_verdict", vm_token=run.vm, statement="7",
                                  value=False, reason="still shallow", iteration=0)
        assert recorded["recorded"] is True
        again = await run.call("record_verdict", vm_token=run.vm, statement="7",
                               value=False, reason="asked again", iteration=0)
        assert (again["recorded"], again["reason"]) == (False, "still shallow")
        await run.refused("record_verdict", "iteration 0 was judged False: still shallow",
                          vm_token=run.vm, statement="7", value=True, reason="r",
                          iteration=0)
        status = await run.call("run_status", vm_token=run.vm)
        assert status["verdicts"] == [{"key": "7@0?0", "value": False,
                                       "reason": "still shallow"}]
        await run.refused("spawn_session", "statement 8.o0.0 is not next",
                          "next: spawn_session 7.0", vm_token=run.vm, statement="8.o0.0")
        deeper = await run.session("7.0", "Go deeper")
        await run.call("write_binding", token=deeper, value="down")
        await run.call("record_verdict", vm_token=run.vm, statement="7", value=True,
                       reason="deep now", iteration=1)
        await run.refused("spawn_session", "statement 7.0 is not next",
                          "the verdict recorded for 7 (iteration 1) is True",
                          "next: record_verdict 8 iteration 0", vm_token=run.vm,
                          statement="7.0")
        await run.call("record_verdict", vm_token=run.vm, statement="8", value="right",
                       reason="r")
        await run.refused("spawn_session", "statement 8.o0.0 is not next",
                          "the verdict recorded for 8 (iteration 0) is 'right'",
                          "next: spawn_session 8.o1.0", vm_token=run.vm, statement="8.o0.0")


async def test_memory_rules(root: Path) -> None:
    async with started(root) as run:
        scout = await run.session("5", "Scout caves")
        await run.refused("read_memory", "has no agent memory", token=scout)
        await run.refused("write_memory", "has no agent memory", token=scout, memory="m")


async def test_finished_runs_and_replaced_tokens(root: Path) -> None:
    async with started(root) as run:
        await run.refused("resume_run", "take_over=true", run_id=run.id)  # still driven
        resumed = await run.call("resume_run", run_id=run.id, take_over=True)
        await run.refused("run_status", "no longer drives run", "taken over", vm_token=run.vm)
        fresh = resumed["vm_token"]
        await run.call("write_binding", token=fresh, name="limit", value="3")
        await run.call("complete_run", vm_token=fresh, status="failed", error="stopped")
        await run.refused("spawn_session", "is failed", "rule: a finished run is not driven",
                          vm_token=fresh, statement="5", prompt="p")
        await run.refused("resume_run", "is failed", run_id=run.id)


async def test_a_resend_applies_nothing_twice_even_after_a_restart(root: Path) -> None:
    async with started(root) as run:
        token = await run.session("5", "Scout caves")
        first = await run.call("write_binding", token=token, value="tunnels", summary="s")
        before = fingerprint(root, run.id)
        assert await run.call("write_binding", token=token, value="tunnels",
                              summary="s") == first
        assert fingerprint(root, run.id) == before
    async with host(root, {}, watch=False) as h:  # a new server knows the token from state
        again = await h.call("write_binding", token=token, value="tunnels")
        assert (again["binding"], again["bytes"]) == ("first", len("tunnels"))
        text = await h.refused("write_binding", token=token, value="caverns")
        assert "rule: a session's binding is written once" in text
    assert fingerprint(root, run.id) == before


PARALLEL = """\
parallel:
  north = session "Go north"
  south = session "Go south"
  east = session "Go east"
output route = session "Join the routes"
  context: { north, south, east }
"""


@pytest.mark.parametrize("era", ERAS)
async def test_parallel_sessions_are_pending_together_and_complete_in_any_order(
        era: dict, root: Path) -> None:
    (root / "routes.prose").write_text(PARALLEL)
    async with host(root, era, watch=False) as h:
        run = await h.call("start_run", program="routes.prose")
        vm = run["vm_token"]
        ids = {item["binds"]: item["id"] for item in run["outline"] if item.get("binds")}
        tokens = {}
        for name in ("north", "south", "east"):
            spawned = await h.call("spawn_session", vm_token=vm, statement=ids[name],
                                   prompt=f"Go {name}")  # the program's prompt: accepted
            tokens[name] = spawned["session_token"]
        status = await h.call("run_status", vm_token=vm)
        assert sorted(p["binding"] for p in status["pending"]) == ["east", "north", "south"]
        for name in ("east", "north", "south"):  # not the order they were spawned in
            await h.call("write_binding", token=tokens[name], value=f"{name} road")
            left = (await h.call("run_status", vm_token=vm))["pending"]
            assert name not in [p["binding"] for p in left]
        join = await h.call("spawn_session", vm_token=vm, statement=ids["route"])
        read = await h.call("read_binding", token=join["session_token"], name="south")
        assert read["value"] == "south road"
        await h.call("write_binding", token=join["session_token"], value="all roads")
        done = await h.call("complete_run", vm_token=vm)
        assert [o["name"] for o in done["outputs"]] == ["route"]


async def test_values_are_returned_by_read_binding_only_and_never_rewritten(
        root: Path) -> None:
    value = ("ANTHROPIC_API_KEY=sk-ant-api03-" + "x" * 40 + "\npassword: hunter2\n"
             "<script>alert(1)</script>\r\n" + "é" * 3000 + "\x00tail")
    async with started(root) as run:
        token = await run.session("5", "Scout caves")
        texts = []
        for tool, args in [("write_binding", {"token": token, "value": value}),
                           ("run_status", {"vm_token": run.vm})]:
            result = await run.h.client.call_tool(tool, args)
            assert not result.is_error, result.content
            texts.append(result.content[0].text + str(result.structured_content))
        assert not any("hunter2" in text or "sk-ant" in text for text in texts)
        read, offset = "", 0
        while True:
            part = await run.call("read_binding", token=run.vm, name="first", offset=offset,
                                  limit=1000)
            read += part["value"]
            if part["next_offset"] is None:
                break
            offset = part["next_offset"]
        assert read == value


async def test_the_mode_a_run_was_started_in_is_kept(root: Path) -> None:
    from openprose.state import open_store

    with open_store(root, home=root / "home") as store:  # started by the engine: no driver
        engine_run = store.create_run(PROGRAM, "dig.prose").id
    async with started(root) as run:
        before = fingerprint(root, engine_run)
        text = await run.h.refused("resume_run", run_id=engine_run)
        assert "rule: a run the engine started is not driven by a host VM token" in text
        assert fingerprint(root, engine_run) == before
        # the reverse: a host's run is not stepped by the server's engine
        text = await run.h.refused("next_step", vm_token=run.vm)
        assert "next_step steps guided runs" in text
        taken = await run.call("resume_run", run_id=engine_run, take_over=True)
        assert taken["mode"] == "embodied"
        await run.call("write_binding", token=taken["vm_token"], name="topic", value="pits")
        guided = await run.call("start_run", program="dig.prose", inputs={"topic": "x"},
                                mode="guided")
        text = await run.h.refused("spawn_session", vm_token=guided["vm_token"],
                                   statement="5", prompt="p")
        assert "rule: a run is stepped by the driver it was started for" in text
        await run.call("cancel_run", run_id=guided["run_id"])
