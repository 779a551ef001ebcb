"""Whole programs under their permissions: the bundled fix-a-failing-test example through
`prose run` (no terminal, no flags), and corpus 12's promises kept."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import CORPUS

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.permissions import Policy
from openprose.engine.sandbox import detect
from openprose.engine.scripted import ScriptedProvider
from openprose.engine.work_tools import WorkSetup
from openprose.language import compile_or_raise
from openprose.state import open_store

PROSE = str(Path(sys.executable).with_name("prose"))
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fix-failing-test"


@pytest.mark.skipif(not detect().confined and not os.environ.get("CI"),
                    reason="no OS sandbox here (install bubblewrap)")
def test_the_fix_a_failing_test_example_fixes_the_code(tmp_path):
    project = tmp_path / "example"
    shutil.copytree(EXAMPLE, project)
    before = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "tests"],
                            cwd=project, capture_output=True, text=True)
    assert before.returncode == 1  # the example starts with a failing test
    done = subprocess.run(
        [PROSE, "run", "fix.prose", "--provider", "scripted", "--script", "fix.script.yaml",
         "--json"], cwd=project, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["outputs"]["verdict"].rstrip().endswith("OK")
    after = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "tests"],
                           cwd=project, capture_output=True, text=True)
    assert after.returncode == 0, after.stderr
    assert (project / "tests" / "test_calc.py").read_text() == \
        (EXAMPLE / "tests" / "test_calc.py").read_text()
    shown = json.loads(subprocess.run([PROSE, "show", outcome["run_id"], "--json"],
                                      cwd=project, capture_output=True, text=True).stdout)
    calls = [(c["agent"], c["tool"], c["allowed"], c.get("exit_code"))
             for c in shown["tool_calls"]]
    assert calls == [("tester", "bash", True, 1), ("fixer", "read", True, 0),
                     ("fixer", "write", False, None), ("fixer", "edit", True, 0),
                     ("tester", "bash", True, 0)]


CORPUS_12 = CORPUS / "12-secure-agent-permissions.prose"


@pytest.mark.skipif(not CORPUS_12.exists(), reason="corpus not present")
def test_corpus_12_keeps_its_promises(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.ts").write_text("export const x = 1;\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "secrets.txt").write_text("token\n")
    source = CORPUS_12.read_text()
    attempts = [{"read": "src/app.ts"}, {"read": "secrets.txt"},
                {"write": {"file_path": "src/app.ts", "content": "pwned"}},
                {"write": {"file_path": "docs/review.md", "content": "# Review\n"}},
                {"bash": "rm -rf src"}]
    script = {"sessions": [{"match": "Review the codebase", "tools": attempts},
                           {"match": "Update the documentation", "tools": attempts}]}
    job = runner.Job(source=source, file=CORPUS_12.name,
                     program=compile_or_raise(source, CORPUS_12.name), project_root=tmp_path,
                     options=Options(work=WorkSetup(Policy(tmp_path))))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(script)))
    assert outcome.status == "completed", outcome.error
    with open_store(tmp_path, "filesystem") as store:
        calls = store.open_run(outcome.run_id).tool_calls()
    got = [(c.meta["agent"], c.meta["tool"], c.meta["subject"], c.meta["allowed"])
           for c in calls]
    assert got == [
        # the read-only reviewer: reads its globs, writes nothing, runs nothing
        ("code-reviewer", "read", "src/app.ts", True),
        ("code-reviewer", "read", "secrets.txt", False),
        ("code-reviewer", "write", "src/app.ts", False),
        ("code-reviewer", "write", "docs/review.md", False),
        ("code-reviewer", "bash", "rm -rf src", False),
        # the documentation writer: writes docs/**/*.md only, runs nothing
        ("doc-writer", "read", "src/app.ts", True),
        ("doc-writer", "read", "secrets.txt", False),
        ("doc-writer", "write", "src/app.ts", False),
        ("doc-writer", "write", "docs/review.md", True),
        ("doc-writer", "bash", "rm -rf src", False)]
    assert (tmp_path / "src" / "app.ts").read_text() == "export const x = 1;\n"
    assert (tmp_path / "docs" / "review.md").read_text() == "# Review\n"
