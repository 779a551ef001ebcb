"""A program that calls an imported program is not started embodied: the server follows an
embodied host with the interpreter, which does not enter imported programs, so the host's
walk through one would go unchecked (before, it could skip the call and go on). The refusal
names the call and offers the guided mode, which runs both programs."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.mcp_server.host import host

pytestmark = pytest.mark.anyio

LIB = 'input topic: "a topic"\noutput summary = session "Summarize {topic}"\n'
MAIN = '''\
use "./lib.prose" as lib
let r = lib(topic: "tides")
output o = session "Polish {r}"
  context: r
'''


async def test_an_embodied_run_of_a_program_calling_an_import_is_refused(tmp_path: Path
                                                                         ) -> None:
    (tmp_path / "lib.prose").write_text(LIB)
    (tmp_path / "main.prose").write_text(MAIN)
    async with host(tmp_path, {}, watch=False) as h:
        refused = await h.refused("start_run", program="main.prose")
        assert "an embodied run is one the server can follow step by step" in refused
        assert "calls an imported program" in refused and 'mode="guided"' in refused
        assert "[statement 1, line 2]" in refused
        runs = tmp_path / ".prose" / "runs"
        assert not runs.exists() or not [p for p in runs.iterdir() if not p.name.startswith(".")]
        guided = await h.call("start_run", program="main.prose", mode="guided")
        step = await h.call("next_step", vm_token=guided["vm_token"])
        assert [item["binding"] for item in step["pending"]] == ["summary"]
