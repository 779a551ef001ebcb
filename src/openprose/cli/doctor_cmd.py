"""``prose doctor``: check that this installation and project can run programs, and say how
to fix what cannot. No check prints a secret: the API key and database passwords are only
ever reported as present or absent."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import click

from openprose.cli.common import console, emit_json, json_option, plain, project_option

MIN_SQLITE = (3, 24, 0)  # upserts (ON CONFLICT ... DO UPDATE)
STYLE = {"ok": "green", "warn": "yellow", "fail": "red bold"}


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # ok, warn (works, but something is missing) or fail
    detail: str
    fix: str = ""


def check_python() -> Check:
    """Reported for the record: openprose does not install on a Python older than 3.11."""
    version = ".".join(map(str, sys.version_info[:3]))
    return Check("python", "ok", f"Python {version} ({sys.executable})")


def check_packages() -> Check:
    """openprose and each declared dependency: installed, at a version it accepts."""
    from packaging.requirements import Requirement

    try:
        own = metadata.version("openprose")
        declared = metadata.requires("openprose") or []
    except metadata.PackageNotFoundError:
        return Check("packages", "fail", "openprose is not installed as a package",
                     "pip install openprose (or pip install -e . in a checkout)")
    problems = []
    count = 0
    for text in declared:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an optional extra (tests)
        count += 1
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{requirement.name} missing")
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            problems.append(f"{requirement.name} {installed} (needs {requirement.specifier})")
    if problems:
        return Check("packages", "fail", f"openprose {own}: " + "; ".join(problems),
                     "pip install --upgrade openprose")
    return Check("packages", "ok", f"openprose {own}; {count} dependencies at accepted "
                                   "versions")


def check_api_key(root: Path) -> Check:
    from openprose.state import read_env_file
    from openprose.state.config import untrusted_env_keys

    if read_env_file(root).get("ANTHROPIC_API_KEY"):
        if "ANTHROPIC_API_KEY" in untrusted_env_keys(root):
            return Check("api key", "fail", "ANTHROPIC_API_KEY in .prose/.env is ignored: the "
                         "file is committed to git (a key in a repository is its author's, "
                         "and public)", "export ANTHROPIC_API_KEY, untrack the file (git rm "
                         "--cached .prose/.env) and revoke the committed key")
        where = ".prose/.env"
    elif os.environ.get("ANTHROPIC_API_KEY"):
        where = "the environment"
    else:
        return Check("api key", "warn", "ANTHROPIC_API_KEY is not set: prose run "
                     "--provider anthropic cannot call the model (hosts driving prose "
                     "serve and --provider scripted need no key)",
                     "add ANTHROPIC_API_KEY=... to .prose/.env (git-ignored) or export it")
    return Check("api key", "ok", f"ANTHROPIC_API_KEY is set (in {where}; value not shown)")


def check_postgres(root: Path) -> Check:
    from openprose.state import postgres_schema, postgres_url
    from openprose.state.config import postgres_scrubbed, postgres_shown

    url = postgres_url(root)
    if not url:
        return Check("postgresql", "ok", "not configured (optional: set "
                                         "OPENPROSE_POSTGRES_URL for --state postgres)")
    import psycopg

    from openprose.state.backends.postgres import encoding_problem

    try:
        with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
            # as the server announced it: text whatever the database's encoding
            version = conn.info.parameter_status("server_version") or "?"
            problem = encoding_problem(conn)
    except Exception as err:  # any driver error is this check's answer
        message = postgres_scrubbed(" ".join(str(err).split()), url)
        return Check("postgresql", "fail", f"cannot connect to {postgres_shown(url)}: {message}",
                     "start the server or fix OPENPROSE_POSTGRES_URL (.prose/.env or the "
                     "environment)")
    if problem is not None:
        return Check("postgresql", "fail",
                     f"PostgreSQL {version} at {postgres_shown(url)}: {problem}",
                     "point OPENPROSE_POSTGRES_URL at a UTF8 database")
    return Check("postgresql", "ok", f"PostgreSQL {version} at {postgres_shown(url)}, schema "
                                     f"{postgres_schema(root)}")


def check_sqlite(root: Path) -> Check:
    version = sqlite3.sqlite_version
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        return Check("sqlite", "fail", f"SQLite {version} is older than 3.24",
                     "use a Python built with a newer SQLite")
    where = root / ".prose" if (root / ".prose").is_dir() else root
    try:
        with tempfile.TemporaryDirectory(dir=where, prefix=".doctor-") as scratch:
            conn = sqlite3.connect(Path(scratch) / "wal.db")
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            finally:
                conn.close()
    except (OSError, sqlite3.Error) as err:
        return Check("sqlite", "warn", f"SQLite {version}; WAL not tested in {where}: {err}",
                     "make .prose/ writable (see the write access check)")
    if mode != "wal":
        return Check("sqlite", "fail", f"SQLite {version} cannot use WAL in {where} "
                     f"(journal mode stays {mode}; a network filesystem?)",
                     "keep the project on a local disk, or use --state filesystem")
    return Check("sqlite", "ok", f"SQLite {version}, WAL works in {_short(where, root)}")


def check_writable(root: Path) -> Check:
    prose = root / ".prose"
    if prose.exists() and not prose.is_dir():
        return Check("write access", "fail", f"{prose} is not a directory, so no run can be "
                     "kept there", f"move {prose} aside")
    target = prose if prose.is_dir() else root
    try:
        with tempfile.NamedTemporaryFile(dir=target, prefix=".doctor-"):
            pass
    except OSError as err:
        return Check("write access", "fail", f"cannot write in {target}: {err.strerror}",
                     f"give your user write access: chmod u+w {target}")
    if target is root:
        return Check("write access", "ok", "no .prose/ yet; the project directory is "
                                           "writable, so the first run can create it")
    return Check("write access", "ok", ".prose/ is writable")


def check_env_ignored(root: Path) -> Check:
    env = root / ".prose" / ".env"
    if not env.exists():
        return Check(".env", "ok", "no .prose/.env (settings come from the environment)")
    git = _git(root, "rev-parse", "--is-inside-work-tree")
    if git is None:
        return Check(".env", "warn", ".prose/.env exists; git is not installed, so whether "
                     "it is ignored is unknown", "keep .prose/.env out of version control")
    if git.returncode != 0:
        return Check(".env", "ok", ".prose/.env exists; the project is not a git "
                                   "repository")
    tracked = _git(root, "ls-files", "--error-unmatch", ".prose/.env")
    if tracked is not None and tracked.returncode == 0:
        from openprose.state import untrusted_env_keys

        ignored = untrusted_env_keys(root)
        note = f"; its {', '.join(ignored)} are ignored (set them in the environment)" \
            if ignored else ""
        return Check(".env", "fail", ".prose/.env is committed to git: its secrets are in "
                     f"the history{note}", "git rm --cached .prose/.env, add it to "
                     ".gitignore, and rotate the keys it held")
    ignored = _git(root, "check-ignore", "-q", ".prose/.env")
    if ignored is not None and ignored.returncode == 0:
        return Check(".env", "ok", ".prose/.env is git-ignored")
    return Check(".env", "fail", ".prose/.env is not git-ignored: a commit could publish "
                 "its secrets", "add the line .prose/.env to .gitignore")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    from openprose.state.config import run_git

    try:
        return run_git(root, *args, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None


def check_sandbox(root: Path) -> Check:
    """Which OS sandbox confines sessions' shell commands (and what happens without one)."""
    from openprose.engine.permissions import ALLOW_UNSANDBOXED, Grants
    from openprose.engine.sandbox import detect
    from openprose.state import settings

    found = detect()
    if found.confined:
        return Check("sandbox", "ok", f"shell commands of sessions run in {found.describe()}")
    if Grants.from_settings(settings(root)).unsandboxed:
        return Check("sandbox", "warn", f"no OS sandbox; {ALLOW_UNSANDBOXED} lets permitted "
                     "shell commands run unconfined",
                     "install bubblewrap (Linux: apt-get install bubblewrap)")
    if found.reason:
        return Check("sandbox", "warn", found.reason)
    return Check("sandbox", "warn", "no OS sandbox: sessions' shell commands are refused",
                 "install bubblewrap (Linux: apt-get install bubblewrap), or allow "
                 "unconfined commands with --allow-unsandboxed-bash")


def check_claude_desktop() -> Check:
    from openprose.cli.host_setup import SERVER_NAME, desktop_config_path

    config = desktop_config_path()
    fix = "prose install-skill --claude-desktop"
    if not config.is_file():
        return Check("claude desktop", "warn", f"not configured for openprose (no {config})",
                     fix)
    try:
        servers = json.loads(config.read_text(encoding="utf-8")).get("mcpServers") or {}
        entry = servers.get(SERVER_NAME)
    except (ValueError, OSError, AttributeError) as err:
        return Check("claude desktop", "warn", f"cannot read {config}: {err}",
                     "fix the file's JSON, then " + fix)
    if not isinstance(entry, dict):
        return Check("claude desktop", "warn", f"{config} has no '{SERVER_NAME}' server", fix)
    command = str(entry.get("command", ""))
    if not Path(command).is_file():
        return Check("claude desktop", "warn", f"the '{SERVER_NAME}' server in {config} "
                     f"starts {command or 'nothing'}, which does not exist", fix)
    return Check("claude desktop", "ok", f"'{SERVER_NAME}' server configured in {config}")


def check_claude_code(root: Path) -> Check:
    """The plugin enabled, or the server registered (user, local or project scope)."""
    from openprose.cli.host_setup import (
        PLUGIN_ID,
        SERVER_NAME,
        HostSetupError,
        marketplace_root,
        plugin_launcher,
    )

    home = Path.home()
    found = []
    for settings in (home / ".claude" / "settings.json", root / ".claude" / "settings.json"):
        if (_json_file(settings).get("enabledPlugins") or {}).get(PLUGIN_ID):
            found.append(f"plugin {PLUGIN_ID} enabled")
            break
    user = _json_file(home / ".claude.json")
    if SERVER_NAME in (user.get("mcpServers") or {}):
        found.append("server added for this user")
    project = (user.get("projects") or {}).get(str(root)) or {}
    if SERVER_NAME in (project.get("mcpServers") or {}):
        found.append("server added for this project")
    if SERVER_NAME in (_json_file(root / ".mcp.json").get("mcpServers") or {}):
        found.append("server in .mcp.json")
    if not found:
        return Check("claude code", "warn", "not configured for openprose",
                     "prose install-skill --claude-code prints the lines to run")
    marketplace = marketplace_root()
    if f"plugin {PLUGIN_ID} enabled" in found and marketplace is not None:
        try:
            started = plugin_launcher(marketplace).find_prose()
        except (HostSetupError, OSError) as err:
            return Check("claude code", "warn", f"cannot load the plugin's launcher: {err}")
        if started is None:
            return Check("claude code", "warn", f"plugin {PLUGIN_ID} enabled, but its server "
                         "finds no prose (it can only say how to install it)",
                         "prose install-skill --claude-code (records this prose for it)")
        found.append(f"its server starts {started}")
    return Check("claude code", "ok", "; ".join(found))


def _json_file(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def _short(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root)) + "/"
    except ValueError:
        return str(path)


def run_checks(root: Path) -> list[Check]:
    checks: list[Callable[[], Check]] = [
        check_python, check_packages, lambda: check_api_key(root),
        lambda: check_postgres(root), lambda: check_sqlite(root),
        lambda: check_writable(root), lambda: check_env_ignored(root),
        lambda: check_sandbox(root), check_claude_desktop, lambda: check_claude_code(root)]
    return [check() for check in checks]


@click.command("doctor")
@json_option
@project_option
def doctor_command(as_json: bool, project: Path) -> None:
    """Check Python, packages, API key, PostgreSQL, SQLite, .prose/ and hosts.

    Each check passes or says how to fix it; the exit code is 1 when any check fails
    (warnings do not fail). Secrets are reported as set or not set, never shown.
    """
    root = project.resolve()
    if not root.is_dir():
        click.echo(f"prose doctor: --project {project}: no such directory", err=True)
        raise SystemExit(1)
    checks = run_checks(root)
    failed = [check for check in checks if check.status == "fail"]
    if as_json:
        emit_json({"project": str(root), "ok": not failed,
                   "checks": [asdict(check) for check in checks]})
    else:
        from rich.table import Table

        out = console()
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True)
        table.add_column(overflow="fold")
        for check in checks:
            text = f"{check.name}: {plain(check.detail)}"
            if check.fix:
                text += f"\n[bold]fix:[/] {plain(check.fix)}"
            table.add_row(f"[{STYLE[check.status]}]{check.status}[/]", text)
        out.print(table)
        warned = sum(check.status == "warn" for check in checks)
        out.print(f"\n{len(checks) - len(failed) - warned} ok, {warned} warning(s), "
                  f"{len(failed)} failed")
    if failed:
        raise SystemExit(1)
