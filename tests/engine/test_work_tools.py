"""Work tools under permissions: real files, real commands in the OS sandbox, every call
checked before it runs and recorded in the run's journal (scripted sessions make the calls)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

import pytest
from tests.conftest import PG_URL, no_sleep

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.permissions import Grants, Permissions, Policy, glob_regex
from openprose.engine.sandbox import detect
from openprose.engine.scripted import ScriptedProvider
from openprose.engine.work_tools import WorkSetup
from openprose.language import compile_or_raise
from openprose.state import open_store

needs_sandbox = pytest.mark.skipif(
    not detect().confined and not os.environ.get("CI"),
    reason="no OS sandbox here (install bubblewrap)")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "README.md").write_text("readme\n")
    (root / ".prose").mkdir()
    (root / ".prose" / ".env").write_text("ANTHROPIC_API_KEY=sk-secret-value\n")
    (tmp_path / "outside.txt").write_text("outside secret\n")
    return root


def _run(root: Path, source: str, script: dict, grants: Grants | None = None,
         consent=None, run_id: str | None = None):
    program = compile_or_raise(source, "p.prose")
    setup = WorkSetup(Policy(root, grants or Grants(), consent))
    job = runner.Job(source=source, file="p.prose", program=program, project_root=root,
                     run_id=run_id, options=Options(sleep=no_sleep, work=setup))
    provider = ScriptedProvider(script)
    return asyncio.run(runner.execute(job, provider)), provider


def _tools(root: Path, run_id: str) -> list[dict]:
    with open_store(root, "filesystem") as store:
        run = store.open_run(run_id)
        return [{"key": e.key, **e.meta} for e in run.tool_calls()]


def _session(tools: list, output: str | None = "done", match: str = ".") -> dict:
    rule: dict = {"match": match, "tools": tools}
    if output is not None:
        rule["output"] = output
    return rule


AGENTS = '''\
agent fixer:
  prompt: "fix"
  permissions:
    read: ["**"]
    write: ["src/**"]
    bash: allow

agent reviewer:
  prompt: "review"
  permissions:
    read: ["src/**", "*.md"]
    write: []
    bash: deny
'''


def test_permitted_read_write_edit_glob_grep_work_and_are_recorded(project):
    script = {"sessions": [_session([
        {"read": "src/app.py"},
        {"edit": {"file_path": "src/app.py", "old_string": "a - b", "new_string": "a + b"}},
        {"write": {"file_path": "src/new.py", "content": "X = 1\n"}},
        {"glob": "src/*.py"},
        {"grep": {"pattern": "return", "path": "src"}},
    ], output=None)]}
    outcome, _ = _run(project, AGENTS + 'output r = session: fixer\n  prompt: "go"\n', script)
    assert outcome.status == "completed", outcome.error
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (project / "src" / "new.py").read_text() == "X = 1\n"
    text = outcome.outputs["r"]
    assert "return a - b" in text and "src/app.py:2:    return a + b" in text
    assert "src/new.py" in text
    calls = _tools(project, outcome.run_id)
    assert [c["tool"] for c in calls] == ["read", "edit", "write", "glob", "grep"]
    assert all(c["allowed"] and c["agent"] == "fixer" for c in calls)
    assert calls[0]["subject"] == "src/app.py" and calls[0]["rule"] == "read: [**]"
    assert calls[0]["bytes"] > 0 and "duration_s" in calls[0]


def test_each_path_refusal_is_refused_and_recorded(project, tmp_path):
    (project / "src" / "link").symlink_to(tmp_path / "outside.txt")
    script = {"sessions": [_session([
        {"write": {"file_path": "README.md", "content": "x"}},            # outside globs
        {"write": {"file_path": ".prose/evil", "content": "x"}},          # .prose/
        {"read": ".prose/.env"},                                          # .prose/ secrets
        {"read": str(tmp_path / "outside.txt")},                          # absolute outside
        {"read": "../outside.txt"},                                       # ..
        {"write": {"file_path": "src/../../outside.txt", "content": "x"}},
        {"read": "src/link"},                                             # symlink
        {"write": {"file_path": "src/link", "content": "pwned"}},
    ])]}
    outcome, _ = _run(project, AGENTS + 'output r = session: fixer\n  prompt: "go"\n', script)
    assert outcome.status == "completed", outcome.error
    calls = _tools(project, outcome.run_id)
    assert not any(c["allowed"] for c in calls)
    rules = [c["rule"] for c in calls]
    assert rules == ["write: [src/**]", ".prose/ is never writable by a session",
                     ".prose/ is never readable by a session", "outside the project",
                     "'..' leads outside the project", "'..' leads outside the project",
                     "a symlink leads outside the project",
                     "a symlink leads outside the project"]
    assert (tmp_path / "outside.txt").read_text() == "outside secret\n"
    assert not (project / ".prose" / "evil").exists()
    assert (project / "README.md").read_text() == "readme\n"


def test_a_refusal_reaches_the_session_naming_agent_rule_and_path(project):
    script = {"sessions": [_session([{"write": {"file_path": "docs/x.md", "content": "x"}}],
                                    output=None)]}
    outcome, _ = _run(project, AGENTS + 'output r = session: reviewer\n  prompt: "go"\n',
                      script)
    assert "refused: agent 'reviewer' may not write docs/x.md" in outcome.outputs["r"]
    assert "(write: [])" in outcome.outputs["r"]


def test_grep_and_glob_leave_out_files_the_agent_may_not_read(project):
    (project / "notes.txt").write_text("return secret\n")
    script = {"sessions": [_session([{"grep": "return"}, {"glob": "*"}], output=None)]}
    outcome, _ = _run(project, AGENTS + 'output r = session: reviewer\n  prompt: "go"\n',
                      script)
    text = outcome.outputs["r"]
    assert "src/app.py:2" in text and "notes.txt" not in text and "secret" not in text
    assert "README.md" in text


@needs_sandbox
def test_a_permitted_command_runs_in_the_sandbox(project):
    script = {"sessions": [_session([{"bash": "echo made > src/out.txt && cat src/out.txt"}],
                                    output=None)]}
    outcome, _ = _run(project, AGENTS + 'output r = session: fixer\n  prompt: "go"\n', script)
    assert "made" in outcome.outputs["r"]
    assert (project / "src" / "out.txt").read_text() == "made\n"
    [call] = _tools(project, outcome.run_id)
    assert call["tool"] == "bash" and call["allowed"] and call["exit_code"] == 0
    assert call["rule"] == "bash: allow"


@needs_sandbox
def test_a_command_writing_outside_its_roots_fails_by_the_os(project, tmp_path):
    elsewhere = Path("/var/tmp") / f"openprose-escape-{os.getpid()}-{tmp_path.name}"
    script = {"sessions": [_session([
        {"bash": "echo x > README.md"},
        {"bash": f"echo x > {elsewhere}"},
        {"bash": "echo x > .prose/evil"},
        {"bash": "cat .prose/.env"},
        {"bash": "echo x > ../escaped.txt; cat ../outside.txt"},
        {"bash": "env"},
    ], output=None)]}
    outcome, _ = _run(project, AGENTS + 'output r = session: fixer\n  prompt: "go"\n', script)
    text = outcome.outputs["r"]
    try:
        assert not elsewhere.exists()
    finally:
        elsewhere.unlink(missing_ok=True)
    assert text.count("Read-only file system") == 3
    # /tmp is private to the command: the project's neighbours there are not even visible
    assert not (tmp_path / "escaped.txt").exists() and "outside secret" not in text
    assert not (project / ".prose" / "evil").exists()
    assert (project / "README.md").read_text() == "readme\n"
    assert "sk-secret-value" not in text and "ANTHROPIC" not in text
    codes = [c["exit_code"] for c in _tools(project, outcome.run_id)]
    assert codes[:5] == [1, 1, 1, 1, 1] and codes[5] == 0


@needs_sandbox
def test_a_command_gets_no_network_unless_allowed(project):
    probe = ("python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9), "
             "timeout=5)\"")
    script = {"sessions": [_session([{"bash": probe}], output=None)]}
    outcome, _ = _run(project, AGENTS + 'output r = session: fixer\n  prompt: "go"\n', script)
    # no network namespace of the host: not even loopback's listeners are reachable, and
    # the interface is down, so the connection fails at once
    assert "Network is unreachable" in outcome.outputs["r"] or \
        "Connection refused" in outcome.outputs["r"]
    [call] = _tools(project, outcome.run_id)
    assert call["exit_code"] != 0


def test_bash_denied_and_prompt_without_anyone_to_ask_are_refused(project):
    source = AGENTS + ('let a = session: reviewer\n  prompt: "one"\n'
                       'output b = session "two"\n')
    script = {"sessions": [_session([{"bash": "touch src/x"}], output=None)]}
    outcome, _ = _run(project, source, script)
    calls = _tools(project, outcome.run_id)
    assert [(c["agent"], c["rule"], c["allowed"]) for c in calls] == [
        ("reviewer", "bash: deny", False), ("(no agent)", "bash: prompt", False)]
    assert "OPENPROSE_ALLOW_BASH=1" in outcome.outputs["b"]
    assert "--allow-bash" in outcome.outputs["b"]
    assert not (project / "src" / "x").exists()


@needs_sandbox
def test_consent_yes_no_and_always(project):
    asked = []
    answers = iter(["no", "always"])

    def consent(request):
        asked.append((request.agent, request.subject, request.statement))
        return next(answers)

    source = ('agent helper:\n  prompt: "h"\n'
              'let a = session: helper\n  prompt: "one"\n'
              'let b = session: helper\n  prompt: "two"\n'
              'output c = session: helper\n  prompt: "three"\n')
    script = {"sessions": [_session([{"bash": "echo hi"}], output=None)]}
    outcome, _ = _run(project, source, script, consent=consent)
    assert outcome.status == "completed"
    assert len(asked) == 2  # the third session is covered by "always"
    assert asked[0][:2] == ("helper", "echo hi") and "session: helper" in asked[0][2]
    calls = _tools(project, outcome.run_id)
    assert [c["allowed"] for c in calls] == [False, True, True]
    assert calls[0]["rule"] == "bash: prompt, declined by the user"


def test_grants_allow_prompted_commands_but_not_denied_ones(project):
    policy = Policy(project, Grants(bash=True))
    gate = policy.gate("a", Permissions(bash="deny"))
    assert not asyncio.run(gate.command("ls")).allowed
    gate = policy.gate("a", None)
    assert asyncio.run(gate.command("ls")).allowed


def test_execute_patterns_vouch_only_for_simple_command_lines(project):
    gate = Policy(project).gate("t", Permissions(bash="deny", execute=("pytest*",)))
    assert asyncio.run(gate.command("pytest -q tests")).allowed
    for sneaky in ("pytest; rm -rf src", "pytest && curl x", "pytest $(rm x)", "ls"):
        assert not asyncio.run(gate.command(sneaky)).allowed, sneaky


def test_no_sandbox_means_no_command_without_the_opt_in(project, monkeypatch):
    from openprose.engine.sandbox import Sandbox

    script = {"sessions": [_session([{"bash": "touch src/x"}], output=None)]}
    source = AGENTS + 'output r = session: fixer\n  prompt: "go"\n'
    program = compile_or_raise(source, "p.prose")
    setup = WorkSetup(Policy(project), sandbox=Sandbox("none"))
    job = runner.Job(source=source, file="p.prose", program=program, project_root=project,
                     options=Options(sleep=no_sleep, work=setup))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(script)))
    assert "OPENPROSE_ALLOW_UNSANDBOXED_BASH=1" in outcome.outputs["r"]
    assert not (project / "src" / "x").exists()
    [call] = _tools(project, outcome.run_id)
    assert call["rule"] == "no OS sandbox" and not call["allowed"]


def test_session_permissions_override_the_agents_key_by_key(project):
    source = AGENTS + ('output r = session: reviewer\n  prompt: "go"\n'
                       '  permissions:\n    write: ["docs/**"]\n')
    script = {"sessions": [_session([{"write": {"file_path": "docs/a.md", "content": "A"}},
                                     {"bash": "ls"}])]}
    outcome, _ = _run(project, source, script)
    calls = _tools(project, outcome.run_id)
    assert calls[0]["allowed"] and (project / "docs" / "a.md").read_text() == "A"
    assert calls[1]["rule"] == "bash: deny"


def test_patterns_may_name_string_consts_and_interpolate(project):
    source = ('const DOCS = "docs/**"\nlet area = "src"\n'
              'agent w:\n  prompt: "w"\n  permissions:\n    write: [DOCS, "{area}/*.py"]\n'
              'output r = session: w\n  prompt: "go"\n')
    script = {"sessions": [_session([
        {"write": {"file_path": "docs/a.md", "content": "A"}},
        {"write": {"file_path": "src/b.py", "content": "B"}},
        {"write": {"file_path": "src/c.txt", "content": "C"}}])]}
    outcome, _ = _run(project, source, script)
    assert [c["allowed"] for c in _tools(project, outcome.run_id)] == [True, True, False]


def test_resume_does_not_repeat_a_finished_sessions_calls(project):
    source = ('agent w:\n  prompt: "w"\n  permissions:\n    write: ["src/**"]\n'
              'let a = session: w\n  prompt: "first"\n'
              'output b = session "second"\n')
    script = {"sessions": [
        _session([{"write": {"file_path": "src/log.txt", "content": "once"}}], match="first"),
        {"match": "second", "fail": 5, "error": "boom"}]}
    outcome, _ = _run(project, source, script)
    assert outcome.status == "failed"
    assert len(_tools(project, outcome.run_id)) == 1
    (project / "src" / "log.txt").write_text("changed since")
    again, _ = _run(project, source, {"sessions": [
        _session([{"write": {"file_path": "src/log.txt", "content": "twice"}}],
                 match="first"), {"match": "second", "output": "ok"}]},
        run_id=outcome.run_id)
    assert again.status == "completed" and again.reused == 1
    assert (project / "src" / "log.txt").read_text() == "changed since"
    assert len(_tools(project, outcome.run_id)) == 1


@pytest.mark.parametrize(("pattern", "path", "hit"), [
    ("src/**", "src/a/b.py", True), ("src/**", "srcx/a.py", False),
    ("**/*.md", "README.md", True), ("**/*.md", "docs/x/y.md", True),
    ("*.md", "docs/y.md", False), ("src", "src/a.py", True),
    ("src/*.py", "src/a/b.py", False), ("src/[ab].py", "src/b.py", True),
])
def test_glob_rules(pattern, path, hit):
    assert (glob_regex(pattern).match(path) is not None) is hit


def test_sandbox_is_bubblewrap_here_when_installed():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    assert detect().kind == "bubblewrap"


def test_prose_show_lists_each_sessions_calls_with_refusals_marked(project):
    import json
    import subprocess
    import sys

    script = {"sessions": [_session([
        {"read": "src/app.py"}, {"write": {"file_path": "README.md", "content": "x"}}])]}
    outcome, _ = _run(project, AGENTS + 'output r = session: fixer\n  prompt: "go"\n', script)
    prose = str(Path(sys.executable).with_name("prose"))
    shown = subprocess.run([prose, "show", outcome.run_id, "--project", str(project)],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "120"})
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "tool calls (2, 1 refused)" in text
    assert "line 14: output r = session: fixer  agent fixer" in text
    assert re.search(r"ok      read src/app.py  \d+B \(read: \[\*\*\]\)", text)
    assert "REFUSED write README.md  (write: [src/**])" in text
    data = json.loads(subprocess.run(
        [prose, "show", outcome.run_id, "--json", "--project", str(project)],
        capture_output=True, text=True, timeout=60).stdout)
    assert [(c["tool"], c["allowed"], c["session"]) for c in data["tool_calls"]] == [
        ("read", True, "2"), ("write", False, "2")]


def test_more_path_attacks_are_refused(project, tmp_path):
    """A NUL byte, a hard link to a file elsewhere, a link into .prose/, and .git/ (whose
    hooks would run on the user's next commit) unless a pattern names it."""
    (tmp_path / "victim.txt").write_text("victim\n")
    os.link(tmp_path / "victim.txt", project / "src" / "hard.txt")
    (project / "src" / "state").symlink_to(project / ".prose")
    (project / ".git" / "hooks").mkdir(parents=True)
    script = {"sessions": [_session([
        {"read": "src/app\x00.py"},
        {"write": {"file_path": "src/hard.txt", "content": "pwned"}},
        {"write": {"file_path": "src/state/evil", "content": "x"}},
        {"write": {"file_path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}},
    ])]}
    source = ('agent any:\n  prompt: "a"\n  permissions:\n    write: ["**"]\n'
              'output r = session: any\n  prompt: "go"\n')
    outcome, _ = _run(project, source, script)
    assert outcome.status == "completed", outcome.error
    rules = [c["rule"] for c in _tools(project, outcome.run_id)]
    assert rules[0].startswith("not a usable path: path 'src/app")
    assert rules[1:] == ["a hard link may lead outside the project",
                         ".prose/ is never writable by a session",
                         ".git runs code later: writable only when a write: pattern names it"]
    assert (tmp_path / "victim.txt").read_text() == "victim\n"
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
    named = ('agent git:\n  prompt: "g"\n  permissions:\n    write: [".git/hooks/**"]\n'
             'output r = session: git\n  prompt: "go"\n')
    outcome, _ = _run(project, named, {"sessions": [_session([
        {"write": {"file_path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}}])]})
    assert _tools(project, outcome.run_id)[0]["allowed"]


def test_grep_is_not_fooled_by_a_file_name_with_a_line_number(project):
    (project / "src" / "x:1:y.py").write_text("return 1\n")
    (project / "notes:2:z.txt").write_text("return secret\n")
    script = {"sessions": [_session([{"grep": "return"}], output=None)]}
    outcome, _ = _run(project, AGENTS + 'output r = session: reviewer\n  prompt: "go"\n',
                      script)
    text = outcome.outputs["r"]
    assert "src/x:1:y.py:1:return 1" in text and "secret" not in text


@needs_sandbox
def test_a_command_cannot_change_git_or_reach_run_and_is_killed_at_its_timeout(project):
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    # Only the command meant to be killed gets a short timeout (its own timeout_ms): under
    # the default one, the others finish however long a loaded machine takes to start them.
    setup = WorkSetup(Policy(project), result_cap=2000)
    script = {"sessions": [_session([
        {"bash": "echo x > .git/HEAD"},
        {"bash": "ls -A /run | wc -l"},
        {"bash": "head -c 100000 /dev/zero | tr '\\\\0' a"},
        {"bash": {"command": "sleep 600", "timeout_ms": 1000}},
    ], output=None)]}
    source = ('agent any:\n  prompt: "a"\n  permissions:\n    write: ["**"]\n    bash: allow\n'
              'output r = session: any\n  prompt: "go"\n')
    program = compile_or_raise(source, "p.prose")
    job = runner.Job(source=source, file="p.prose", program=program, project_root=project,
                     options=Options(sleep=no_sleep, work=setup))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(script)))
    text = outcome.outputs["r"]
    assert (project / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert "$ bash ls -A /run | wc -l\n0" in text
    assert "[... 98000 bytes of output omitted ...]" in text
    assert "[killed after 1 s]" in text
    calls = _tools(project, outcome.run_id)
    assert calls[0]["exit_code"] == 1 and calls[2]["bytes"] == 100000
    assert "exit_code" not in calls[3]  # killed: no exit status


@needs_sandbox
def test_a_command_sees_no_credentials_of_the_home(project):
    home = project / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (home / ".netrc").write_text("machine x password hunter2\n")
    setup = WorkSetup(Policy(project), env={"HOME": str(home), "PATH": os.environ["PATH"]})
    script = {"sessions": [_session([
        {"bash": "cat $HOME/.ssh/id_ed25519; cat $HOME/.netrc; ls -A $HOME/.ssh | wc -l"}],
        output=None)]}
    source = ('agent any:\n  prompt: "a"\n  permissions:\n    bash: allow\n'
              'output r = session: any\n  prompt: "go"\n')
    job = runner.Job(source=source, file="p.prose", program=compile_or_raise(source, "p.prose"),
                     project_root=project, options=Options(sleep=no_sleep, work=setup))
    text = asyncio.run(runner.execute(job, ScriptedProvider(script))).outputs["r"]
    assert "PRIVATE KEY" not in text and "hunter2" not in text
    assert text.rstrip().endswith("0")


def test_the_consent_question_shows_control_characters_escaped():
    from openprose.engine.permissions import shown

    assert shown("rm -rf src\r\x1b[2Kecho hi") == "rm -rf src\\x0d\\x1b[2Kecho hi"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=[
    pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason="needs "
                                             "OPENPROSE_TEST_POSTGRES_URL (scripts/pg-up)")])])
@pytest.mark.usefixtures("postgres_env")
def test_tool_calls_are_recorded_on_the_database_backends_too(project, backend):
    source = AGENTS + 'output r = session: fixer\n  prompt: "go"\n'
    script = {"sessions": [_session([{"read": "src/app.py"},
                                     {"write": {"file_path": "README.md", "content": "x"}}])]}
    job = runner.Job(source=source, file="p.prose", program=compile_or_raise(source, "p.prose"),
                     project_root=project, backend=backend,
                     options=Options(sleep=no_sleep, work=WorkSetup(Policy(project))))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(script)))
    with open_store(project, backend) as store:
        run = store.open_run(outcome.run_id)
        assert [(c.meta["tool"], c.status) for c in run.tool_calls()] == [
            ("read", "allowed"), ("write", "refused")]
        assert run.journal("2").status == "completed"  # the session's result is untouched


@needs_sandbox
def test_a_command_sees_no_database_passwords_keyrings_or_shell_history(project):
    """~/.pgpass (PostgreSQL's passwords, this product's own backend), a password store,
    keyrings and shell histories were readable by a command."""
    home = project / "home"
    places = [".pgpass", ".bash_history", ".password-store/bank.gpg",
              ".local/share/keyrings/login.keyring", ".cargo/credentials.toml"]
    for place in places:
        (home / place).parent.mkdir(parents=True, exist_ok=True)
        (home / place).write_text(f"SECRET-{place}\n")
    setup = WorkSetup(Policy(project), env={"HOME": str(home), "PATH": os.environ["PATH"]})
    command = "; ".join(f"cat $HOME/{place}" for place in places)
    script = {"sessions": [_session([{"bash": command}], output=None)]}
    source = ('agent any:\n  prompt: "a"\n  permissions:\n    bash: allow\n'
              'output r = session: any\n  prompt: "go"\n')
    job = runner.Job(source=source, file="p.prose", program=compile_or_raise(source, "p.prose"),
                     project_root=project, options=Options(sleep=no_sleep, work=setup))
    text = asyncio.run(runner.execute(job, ScriptedProvider(script))).outputs["r"]
    assert "SECRET-" not in text, text
