"""Persistent agents and imported programs on real state."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from tests.conftest import no_sleep

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise
from openprose.state import AgentRef, BindingRef, open_store


def _run(root: Path, source: str, file: str = "p.prose", script=None):
    program = compile_or_raise(source, str(root / file))
    job = runner.Job(source=source, file=str(root / file), program=program, project_root=root,
                     imports=runner.load_imports(program, str(root / file), root),
                     options=Options(sleep=no_sleep))
    return asyncio.run(runner.execute(job, ScriptedProvider(script or {"default_output": "ok"})))


AGENT = '''\
agent advisor:
  persist: project
  prompt: "You advise"

{body}
'''


def test_project_agent_memory_survives_runs_and_resume_needs_it(tmp_path):
    first = _run(tmp_path, AGENT.format(body='resume: advisor\n  prompt: "again"'))
    assert first.status == "failed" and "E018" in first.error
    script = {"sessions": [{"match": "plan", "output": "planned", "memory": "knows the plan"},
                           {"match": "review", "output": "reviewed",
                            "memory": "knows the plan and the review"}]}
    second = _run(tmp_path, AGENT.format(body='session: advisor\n  prompt: "plan"'),
                  script=script)
    assert second.status == "completed"
    third = _run(tmp_path, AGENT.format(body='let r = resume: advisor\n  prompt: "review"'),
                 script=script)
    assert third.status == "completed"
    with open_store(tmp_path) as store:
        run = store.open_run(third.run_id)
        agent = AgentRef("advisor", "project")
        assert run.memory(agent) == "knows the plan and the review"
        assert [text for _, text in run.segments(agent)] == ["planned", "reviewed"]
    assert (tmp_path / ".prose" / "agents" / "advisor" / "memory.md").exists()
    fresh = _run(tmp_path, AGENT.format(body='session: advisor\n  prompt: "plan"'),
                 script=script)
    assert fresh.status == "completed" and len(fresh.warnings) == 1
    assert fresh.warnings[0].startswith("W011") and "resume: advisor" in fresh.warnings[0]


def test_imported_program_runs_in_nested_state(tmp_path):
    (tmp_path / "research.prose").write_text(
        'input topic: "t"\noutput findings = session "Find {topic}"\n')
    main = 'use "./research.prose" as research\nlet r = research(topic: "AI")\n' \
           'output f = r.findings\n'
    outcome = _run(tmp_path, main, script={"sessions": [{"match": r"Find (\w+)",
                                                         "output": r"found \1"}]})
    assert outcome.outputs == {"f": "found AI"}
    with open_store(tmp_path) as store:
        run = store.open_run(outcome.run_id)
        child = run.child("local", "research", "")
        assert child.read_binding(BindingRef("findings")).value == "found AI"
        assert run.read_binding(BindingRef("f")).value == "found AI"
    nested = tmp_path / ".prose" / "runs" / outcome.run_id / "imports" / "local--research"
    assert (nested / "bindings" / "findings.md").exists()


def test_imports_are_registered_in_the_run_and_in_nested_runs(tmp_path):
    (tmp_path / "inner.prose").write_text('output x = session "inner"\n')
    research = ('use "./inner.prose" as inner\ninput topic: "what to study"\n'
                'let i = inner()\noutput findings = session "Find {topic}"\n'
                'output also = i.x\n')
    (tmp_path / "research.prose").write_text(research)
    main = 'use "./research.prose" as research\nlet r = research(topic: "AI")\n'
    outcome = _run(tmp_path, main)
    assert outcome.status == "completed", outcome.error
    with open_store(tmp_path) as store:
        run = store.open_run(outcome.run_id)
        [registered] = run.imports()
        assert registered.alias == "research"
        assert registered.source_url == str(tmp_path / "research.prose")
        assert registered.content_hash == "sha256:" + hashlib.sha256(
            research.encode()).hexdigest()
        assert registered.inputs == {"topic": "what to study"}
        assert registered.outputs == ("findings", "also")
        [nested] = run.child("local", "research", "").imports()
        assert (nested.alias, nested.outputs) == ("inner", ("x",))
