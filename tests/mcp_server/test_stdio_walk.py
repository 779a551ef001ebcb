"""The walk of tests/mcp_server/test_host_walk.py over a real pipe: the installed
``prose serve`` as a subprocess, the SDK's stdio client as the host, in both protocol eras.
The run it leaves matches the engine's for the same program and answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import StdioServerParameters
from tests.mcp_server.host import corpus
from tests.mcp_server.test_host_walk import FAILING, SCRIPT, assert_same_run
from tests.mcp_server.tool_host import engine_run, walk

from openprose.language import compile_or_raise

PROSE = str(Path(sys.executable).with_name("prose"))
WALKS = [
    pytest.param("36-bug-hunter.prose", {"mode": "legacy"},
                 id="persistent-agent-judged-loops-parallel-handshake"),
    pytest.param("40-rlm-self-refine.prose", {}, id="recursive-block-2026-07-28"),
]


@pytest.mark.parametrize(("name", "era"), WALKS)
def test_a_host_walks_a_program_through_the_installed_server(name: str, era: dict,
                                                             tmp_path: Path) -> None:
    source = corpus(name)
    engine_root, host_root = tmp_path / "engine", tmp_path / "host"
    for root in (engine_root, host_root):
        root.mkdir()
        (root / name).write_text(source)
    inputs = {decl.name: f"sample {decl.name}" for decl in compile_or_raise(source, name).inputs}
    script = dict(SCRIPT, sessions=FAILING + SCRIPT["sessions"])

    outcome = engine_run(engine_root, source, name, inputs, script)
    served = StdioServerParameters(command=PROSE, args=["serve", "--project", str(host_root)],
                                   env={"HOME": str(tmp_path / "home")})
    run_id, status, calls = walk(served, era, source, name, inputs, script)

    assert status == outcome.status
    assert_same_run(host_root, run_id, engine_root, outcome.run_id)
    assert {"spawn_session", "write_binding", "read_binding", "update_state",
            "complete_run"} <= set(calls)
