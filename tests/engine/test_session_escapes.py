"""Sessions stay inside their permissions however they try (issue 28): as root, through a
link, in a race between a check and its use, through a search's counts, through a
credential folder that is a link, through files other programs run later, and through the
sandbox's own building and unix sockets. Each case is a session's real tool calls (scripted)
on real files and real bubblewrap, as an attacker would make them."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from tests.conftest import no_sleep

from openprose.engine import runner
from openprose.engine.interpreter import Options
from openprose.engine.permissions import Grants, Permissions, Policy
from openprose.engine.sandbox import detect
from openprose.engine.scripted import ScriptedProvider
from openprose.engine.work_tools import WorkSetup
from openprose.language import compile_or_raise
from openprose.state import open_store

SECRET = "sk-ant-escape-0123456789"
needs_sandbox = pytest.mark.skipif(
    not detect().confined and not os.environ.get("CI"),
    reason="no OS sandbox here (install bubblewrap)")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the root cases run as root (CI does)")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for folder in ("src", "docs", ".prose", ".git"):
        (root / folder).mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / ".prose" / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    (root / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (tmp_path / "outside.txt").write_text("outside secret\n")
    return root


def _run(root: Path, permissions: str, tools: list, *, setup: WorkSetup | None = None):
    """One session of an agent with ``permissions`` (YAML lines) making ``tools``' calls:
    its output (each call and its result) and the journal's records of the calls."""
    source = (f'agent a:\n  prompt: "a"\n  permissions:\n{permissions}'
              'output r = session: a\n  prompt: "go"\n')
    job = runner.Job(source=source, file="p.prose", program=compile_or_raise(source, "p.prose"),
                     project_root=root,
                     options=Options(sleep=no_sleep, work=setup or WorkSetup(Policy(root))))
    outcome = asyncio.run(runner.execute(job, ScriptedProvider(
        {"sessions": [{"match": ".", "tools": tools}]})))
    assert outcome.status == "completed", outcome.error
    with open_store(root, "filesystem") as store:
        calls = [e.meta for e in store.open_run(outcome.run_id).tool_calls()]
    return outcome.outputs["r"], calls


# ---------------------------------------------------------------------- 1. as root


@needs_sandbox
@as_root
def test_as_root_a_command_has_no_capability_and_cannot_undo_its_confinement(project):
    """Inside bwrap, root kept every capability: it could unmount the mount hiding
    .prose/.env, unmount /proc to see other processes' environments, enter the host's
    network namespace, remount the project writable and write /proc/sys."""
    witness = subprocess.Popen(["sleep", "600"], env={"WITNESS_KEY": SECRET})
    try:
        text, calls = _run(project, '    write: ["docs/**"]\n    bash: allow\n'
                           '    network: deny\n', [
            {"bash": "grep CapEff /proc/self/status"},
            {"bash": "umount .prose/.env; cat .prose/.env"},
            {"bash": "umount -l /proc; cat /proc/*/environ | tr '\\0' '\\n' | grep WITNESS"},
            {"bash": f"cat /proc/{witness.pid}/environ"},
            {"bash": "nsenter --net=/proc/1/ns/net true && echo EN''TERED"},
            {"bash": "mount -o remount,rw,bind $PWD && echo x > src/evil"},
            {"bash": "echo 0 > /proc/sys/kernel/sysrq && echo WRO''TE"},
            {"bash": "unshare -r -m true && echo NES''TED"},
        ])
    finally:
        witness.kill()
        witness.wait()
    assert "CapEff:\t0000000000000000" in text
    assert SECRET not in text and "ENTERED" not in text and "WROTE" not in text
    assert "NESTED" not in text
    assert not (project / "src" / "evil").exists()
    assert [c["exit_code"] != 0 for c in calls] == [False] + [True] * 7


@as_root
def test_where_root_cannot_be_confined_commands_are_refused_saying_why(project, tmp_path,
                                                                        monkeypatch):
    """A bubblewrap that leaves root its capabilities (here a stand-in that runs the
    command as it is) must not pass for a sandbox."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a; do shift; case "$a" in /bin/bash|true) exec "$a" "$@";;'
                    ' esac; done\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    try:
        assert not detect(again=True).confined
        text, calls = _run(project, "    bash: allow\n", [{"bash": "echo ran > src/ran"}])
    finally:
        monkeypatch.undo()
        detect(again=True)
    assert not (project / "src" / "ran").exists() and not calls[0]["allowed"]
    assert "cannot confine commands here" in text and "--allow-unsandboxed-bash" in text


def test_doctor_says_how_commands_are_confined_as_this_user(project):
    from openprose.cli.doctor_cmd import check_sandbox

    check = check_sandbox(project)
    found = detect()
    if found.kind == "bubblewrap":
        who = "root" if os.geteuid() == 0 else "this user"
        assert check.status == "ok" and f"as {who}, every capability dropped" in check.detail
    else:
        assert check.status == "warn"


# ---------------------------------------------------------------------- 2. a linked root


@needs_sandbox
def test_a_write_root_that_is_a_link_leaving_the_project_is_not_bound(project, tmp_path):
    """``build -> /elsewhere`` (made by an earlier command, or committed in a clone): the
    write tool refused it, but a command's ``echo > build/x`` landed outside."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / "build").symlink_to(elsewhere)
    _, calls = _run(project, '    write: ["build/**"]\n    bash: allow\n', [
        {"bash": "echo x > build/x"},
        {"write": {"file_path": "build/y", "content": "y"}},
    ])
    assert list(elsewhere.iterdir()) == []
    assert calls[0]["exit_code"] != 0 and not calls[1]["allowed"]


# ---------------------------------------------------------------------- 3. the race


def test_a_link_swapped_in_between_check_and_use_is_never_followed(project, tmp_path):
    """A parallel writer flips ``docs/f`` between a file and a link to /proc/self/environ
    (or a file outside), and ``docs/w`` between a file and a link to .git/config, while a
    session reads and writes them: not one read may return what a link points at, and not
    one write may land through a link. Bounded by a count of calls, not by time."""
    docs = project / "docs"
    config = (project / ".git" / "config").read_text()
    targets = {"f": [Path("/proc/self/environ"), tmp_path / "outside.txt"],
               "w": [project / ".git" / "config", tmp_path / "outside.txt"]}
    stop = threading.Event()
    flips = [0]

    def swapper() -> None:
        while not stop.is_set():
            for name, links in targets.items():
                for target in links:
                    for make in (lambda p, t=target: p.symlink_to(t),
                                 lambda p: p.write_text("plain\n")):
                        spare = docs / f".{name}.spare"
                        spare.unlink(missing_ok=True)
                        make(spare)
                        os.replace(spare, docs / name)
                        flips[0] += 1

    (docs / "f").write_text("plain\n")
    (docs / "w").write_text("plain\n")
    records: list = []
    tools = WorkSetup(Policy(project)).tools(
        Policy(project).gate("racer", Permissions(write=("docs/**",))), records.append)
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    leaks = []

    async def calls() -> None:
        for i in range(300):
            text, _ = await tools.call("read", {"file_path": "docs/f"})
            if "PATH=" in text or "outside secret" in text:
                leaks.append(text[:80])
            await tools.call("write", {"file_path": "docs/w", "content": f"w{i}\n"})
            await tools.call("edit", {"file_path": "docs/w", "old_string": "plain",
                                      "new_string": "edited"})
    try:
        asyncio.run(calls())
    finally:
        stop.set()
        thread.join()
    assert leaks == []
    assert (project / ".git" / "config").read_text() == config
    assert (tmp_path / "outside.txt").read_text() == "outside secret\n"
    assert flips[0] > 0 and len(records) == 900
    # a call that met a link is recorded as refused, saying why (prose show lists it so);
    # a path that changed while it was resolved is no usable path
    assert {r.rule for r in records if not r.allowed
            and not r.rule.startswith("not a usable path")} <= {
        "a link appeared on the path after its check", "a symlink leads outside the project",
        ".git runs code later: writable only when a write: pattern names it",
        "read: [**]", "write: [docs/**]"}


# ---------------------------------------------------------------------- 4. grep as oracle


def test_a_search_filters_before_it_caps_and_counts_and_never_walks_prose(project):
    """Lines of unreadable files were dropped only after the search's 100 KiB cap was
    applied, so whether the cap was reached told whether a guess matched in .prose/.env or
    a file outside the read globs."""
    (project / "docs" / "a.md").write_text("needle in docs\n")
    (project / "private").mkdir()
    (project / "private" / "big.txt").write_text("needle hidden\n" * 10_000)
    (project / ".prose" / "big.txt").write_text("needle state\n" * 10_000)
    text, calls = _run(project, '    read: ["docs/**"]\n    write: []\n', [
        {"grep": {"pattern": "needle", "path": "."}},
        {"grep": {"pattern": "ANTHROPIC_API_KEY=sk-ant-e", "path": "."}},
    ])
    assert "docs/a.md:1:needle in docs" in text
    assert "truncated" not in text and "hidden" not in text and "state" not in text
    assert "more characters" not in text and SECRET not in text
    assert calls[0]["bytes"] == len("docs/a.md:1:needle in docs")
    assert calls[1]["bytes"] == len("no matches")


# ---------------------------------------------------------------------- 5. linked credentials


@needs_sandbox
def test_a_credential_folder_that_is_a_link_is_hidden_by_what_it_resolves_to(project):
    home = project / "home"  # not under /tmp, which is the command's own
    (home / "dotfiles" / "ssh").mkdir(parents=True)
    (home / "dotfiles" / "ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    (home / ".ssh").symlink_to(home / "dotfiles" / "ssh")
    (home / "dotfiles" / "aws").write_text("aws_secret_access_key=KEY\n")
    (home / ".aws").symlink_to(home / "dotfiles" / "aws")
    setup = WorkSetup(Policy(project), env={"HOME": str(home), "PATH": os.environ["PATH"]})
    text, _ = _run(project, "    bash: allow\n", [
        {"bash": "cat $HOME/.ssh/id_rsa $HOME/dotfiles/ssh/id_rsa $HOME/.aws "
                 "$HOME/dotfiles/aws"}], setup=setup)
    assert "PRIVATE KEY" not in text and "aws_secret" not in text


def test_the_file_tools_refuse_credential_places_unless_a_pattern_names_them(project):
    """Working in the home itself (``prose run`` in ``~``), ``read: ["**"]`` reached
    ``~/.ssh`` and the folder a credential link leads to."""
    (project / "dotfiles" / "aws").mkdir(parents=True)
    (project / "dotfiles" / "aws" / "credentials").write_text("aws_secret_access_key=K\n")
    (project / ".aws").symlink_to("dotfiles/aws")
    (project / ".ssh").mkdir()
    (project / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    setup = WorkSetup(Policy(project, home=project))
    text, calls = _run(project, '    read: ["**"]\n', [
        {"read": ".ssh/id_rsa"}, {"read": "dotfiles/aws/credentials"},
        {"grep": {"pattern": "KEY|secret", "path": "."}}], setup=setup)
    assert "PRIVATE KEY" not in text and "aws_secret" not in text
    assert [c["allowed"] for c in calls] == [False, False, True]
    assert calls[0]["rule"].endswith(".ssh holds credentials: only a pattern naming it "
                                     "reaches it")
    named, calls = _run(project, '    read: [".ssh/**"]\n', [{"read": ".ssh/id_rsa"}],
                        setup=setup)
    assert "PRIVATE KEY" in named and calls[0]["allowed"]


# ---------------------------------------------------------------------- 6. code run later


RUN_LATER = [".claude/settings.json", ".mcp.json", ".envrc", ".vscode/tasks.json",
             ".github/workflows/ci.yml", ".git/config", "sub/.envrc", ".idea/workspace.xml",
             ".pre-commit-config.yaml", ".claude/hooks/x.sh"]


def test_files_that_run_code_later_are_not_written_with_default_permissions(project):
    _, calls = _run(project, "    read: [\"**\"]\n", [
        {"write": {"file_path": place, "content": "evil"}} for place in RUN_LATER])
    assert not any(c["allowed"] for c in calls)
    assert {c["rule"].split(" runs code later")[0] for c in calls} >= {".envrc", ".git"}
    assert not any((project / place).exists() for place in RUN_LATER if place != ".git/config")
    _, calls = _run(project, '    write: [".claude/**", ".github/workflows/**"]\n', [
        {"write": {"file_path": ".claude/settings.json", "content": "{}"}},
        {"write": {"file_path": ".github/workflows/ci.yml", "content": "on: push\n"}},
        {"write": {"file_path": ".mcp.json", "content": "{}"}}])
    assert [c["allowed"] for c in calls] == [True, True, False]


@needs_sandbox
def test_a_command_cannot_change_files_that_run_code_later(project):
    (project / ".envrc").write_text("export A=1\n")
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text("{}\n")
    (project / "config").mkdir()
    (project / "config" / "mcp.json").write_text("{}\n")
    (project / ".mcp.json").symlink_to("config/mcp.json")
    _, calls = _run(project, '    write: ["**"]\n    bash: allow\n', [
        {"bash": "echo evil >> .envrc"},
        {"bash": "echo evil > .claude/settings.json"},
        {"bash": "mv .claude c2 && mkdir .claude && echo evil > .claude/settings.json"},
        {"bash": "echo evil > .mcp.json"},
        {"bash": "echo fine > src/ok.txt"},
    ])
    assert (project / ".envrc").read_text() == "export A=1\n"
    assert (project / ".claude" / "settings.json").read_text() == "{}\n"
    assert (project / "config" / "mcp.json").read_text() == "{}\n"
    assert [c["exit_code"] != 0 for c in calls] == [True, True, True, True, False]


# ---------------------------------------------------------------------- also


@needs_sandbox
def test_building_the_sandbox_never_raises_out_of_the_work_tools(project):
    """A credential place that cannot be checked (here a HOME longer than a path may be;
    as a user, one in a folder they may not search) raised out of the tools."""
    home = "/" + "/".join(["h" * 200] * 21)
    setup = WorkSetup(Policy(project, Grants(bash=True)), env={"HOME": home,
                                                              "PATH": os.environ["PATH"]})
    records: list = []
    tools = setup.tools(setup.policy.gate("a", Permissions()), records.append)
    text, failed = asyncio.run(tools.call("bash", {"command": "echo ran"}))
    assert (text.strip(), failed) == ("ran", False)


@needs_sandbox
def test_unix_sockets_are_unreachable_without_the_network(project):
    path = project / "db.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    probe = (f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
             f"s.connect('{path}'); print('CONN' + 'ECTED')\"")
    try:
        denied, _ = _run(project, "    bash: allow\n    network: deny\n", [{"bash": probe}])
        allowed, _ = _run(project, "    bash: allow\n    network: allow\n", [{"bash": probe}])
    finally:
        server.close()
    assert "CONNECTED" not in denied and "Permission denied" in denied
    assert "CONNECTED" in allowed
