"""An embodied run leaves the records every other mode leaves: its sessions and verdicts are
steps of ``prose show`` and ``state.md``, and ``state.md`` shows the final status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.mcp_server.host import ERAS
from tests.mcp_server.tool_host import walk

from openprose.mcp_server.server import create_server
from openprose.state import open_store
from openprose.state.view import load_view

PROGRAM = """\
let draft = session "Draft a note"
if **the draft is long**:
  session "Shorten it"
else:
  session "Extend it"
block polish(text):
  let done = session "Polish {text}"
do polish(draft)
"""
SCRIPT = {"sessions": [{"match": "^[^\\n]*", "output": "did: \\\\g<0>"}],
          "conditions": [{"match": ".", "verdicts": [False]}]}


@pytest.mark.parametrize("reports", [True, False], ids=["with update_state", "without"])
@pytest.mark.parametrize("era", ERAS[1:])
def test_an_embodied_run_shows_its_steps_verdicts_and_final_status(era: dict, reports: bool,
                                                                   tmp_path: Path) -> None:
    """Sessions and verdicts show whether the host reports statuses or not."""
    (tmp_path / "note.prose").write_text(PROGRAM)
    server = create_server(tmp_path, home=tmp_path / "home", watch=False)
    run_id, status, calls = walk(server, era, PROGRAM, "note.prose", {}, SCRIPT,
                                 reports=reports)
    assert ("update_state" in calls) == reports
    assert status == "completed"

    with open_store(tmp_path) as store:
        view = load_view(store, run_id)
    sessions = sorted((s.line, s.status) for s in view.steps if s.kind == "session")
    verdicts = [(s.line, s.verdict) for s in view.steps if s.kind == "verdict"]
    assert sessions == [(1, "complete"), (5, "complete"), (7, "complete")]
    assert verdicts == [(2, False)]
    shown = json.loads(json.dumps(view.to_dict()))
    assert len(shown["steps"]) == 4

    state = (tmp_path / ".prose" / "runs" / run_id / "state.md").read_text()
    assert "status: completed" in state
    assert "(judged: false)" in state
    assert "--> bindings/draft.md (complete)" in state
