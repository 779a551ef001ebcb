"""A session's work tools cost nothing until it uses them: building the file toolset (a
pydantic schema per tool) took ~18 ms a session, and it was built for every session of every
run — guided runs, whose host never gets them, and scripted ones that make no calls — which
made a guided statement 5x slower (bench/mcp.py guided-overhead)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from openprose.engine import ScriptedProvider, runner, work_tools
from openprose.engine.interpreter import Options
from openprose.engine.permissions import Grants, Policy
from openprose.engine.work_tools import WorkSetup
from openprose.language import compile_or_raise

PROGRAM = 'let a = session "One"\nlet b = session "Two"\noutput c = session "Three"\n'


def test_sessions_that_make_no_calls_never_build_the_toolset(tmp_path: Path,
                                                             monkeypatch) -> None:
    built: list[object] = []
    real = work_tools.beta_agent_toolset_20260401
    monkeypatch.setattr(work_tools, "beta_agent_toolset_20260401",
                        lambda context: built.append(context) or real(context))
    setup = WorkSetup(Policy(tmp_path, Grants()))
    job = runner.Job(source=PROGRAM, file="p.prose", program=compile_or_raise(PROGRAM, "p.prose"),
                     project_root=tmp_path, options=Options(work=setup))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider({"default_output": "done"})))
    assert outcome.status == "completed" and built == []
    tools = setup.tools(setup.policy.gate("a", None), lambda record: None)
    assert {d["name"] for d in tools.definitions()} >= {"read", "glob", "grep"}
    assert tools.definitions() and len(built) == 1  # built once, on first use
