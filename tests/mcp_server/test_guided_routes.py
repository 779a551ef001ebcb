"""Guided runs through the session tools: ``write_binding`` and ``read_binding`` with a guided
session's ``gs_`` token go to the engine running the run, in both protocol eras."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.mcp_server.host import ERAS, Host, host

pytestmark = pytest.mark.anyio

PROGRAM = """\
input topic: "What to write about"
let notes = session "Research {topic}"
output draft = session "Draft from the notes"
  context: notes
"""


async def pending(h: Host, vm: str) -> list[dict[str, Any]]:
    for _ in range(100):
        step = await h.call("next_step", vm_token=vm, wait_s=1)
        if step["pending"] or step["status"] != "running":
            return step["pending"]
    raise AssertionError("nothing pending")


@pytest.mark.parametrize("era", ERAS)
async def test_guided_sessions_write_and_read_through_the_session_tools(
        era: dict, tmp_path: Path) -> None:
    (tmp_path / "draft.prose").write_text(PROGRAM)
    async with host(tmp_path, era, watch=False) as h:
        run = await h.call("start_run", program="draft.prose", inputs={"topic": "moths"},
                           mode="guided")
        vm = run["vm_token"]
        [research] = await pending(h, vm)
        assert research["token"].startswith("gs_")
        written = await h.call("write_binding", token=research["token"], value="moth facts",
                               summary="facts")
        assert written["binding"] == "notes" and written["bytes"] == len("moth facts")
        assert "moth facts" not in written["_text"]
        [draft] = await pending(h, vm)
        read = await h.call("read_binding", token=draft["token"], name="notes")
        assert read["value"] == "moth facts"
        refused = await h.refused("read_binding", token=draft["token"], name="topic")
        assert "not in this session's context" in refused
        await h.call("write_binding", token=draft["token"], value="A draft on moths")
        for _ in range(100):
            step = await h.call("next_step", vm_token=vm, wait_s=1)
            if step["status"] != "running":
                break
        assert step["status"] == "completed"
    binding = tmp_path / ".prose" / "runs" / run["run_id"] / "bindings" / "draft.md"
    assert "A draft on moths" in binding.read_text()
