"""A session's work tools cost nothing until it uses them: building the file toolset (a
pydantic schema per tool) took ~18 ms a session, and it was built for every session of every
run — guided runs, whose host never gets them, and scripted ones that make no calls — which
made a guided statement 5x slower (bench/mcp.py guided-overhead); and importing its SDK module
at start doubled the time ``prose serve`` took to start."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from openprose.engine import ScriptedProvider, runner
from openprose.engine.interpreter import Options
from openprose.engine.permissions import Grants, Policy
from openprose.engine.work_tools import WorkSetup
from openprose.language import compile_or_raise

PROGRAM = 'let a = session "One"\nlet b = session "Two"\noutput c = session "Three"\n'


def test_sessions_that_make_no_calls_never_build_the_toolset(tmp_path: Path,
                                                             monkeypatch) -> None:
    from anthropic.lib.tools import agent_toolset

    built: list[object] = []
    real = agent_toolset.beta_agent_toolset_20260401
    monkeypatch.setattr(agent_toolset, "beta_agent_toolset_20260401",
                        lambda context: built.append(context) or real(context))
    setup = WorkSetup(Policy(tmp_path, Grants()))
    job = runner.Job(source=PROGRAM, file="p.prose", program=compile_or_raise(PROGRAM, "p.prose"),
                     project_root=tmp_path, options=Options(work=setup))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider({"default_output": "done"})))
    assert outcome.status == "completed" and built == []
    tools = setup.tools(setup.policy.gate("a", None), lambda record: None)
    assert {d["name"] for d in tools.definitions()} >= {"read", "glob", "grep"}
    assert tools.definitions() and len(built) == 1  # built once, on first use


def test_starting_the_server_or_the_engine_imports_no_model_sdk() -> None:
    """The Anthropic SDK loads slowly (seconds on a loaded machine): it is imported when a
    provider or a session's toolset needs it, not by ``prose serve`` or ``prose run``'s
    engine at start."""
    code = ("import sys, openprose.engine, openprose.mcp_server.server, openprose.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'anthropic'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
