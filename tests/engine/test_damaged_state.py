"""Hand-damaged state never gives a traceback. A failed run's files (or database rows) are
damaged one way each; then ``prose resume``, ``prose show`` and ``prose runs`` either repair
what can be repaired (the resume completes with the session's recorded value) or stop with
one clear line naming the file and line (or table and row) that is damaged."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from openprose.cli import cli

PROGRAM = '''\
input topic: "what about"
let a = session "First on {topic}"
let b = session "Second"
  context: a
output o = b
'''
FIRST_ONLY = 'sessions:\n  - match: "First"\n    output: "A-out"\n'
EVERYTHING = 'sessions:\n  - match: "First"\n    output: "A-out"\ndefault_output: "B-out"\n'


def _prose(project: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--project", str(project)])


def _failed_run(project: Path, backend: str) -> Path:
    """A run whose first session finished and whose second failed: resumable."""
    (project / "p.prose").write_text(PROGRAM)
    (project / "first.yaml").write_text(FIRST_ONLY)
    (project / "all.yaml").write_text(EVERYTHING)
    done = _prose(project, "run", str(project / "p.prose"), "--state", backend, "--provider",
                  "scripted", "--script", str(project / "first.yaml"), "--input", "topic=x",
                  "--json")
    assert done.exit_code == 1, done.output
    run_id = json.loads(done.stdout.strip().splitlines()[-1])["run_id"]
    return project / ".prose" / "runs" / run_id


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data + b"\n")


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def _into_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside.txt").write_text("x")


def _sql(run: Path, statement: str) -> None:
    conn = sqlite3.connect(run / "state.db")
    conn.execute(statement)
    conn.commit()
    conn.close()


# name -> (backend, damage, "repaired" or the text the refusal must name)
Damage = Callable[[Path], str | None]
CASES: dict[str, tuple[str, Damage, str]] = {
    "run.json garbage": ("filesystem", lambda r: (r / "run.json").write_text("{not json"),
                         "repaired"),
    "run.json empty": ("filesystem", lambda r: (r / "run.json").write_text(""), "repaired"),
    "run.json wrong shape": ("filesystem", lambda r: (r / "run.json").write_text('[1, 2]'),
                             "repaired"),
    "run.json wrong fields": ("filesystem",
                              lambda r: (r / "run.json").write_text('{"id": 5}'), "repaired"),
    "journal line of the wrong shape": (
        "filesystem", lambda r: _append(r / "journal.jsonl", b'{"key": 5, "kind": "result"}'),
        "journal.jsonl:{journal}"),
    "journal line not UTF-8": (
        "filesystem", lambda r: _append(r / "journal.jsonl", b'{"key":"k\xff","kind":"intent"}'),
        "journal.jsonl:{journal}: not UTF-8"),
    "frames line of the wrong shape": (
        "filesystem", lambda r: _append(r / "frames.jsonl", b'{"execution_id": "one"}'),
        "frames.jsonl:1"),
    "capabilities line of the wrong shape": (
        "filesystem", lambda r: _append(r / "capabilities.jsonl", b"[1, 2]"),
        "capabilities.jsonl:{capabilities}"),
    "capabilities line not UTF-8": (
        "filesystem", lambda r: _append(r / "capabilities.jsonl", b'{"hash":"\xfe"}'),
        "capabilities.jsonl:{capabilities}: not UTF-8"),
    "session binding not UTF-8": (
        "filesystem", lambda r: (r / "bindings" / "a.md").write_bytes(b"# a\n\xff\xfe"),
        "repaired"),
    "session binding of the wrong shape": (
        "filesystem", lambda r: (r / "bindings" / "a.md").write_text("garbage"), "repaired"),
    "session binding replaced by a directory": (
        "filesystem", lambda r: _into_directory(r / "bindings" / "a.md"), "repaired"),
    "session binding deleted": (
        "filesystem", lambda r: (r / "bindings" / "a.md").unlink(), "repaired"),
    "input binding not UTF-8": (
        "filesystem", lambda r: (r / "bindings" / "topic.md").write_bytes(b"# topic\n\xff"),
        "bindings/topic.md:2: not UTF-8"),
    "journal replaced by a directory": (
        "filesystem", lambda r: _into_directory(r / "journal.jsonl"), "journal.jsonl"),
    "state.md replaced by a directory": (
        "filesystem", lambda r: _into_directory(r / "state.md"), "repaired"),
    "garbage state.db": (
        "sqlite", lambda r: (r / "state.db").write_bytes(b"garbage " * 512), "state.db"),
    "journal row not JSON": (
        "sqlite", lambda r: _sql(r, "UPDATE journal SET body = 'not json' WHERE seq = 2"),
        "row seq=2"),
    "journal row of the wrong shape": (
        "sqlite", lambda r: _sql(r, "UPDATE journal SET body = '{\"key\": []}' WHERE seq = 1"),
        "row seq=1"),
    "capabilities row not JSON": (
        "sqlite", lambda r: _sql(r, "UPDATE capabilities SET body = '{'"), "capabilities"),
    "session binding row deleted": (
        "sqlite", lambda r: _sql(r, "DELETE FROM bindings WHERE name = 'a'"), "repaired"),
}


def _no_traceback(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"{result.exception!r}\n{result.output}"
    assert "Traceback" not in result.output


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_state_is_repaired_or_named(tmp_path: Path, case: str) -> None:
    backend, damage, expected = CASES[case]
    run = _failed_run(tmp_path, backend)
    if backend == "sqlite":  # fold the WAL back so the damage is to what is read
        shutil.rmtree(run / "state.db-wal", ignore_errors=True)
    counts = {"journal": 0, "capabilities": 0}
    for name in counts:
        if (run / f"{name}.jsonl").exists():
            counts[name] = _lines(run / f"{name}.jsonl") + 1
    damage(run)
    expected = expected.format(**counts)

    listed = _prose(tmp_path, "runs")
    _no_traceback(listed)
    assert listed.exit_code == 0, listed.output
    shown = _prose(tmp_path, "show", run.name)
    _no_traceback(shown)
    resumed = _prose(tmp_path, "resume", run.name, "--provider", "scripted", "--script",
                     str(tmp_path / "all.yaml"), "--json")
    _no_traceback(resumed)
    if expected == "repaired":
        assert resumed.exit_code == 0, resumed.output
        outcome = json.loads(resumed.stdout.strip().splitlines()[-1])
        assert outcome["status"] == "completed" and outcome["outputs"] == {"o": "B-out"}
        assert outcome["reused"] >= 1  # the finished session was not run again
        _no_traceback(again := _prose(tmp_path, "show", run.name))
        assert again.exit_code == 0, again.output
    else:
        assert resumed.exit_code == 2, resumed.output
        message = resumed.stderr.strip().splitlines()  # one line for the user
        assert len(message) == 1 and expected in message[0], resumed.output
        refusal = json.loads(resumed.stdout)  # and a JSON result for scripts (--json)
        assert refusal["status"] == "refused" and expected in refusal["error"]
        assert shown.exit_code != 0 and expected in shown.output, shown.output
