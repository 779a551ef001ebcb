"""`prose doctor` on real projects: a run made by the engine on each backend, a real git
repository, a real PostgreSQL (and an address where none listens), real host config files in
a throwaway HOME. No check may print a secret."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.conftest import Project, run_id_of

SECRET = "sk-ant-doctor-secret-7c1e"
PROGRAM = 'output summary = session "Summarize"\n'
PROSE = Path(sys.executable).with_name("prose")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return home


def checks(project: Project) -> tuple[int, dict[str, dict], str]:
    text = project.prose("doctor", "--project", str(project.root))
    data = project.prose("doctor", "--json", "--project", str(project.root))
    assert all(len(line) <= 80 for line in text.stdout.splitlines()), text.stdout
    assert "\x1b[" not in text.stdout
    assert data.exit_code == text.exit_code
    parsed = json.loads(data.stdout)
    assert parsed["ok"] == (data.exit_code == 0)
    return data.exit_code, {c["name"]: c for c in parsed["checks"]}, text.stdout + data.stdout


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_a_healthy_project_passes_and_the_key_is_never_shown(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id_of(project.run(PROGRAM))
    (project.root / ".prose" / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    git(project.root, "init", "-q")
    (project.root / ".gitignore").write_text(".prose/.env\n")
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET + "-env")
    code, found, output = checks(project)
    assert code == 0, output
    assert SECRET not in output and "doctor-secret" not in output
    assert found["api key"]["status"] == "ok" and ".prose/.env" in found["api key"]["detail"]
    assert found["python"]["status"] == "ok" and found["packages"]["status"] == "ok"
    assert found["sqlite"]["status"] == "ok" and "WAL works" in found["sqlite"]["detail"]
    assert found["write access"]["status"] == "ok"
    assert found[".env"]["detail"] == ".prose/.env is git-ignored"
    if shutil.which("bwrap"):
        assert found["sandbox"]["status"] == "ok" and found["sandbox"]["detail"].startswith(
            "shell commands of sessions run in bubblewrap (")
        assert "every capability dropped" in found["sandbox"]["detail"]
    if project.backend == "postgres":
        assert found["postgresql"]["status"] == "ok"
        assert found["postgresql"]["detail"].startswith("PostgreSQL ")
    else:
        assert found["postgresql"]["detail"].startswith("not configured")


def test_missing_key_warns_with_a_fix_but_does_not_fail(tmp_path: Path) -> None:
    project = Project(tmp_path, "filesystem")
    code, found, _ = checks(project)
    assert code == 0
    assert found["api key"]["status"] == "warn"
    assert "ANTHROPIC_API_KEY" in found["api key"]["fix"]
    assert found["write access"]["detail"].startswith("no .prose/ yet")


def test_an_env_file_git_would_commit_fails(tmp_path: Path) -> None:
    project = Project(tmp_path, "filesystem")
    project.run(PROGRAM)
    (tmp_path / ".prose" / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    git(tmp_path, "init", "-q")
    code, found, output = checks(project)
    assert code == 1
    assert found[".env"]["status"] == "fail"
    assert found[".env"]["fix"] == "add the line .prose/.env to .gitignore"
    assert SECRET not in output
    git(tmp_path, "add", "-f", ".prose/.env")
    code, found, _ = checks(project)
    assert code == 1 and "committed to git" in found[".env"]["detail"]
    assert "git rm --cached" in found[".env"]["fix"]


def test_unreachable_postgres_fails_fast_without_the_password(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = Project(tmp_path, "filesystem")
    (tmp_path / ".prose").mkdir()
    # Port 9 on loopback: nothing listens, the connection is refused at once.
    (tmp_path / ".prose" / ".env").write_text(
        "OPENPROSE_POSTGRES_URL=postgresql://op:pg-pass-9f3a@127.0.0.1:9/db\n")
    code, found, output = checks(project)
    assert code == 1
    check = found["postgresql"]
    assert check["status"] == "fail"
    assert "cannot connect to postgresql://op@127.0.0.1:9/db" in check["detail"]
    assert "pg-pass-9f3a" not in output
    assert "OPENPROSE_POSTGRES_URL" in check["fix"]


@pytest.mark.postgres
def test_wrong_postgres_password_is_named_not_shown(tmp_path: Path, pg_url: str) -> None:
    url = pg_url
    project = Project(tmp_path, "filesystem")
    (tmp_path / ".prose").mkdir()
    bad = url.replace("postgresql://postgres@", "postgresql://nobody_here:pw-77x@")
    (tmp_path / ".prose" / ".env").write_text(f"OPENPROSE_POSTGRES_URL={bad}\n")
    code, found, output = checks(project)
    assert code == 1 and found["postgresql"]["status"] == "fail"
    assert "pw-77x" not in output


def test_unwritable_prose_fails_with_a_fix(tmp_path: Path) -> None:
    project = Project(tmp_path, "filesystem")
    (tmp_path / ".prose").write_text("a file in the way")
    code, found, _ = checks(project)
    assert code == 1 and found["write access"]["status"] == "fail"
    assert "is not a directory" in found["write access"]["detail"]
    (tmp_path / ".prose").unlink()
    if os.geteuid() == 0:
        return  # root writes anywhere: no permission to take away
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose").chmod(0o555)
    try:
        code, found, _ = checks(project)
    finally:
        (tmp_path / ".prose").chmod(0o755)
    assert code == 1 and found["write access"]["status"] == "fail"
    assert "chmod u+w" in found["write access"]["fix"]


def test_hosts_configured_by_install_skill_are_recognized(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = Project(tmp_path / "p", "filesystem")
    project.root.mkdir()
    code, found, _ = checks(project)
    assert found["claude desktop"]["status"] == "warn"
    assert found["claude desktop"]["fix"] == "prose install-skill --claude-desktop"
    assert found["claude code"]["status"] == "warn"

    config = home / "desktop.json"
    installed = project.prose("install-skill", "--claude-desktop", "--config", str(config),
                              "--project", str(project.root))
    assert installed.exit_code == 0, installed.output
    target = home / ".config" / "Claude" / "claude_desktop_config.json"
    target.parent.mkdir(parents=True)
    target.write_text(config.read_text())
    # Claude Code keeps `claude mcp add --scope user` in ~/.claude.json and enabled plugins
    # in ~/.claude/settings.json (as Claude Code 2.1 writes them).
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"enabledPlugins": {"openprose@openprose": True}}))
    # The plugin's server finds no prose (none on PATH, none recorded) until
    # install-skill --claude-code records this one.
    monkeypatch.setenv("PATH", str(home / "empty"))
    _, found, _ = checks(project)
    assert found["claude code"]["status"] == "warn"
    assert "finds no prose" in found["claude code"]["detail"]
    assert found["claude code"]["fix"].startswith("prose install-skill --claude-code")
    recorded = project.prose("install-skill", "--claude-code")
    assert recorded.exit_code == 0, recorded.output
    code, found, _ = checks(project)
    assert code == 0
    assert found["claude desktop"]["status"] == "ok"
    assert found["claude code"] == {
        "name": "claude code", "status": "ok", "fix": "",
        "detail": f"plugin openprose@openprose enabled; its server starts {PROSE}"}

    entry = json.loads(target.read_text())
    entry["mcpServers"]["openprose"]["command"] = str(home / "gone" / "prose")
    target.write_text(json.dumps(entry))
    (project.root / ".mcp.json").write_text(json.dumps(
        {"mcpServers": {"openprose": {"command": "prose", "args": ["serve"]}}}))
    _, found, _ = checks(project)
    assert found["claude desktop"]["status"] == "warn"
    assert "does not exist" in found["claude desktop"]["detail"]
    assert "server in .mcp.json" in found["claude code"]["detail"]


@pytest.fixture
def ascii_database(pg_url: str) -> Iterator[str]:
    """The URL of a SQL_ASCII database in the test cluster (what initdb makes with no
    locale), dropped after."""
    url = pg_url
    import psycopg

    name = f"ascii_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' "
                     "LC_CTYPE 'C' TEMPLATE template0")
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.mark.postgres
def test_a_database_not_in_utf8_is_refused_in_one_line(
        tmp_path: Path, ascii_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENPROSE_POSTGRES_URL", ascii_database)
    project = Project(tmp_path, "postgres")
    listed = project.prose("runs", "--state", "postgres", "--project", str(tmp_path))
    assert listed.exit_code != 0
    (line,) = listed.stderr.strip().splitlines()
    assert "has encoding SQL_ASCII, openprose needs UTF8" in line, line
    assert "Traceback" not in listed.output
    code, found, output = checks(project)
    assert code == 1 and found["postgresql"]["status"] == "fail"
    detail = found["postgresql"]["detail"]
    assert detail.startswith("PostgreSQL 1") and "SQL_ASCII" in detail, detail
    assert not re.search(r"(?<!\w)b'", output), output  # no bytes repr (names may end in b)


@pytest.mark.postgres
def test_doctor_names_the_postgres_version_as_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str) -> None:
    monkeypatch.setenv("OPENPROSE_POSTGRES_URL", pg_url)
    _, found, output = checks(Project(tmp_path, "filesystem"))
    assert found["postgresql"]["status"] == "ok"
    assert re.match(r"PostgreSQL \d+\.\d+ ", found["postgresql"]["detail"]), output
