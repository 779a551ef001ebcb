"""When the program the server follows beside an embodied host fails, the run says so:
``run_status`` and ``state.md`` name the error and the statement, ``complete_run`` names
what the program expects, and a resumed run follows the program afresh (a transient cause,
such as a session that failed once, is tried again)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.mcp_server.host import Host, host

pytestmark = pytest.mark.anyio

PROGRAM = """\
let draft = session "Draft a note"
output note = session "Polish {draft}"
  context: draft
"""


async def _failed_at_the_draft(h: Host) -> dict:
    """Start the run and have its first session fail (the model timed out): start_run's answer."""
    run = await h.call("start_run", program="note.prose")
    await h.call("spawn_session", vm_token=run["vm_token"], statement="0")
    await h.call("update_state", vm_token=run["vm_token"], statement="0", status="failed",
                 note="the model timed out")
    return run


async def test_a_failed_program_is_reported_and_the_run_resumes(tmp_path: Path) -> None:
    (tmp_path / "note.prose").write_text(PROGRAM)
    async with host(tmp_path, {}, watch=False) as h:
        run = await _failed_at_the_draft(h)
        vm = run["vm_token"]

        status = await h.call("run_status", vm_token=vm)
        assert status["status"] == "running"  # resumable: the host decides how it ends
        failure = status["checker_failed"]
        assert failure["statement"] == "0" and failure["line"] == 1
        assert "the model timed out" in failure["error"]
        assert "program failed at statement 0 (line 1)" in status["_text"]
        state = (tmp_path / ".prose" / "runs" / run["run_id"] / "state.md").read_text()
        assert "program failed at statement 0 (line 1)" in state

        refused = await h.refused("complete_run", vm_token=vm)
        assert "the program failed" in refused and "the model timed out" in refused
        assert "complete_run with status 'failed'" in refused
        refused = await h.refused("spawn_session", vm_token=vm, statement="1")
        assert "the model timed out), or resume_run(run_id, take_over=true)" in refused

        resumed = await h.call("resume_run", run_id=run["run_id"], take_over=True)
        vm = resumed["vm_token"]
        assert (await h.call("run_status", vm_token=vm))["checker_failed"] is None
        again = await h.call("spawn_session", vm_token=vm, statement="0")
        await h.call("write_binding", token=again["session_token"], value="a note")
        polish = await h.call("spawn_session", vm_token=vm, statement="1")
        await h.call("write_binding", token=polish["session_token"], value="a fine note")
        assert (await h.call("complete_run", vm_token=vm))["status"] == "completed"
    state = (tmp_path / ".prose" / "runs" / run["run_id"] / "state.md").read_text()
    assert "status: completed" in state and "program failed" not in state


async def test_complete_run_names_what_the_program_still_expects(tmp_path: Path) -> None:
    (tmp_path / "note.prose").write_text(PROGRAM)
    async with host(tmp_path, {}, watch=False) as h:
        vm = (await h.call("start_run", program="note.prose"))["vm_token"]
        refused = await h.refused("complete_run", vm_token=vm)
        assert "the program has not finished; next: spawn_session 0" in refused
        token = (await h.call("spawn_session", vm_token=vm, statement="0"))["session_token"]
        refused = await h.refused("complete_run", vm_token=vm)
        assert "next: write_binding of 'draft' by its pending session (statement 0)" in refused
        await h.call("write_binding", token=token, value="a note")
        refused = await h.refused("complete_run", vm_token=vm)
        assert "next: spawn_session 1" in refused


async def test_a_failed_program_completed_as_failed_shows_only_its_end(tmp_path: Path) -> None:
    (tmp_path / "note.prose").write_text(PROGRAM)
    async with host(tmp_path, {}, watch=False) as h:
        run = await _failed_at_the_draft(h)
        vm = run["vm_token"]
        await h.call("complete_run", vm_token=vm, status="failed", error="gave up")
    state = (tmp_path / ".prose" / "runs" / run["run_id"] / "state.md").read_text()
    assert "status: failed" in state and "resume_run" not in state


async def test_the_checks_failure_is_kept_in_the_run_and_shown_on_its_page(
        tmp_path: Path) -> None:
    """The statement the program failed at, its line and the error are in the journal (the
    view reads them there, in another process), never a token; a resume clears them."""
    (tmp_path / "note.prose").write_text(PROGRAM)
    async with host(tmp_path, {}, watch=False) as h:
        run = await _failed_at_the_draft(h)
        run_id = run["run_id"]
        page = _page(tmp_path, run_id)
        shown = page.split('id="checker-failed"')[1].split("</div>")[0]
        assert 'line 1</a> (statement 0): <code id="checker-statement">let draft' in shown
        assert "the model timed out" in shown
        assert 'id="L1" class="line st-failed"' in page
        journal = (tmp_path / ".prose" / "runs" / run_id / "journal.jsonl").read_text()
        assert '"mcp:checker"' in journal and run["vm_token"] not in journal
        await h.call("resume_run", run_id=run_id, take_over=True)
        assert 'id="checker-failed"' not in _page(tmp_path, run_id)


def _page(root: Path, run_id: str) -> str:
    """The run's page in `prose ui`'s view, opened afresh."""
    from starlette.testclient import TestClient

    from openprose.state import open_store
    from openprose.ui import create_app

    with open_store(root) as store:
        client = TestClient(create_app([store], "t", 8765), base_url="http://127.0.0.1:8765")
        return client.get(f"/runs/{run_id}?token=t").text
