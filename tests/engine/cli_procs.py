"""Driving real `prose` processes in tests: start, watch the scripted provider's call log,
and a project (with its own PostgreSQL schema) per test."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import PG_URL

CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]
SCRIPTED = ["--provider", "scripted", "--script", "s.yaml"]

# Two steps, then a final session that reads them: the program the process tests drive.
TWO_STEPS = '''\
let a = session "step A"
let b = session "step B"
output o = session "final"
  context: { a, b }
'''


def two_steps_script(latency: float, final: float | None = None) -> str:
    """A scripted provider for TWO_STEPS whose sessions take ``latency`` seconds each (the
    final one ``final`` seconds, if given: an hour keeps a run alive until it is signalled,
    however slow the machine) and whose call log (calls.jsonl) shows each start."""
    final_latency = "" if final is None else f"\n    latency: {final}"
    return f'''\
latency: {latency}
call_log: calls.jsonl
sessions:
  - match: "step (\\\\w)"
    output: "did \\\\1"
  - match: "final"
    output: "final"{final_latency}
'''


def make_project(root: Path, program: str, script: str, backend: str,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``root`` with p.prose and s.yaml; on PostgreSQL a fresh schema (dropped after)."""
    root.mkdir()
    (root / "p.prose").write_text(program)
    (root / "s.yaml").write_text(script)
    schema = None
    if backend == "postgres":
        schema = f"t_{uuid.uuid4().hex[:16]}"
        monkeypatch.setenv("OPENPROSE_POSTGRES_URL", PG_URL or "")
        monkeypatch.setenv("OPENPROSE_POSTGRES_SCHEMA", schema)
    yield root
    if schema is not None:
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def prose(root: Path, *args: str, name: str) -> subprocess.Popen:
    """Start ``prose ARGS`` in ``root``; its stderr goes to ``root/NAME.err``."""
    with open(root / f"{name}.err", "w") as err:
        return subprocess.Popen([*CLI, *args], cwd=root, stdout=subprocess.PIPE, stderr=err,
                                text=True)


def starts(root: Path) -> list[str]:
    """Keys of the sessions the scripted provider started, in order."""
    log = root / "calls.jsonl"
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]
    return [e["key"] for e in lines if e["kind"] == "session" and e["phase"] == "start"]


def wait_for(predicate: Callable[[], bool], what: str, proc: subprocess.Popen) -> None:
    for _ in range(1200):
        if predicate():
            return
        assert proc.poll() is None, f"ended before {what}"
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def run_id_of(root: Path, name: str) -> str | None:
    for line in (root / f"{name}.err").read_text().splitlines():
        if line.startswith("run ") and line.endswith(" started"):
            return line.split()[1]
    return None


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
