"""A followed run survives a server restart: the new server replays what the run did (its
sessions, verdicts and frames, by the interpreter's keys) and follows it from where it is —
a session granted before the restart is written with its old token, a step the program has
not reached is still refused, and the run finishes as the program says."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.mcp_server.host import Host, host

pytestmark = pytest.mark.anyio

PROGRAM = """\
block check(text):
  let checked = session "Check {text}"
let draft = session "Draft a note"
if **the draft is long**:
  session "Shorten it"
else:
  session "Extend it"
do check(draft)
loop until **done** (max: 3):
  let more = session "Add a detail"
output final = session "Finish"
  context: draft
"""
# 0 block check, 1 draft, 2 if (2.if0, 2.b0.0, 2.else.0), 3 do check, 4 loop (4.0), 5 final


async def _drafted_and_judged(h: Host) -> tuple[str, str]:
    """Start the run, write the draft and judge it short (the else branch): (vm, run_id)."""
    run = await h.call("start_run", program="note.prose")
    vm, run_id = run["vm_token"], run["run_id"]
    draft = await h.call("spawn_session", vm_token=vm, statement="1")
    await h.call("write_binding", token=draft["session_token"], value="a draft")
    await h.call("record_verdict", vm_token=vm, statement="2.if0", value=False,
                 reason="short")
    return vm, run_id


async def test_a_restarted_server_follows_the_run_from_where_it_is(tmp_path: Path) -> None:
    (tmp_path / "note.prose").write_text(PROGRAM)
    async with host(tmp_path, {}, watch=False) as h:
        vm, run_id = await _drafted_and_judged(h)
        extend = await h.call("spawn_session", vm_token=vm, statement="2.else.0")
        await h.call("write_binding", token=extend["session_token"], value="longer")
        frame = (await h.call("push_frame", vm_token=vm, block="check",
                              args_from={"text": "draft"}, statement="3"))["execution_id"]
        checked = await h.call("spawn_session", vm_token=vm, statement="check.0",
                               execution_id=frame)
    async with host(tmp_path, {}, watch=False) as h:  # the server restarted
        vm = (await h.call("resume_run", run_id=run_id))["vm_token"]
        text = await h.refused("pop_frame", vm_token=vm, execution_id=frame)
        assert "the session for 'checked'" in text
        text = await h.refused("spawn_session", vm_token=vm, statement="2.b0.0")
        assert "statement 2.b0.0 is not next" in text
        assert "the verdict recorded for 2.if0 (iteration 0) is False" in text
        await h.call("write_binding", token=checked["session_token"], value="fine")
        await h.call("pop_frame", vm_token=vm, execution_id=frame)
        text = await h.refused("spawn_session", vm_token=vm, statement="4.0")
        assert "next: record_verdict 4 iteration 0" in text
        await h.call("record_verdict", vm_token=vm, statement="4", value=True, reason="done")
        final = await h.call("spawn_session", vm_token=vm, statement="5")
        brief = await h.call("get_brief", token=final["session_token"])
        assert brief["task"] == "Finish"
        await h.call("write_binding", token=final["session_token"], value="the note")
        done = await h.call("complete_run", vm_token=vm)
    assert done["status"] == "completed"


async def test_prose_resume_of_an_embodied_run_reuses_what_the_host_did(tmp_path: Path
                                                                       ) -> None:
    """The engine resumes an embodied run like its own: sessions and verdicts the host did
    are reused (they are noted under the engine's keys), only the rest is run."""
    from openprose.engine import Options, ScriptedProvider, runner

    (tmp_path / "note.prose").write_text(PROGRAM)
    async with host(tmp_path, {}, watch=False) as h:
        _, run_id = await _drafted_and_judged(h)

    asked: list[str] = []

    class Counting(ScriptedProvider):
        async def run_session(self, request, io):  # type: ignore[no-untyped-def]
            asked.append(request.prompt)
            return await super().run_session(request, io)

        async def judge(self, request):  # type: ignore[no-untyped-def]
            asked.append(request.text)
            return await super().judge(request)

    job = runner.resume_job(run_id, tmp_path, "filesystem", options=Options())
    script = {"sessions": [{"match": ".", "output": "done"}],
              "conditions": [{"match": ".", "verdicts": [True]}]}
    outcome = await runner.execute(job, Counting(script))
    assert outcome.status == "completed", outcome.error
    assert "Draft a note" not in asked and "the draft is long" not in asked
    assert asked[0] == "Extend it"  # the verdict the host recorded chose the else branch


async def test_a_followed_spawn_costs_no_flush_of_its_own(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """spawn_session's replay note rides on the flush of the session's result (a lost spawn
    is spawned again; a finished session is never lost): one fsync per spawn and write once
    the run's logs exist, and a restarted server still reuses the session through it."""
    import os

    (tmp_path / "note.prose").write_text(PROGRAM)
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    async with host(tmp_path, {}, watch=False) as h:
        vm, run_id = await _drafted_and_judged(h)  # the run's logs exist
        before = len(synced)
        extend = await h.call("spawn_session", vm_token=vm, statement="2.else.0")
        spawned = len(synced)
        await h.call("write_binding", token=extend["session_token"], value="longer")
        assert (spawned - before, len(synced) - spawned) == (0, 1)
    async with host(tmp_path, {}, watch=False) as h:  # the note was flushed with the result
        vm = (await h.call("resume_run", run_id=run_id))["vm_token"]
        text = await h.refused("spawn_session", vm_token=vm, statement="2.else.0")
        assert "statement 2.else.0 is not next" in text
