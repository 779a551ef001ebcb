"""Reads that could leave the project or never end: ``use`` of local files and
``--input NAME=@FILE``. A local import is a regular ``.prose`` file inside the project (or
beside the program being run), read with a size cap; an error about a file that is not a
program never shows what is in it. An input file is read up to a stated limit."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from openprose.cli import cli
from openprose.engine.errors import ImportFailed
from openprose.engine.runner import load_imports
from openprose.language import compile_or_raise
from openprose.language.files import MAX_PROGRAM_BYTES

SECRET = "sk-ant-do-not-leak-0123456789"
CLI = [sys.executable, "-c", "from openprose.cli import main; main()"]
CHILD = 'input topic: "t"\noutput findings = session "Find {topic}"\n'


def _dry_run(project: Path, program: str):
    (project / "main.prose").write_text(program)
    return CliRunner().invoke(cli, ["run", str(project / "main.prose"), "--dry-run",
                                    "--project", str(project)])


def _load(project: Path, program: str, file: Path | None = None):
    file = file or project / "main.prose"
    return load_imports(compile_or_raise(program, str(file)), str(file), project)


def _limited(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process whose memory is capped at 1 GiB (a read without a limit
    fails instead of eating the machine) and that is stopped after 120 seconds."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          preexec_fn=cap)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".prose").mkdir(parents=True)
    (root / ".prose" / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    return root


def test_use_of_the_env_file_is_refused_without_echoing_it(project):
    result = _dry_run(project, 'use ".prose/.env" as env\noutput x = "y"\n')
    assert result.exit_code == 2
    assert "must be a .prose file" in result.output
    assert SECRET not in result.output and "ANTHROPIC_API_KEY" not in result.output


def test_use_of_proc_environ_is_refused(project):
    result = _dry_run(project, 'use "../../../../../../proc/self/environ" as env\n'
                               'output x = "y"\n')
    assert result.exit_code == 2
    assert "must be a .prose file" in result.output
    assert "PATH=" not in result.output


@pytest.mark.parametrize("target", ["/dev/zero", "zero.prose"])
def test_use_of_dev_zero_neither_hangs_nor_grows(project, target):
    """Directly (a compile error) or through a link named like a program: neither the
    compiler's contract check nor the import loader reads it."""
    (project / "zero.prose").symlink_to("/dev/zero")
    (project / "main.prose").write_text(f'use "{target}" as z\noutput x = "y"\n')
    done = _limited(["run", "main.prose", "--dry-run"], project)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert ("E012" if target == "/dev/zero" else "must be a .prose file") in done.stderr


def test_a_program_outside_the_project_is_refused(project, tmp_path):
    (tmp_path / "elsewhere.prose").write_text(CHILD)
    with pytest.raises(ImportFailed, match="outside the project"):
        _load(project, 'use "../elsewhere.prose" as e\noutput x = e(topic: "a").findings\n')


def test_a_link_out_of_the_project_is_refused(project, tmp_path):
    (tmp_path / "secret.prose").write_text(CHILD)
    (project / "lib.prose").symlink_to(tmp_path / "secret.prose")
    with pytest.raises(ImportFailed, match="outside the project"):
        _load(project, 'use "./lib.prose" as e\noutput x = e(topic: "a").findings\n')


def test_a_prose_named_link_to_a_non_program_is_refused(project):
    (project / "env.prose").symlink_to(project / ".prose" / ".env")
    result = _dry_run(project, 'use "./env.prose" as env\noutput x = "y"\n')
    assert result.exit_code == 2 and SECRET not in result.output
    assert "must be a .prose file" in result.output


def test_a_fifo_is_refused_without_blocking(project):
    os.mkfifo(project / "pipe.prose")
    with pytest.raises(ImportFailed, match="not a regular file"):
        _load(project, 'use "./pipe.prose" as p\noutput x = "y"\n')


def test_an_oversized_program_is_refused(project):
    (project / "big.prose").write_text("# " + "x" * MAX_PROGRAM_BYTES + "\n")
    with pytest.raises(ImportFailed, match="larger than"):
        _load(project, 'use "./big.prose" as b\noutput x = "y"\n')


def test_imports_inside_the_project_and_beside_the_program_still_load(project, tmp_path):
    (project / "lib").mkdir()
    (project / "lib" / "research.prose").write_text(CHILD)
    program = 'use "./lib/research.prose" as r\noutput x = r(topic: "a").findings\n'
    assert set(_load(project, program)) == {"r"}
    beside = tmp_path / "elsewhere"  # a program run from outside the project
    (beside / "lib").mkdir(parents=True)
    (beside / "lib" / "research.prose").write_text(CHILD)
    assert set(_load(project, program, beside / "main.prose")) == {"r"}


def test_input_file_is_capped_and_says_so(project):
    (project / "main.prose").write_text('input topic: "t"\noutput x = session "On {topic}"\n')
    done = _limited(["run", "main.prose", "--provider", "scripted", "--script", "none.yaml",
                     "--input", "topic=@/dev/zero"], project)
    assert done.returncode == 2, done.stderr
    assert "--input topic: /dev/zero is larger than the 10 MiB limit" in done.stderr
    assert "Traceback" not in done.stderr


def test_input_file_that_is_not_utf8_is_a_usage_error(project):
    (project / "main.prose").write_text('input topic: "t"\noutput x = session "On {topic}"\n')
    (project / "bin.dat").write_bytes(b"ok\xff\xfe")
    result = CliRunner().invoke(cli, ["run", str(project / "main.prose"), "--provider",
                                      "scripted", "--script", "none.yaml", "--input",
                                      f"topic=@{project / 'bin.dat'}", "--project",
                                      str(project)])
    assert result.exit_code == 2 and "is not UTF-8 text" in result.output


def test_project_memory_linked_to_credentials_never_reaches_the_model(project, tmp_path):
    """A cloned repository carrying .prose/agents/coach/memory.md -> a credentials file."""
    (tmp_path / "credentials").write_text(f"aws_secret_access_key={SECRET}\n")
    (project / ".prose" / "agents" / "coach").mkdir(parents=True)
    (project / ".prose" / "agents" / "coach" / "memory.md").symlink_to(tmp_path / "credentials")
    (project / "main.prose").write_text(
        'agent coach:\n  model: sonnet\n  persist: project\n  prompt: "You coach."\n\n'
        'resume: coach\n  prompt: "Plan the week"\n')
    (project / "s.yaml").write_text('default_output: "ok"\ncall_log: calls.jsonl\n')
    result = CliRunner().invoke(cli, ["run", str(project / "main.prose"), "--provider",
                                      "scripted", "--script", str(project / "s.yaml"),
                                      "--project", str(project)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "symbolic link" in result.output and SECRET not in result.output
    calls = project / "calls.jsonl"
    assert not calls.exists() or SECRET not in calls.read_text()
    leaked = [p for p in (project / ".prose" / "runs").rglob("*")
              if p.is_file() and SECRET in p.read_text(errors="replace")]
    assert leaked == []
