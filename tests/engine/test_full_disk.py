"""A full disk, for real: the project lives on a small tmpfs (skipped where mounting is not
permitted). A session's value that does not fit stops the run with one clear error, the run
is marked interrupted with the reason, what was committed before stays, and once space is
freed the run resumes to completion without calling the finished session again."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from openprose.cli import cli
from openprose.state import BindingRef, StateDiskFull, open_store

PROGRAM = 'let a = session "Small step"\nlet b = session "Big step"\noutput o = b\n'
BIG = 1536 * 1024  # does not fit on the 1 MiB disk


def _mount(path: Path, size: str, remount: bool = False) -> subprocess.CompletedProcess[str]:
    options = f"remount,size={size}" if remount else f"size={size}"
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs; grow it with ``_mount(path, size, remount=True)``."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = _mount(disk, "1m")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _prose(project: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--project", str(project)])


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
def test_a_full_disk_interrupts_the_run_and_it_resumes_once_space_is_freed(
        small_disk: Path, tmp_path: Path, backend: str) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(json.dumps({"sessions": [
        {"match": "Small", "output": "A-out"}, {"match": "Big", "output": "x" * BIG}]}))
    (tmp_path / "p.prose").write_text(PROGRAM)
    args = ["--provider", "scripted", "--script", str(script)]
    done = _prose(small_disk, "run", str(tmp_path / "p.prose"), "--state", backend, *args)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    assert "Traceback" not in done.output and "OSError" not in done.output
    errors = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no space left on the device" in errors[0], done.output
    assert done.exit_code == 130
    run_id = done.output.split("run ", 1)[1].split()[0]
    with open_store(small_disk, backend) as store:
        [info] = store.list_runs()
        assert info.status == "interrupted"
        assert "no space left" in (store.backend.load_run(run_id).error or "")
        run = store.open_run(run_id)
        assert run.read_binding(BindingRef("a")).value == "A-out"

    assert _mount(small_disk, "8m", remount=True).returncode == 0
    resumed = _prose(small_disk, "resume", run_id, *args, "--json")
    assert resumed.exit_code == 0, resumed.output
    outcome = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "completed" and outcome["reused"] == 1
    assert outcome["outputs"]["o"] == "x" * BIG


def test_sqlite_full_is_a_state_error_and_the_write_goes_through_later(
        small_disk: Path) -> None:
    """SQLite's own "database or disk is full", not an attachment file's."""
    with open_store(small_disk, "sqlite") as store:
        run = store.create_run(PROGRAM, "p.prose")
        run.write_binding(BindingRef("a"), "kept", "let", "let a", durable=True)
        filler = small_disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # take every byte that is left
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        with pytest.raises(StateDiskFull, match="disk is full"):
            run.write_binding(BindingRef("b"), "y" * 90_000, "let", "let b", durable=True)
        assert run.read_binding(BindingRef("a")).value == "kept"
        filler.unlink()
        run.write_binding(BindingRef("b"), "y" * 90_000, "let", "let b", durable=True)
        assert run.read_binding(BindingRef("b")).value == "y" * 90_000
