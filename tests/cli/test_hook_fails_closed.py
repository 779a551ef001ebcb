"""The plugin's permission hook fails closed: when deciding fails — `prose hook` crashes,
answers garbage, or its own check raises — a subagent's call is refused with the reason
(nothing checked it against the session's permissions); the main agent's is left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from openprose.cli import cli
from openprose.engine import host_hook

HOOK = Path(__file__).resolve().parents[2] / "skill" / "hooks" / "permissions.py"
SUBAGENT = {"hook_event_name": "PreToolUse", "agent_id": "a1", "tool_name": "Write",
            "tool_input": {"file_path": "/tmp/x", "content": "x"}, "cwd": "/tmp",
            "transcript_path": "/tmp/t.jsonl"}
MAIN = {key: value for key, value in SUBAGENT.items() if key != "agent_id"}


def _hook(tmp_path: Path, prose_body: str, event: dict | bytes) -> subprocess.CompletedProcess:
    """The plugin's hook script with a `prose` on PATH that does ``prose_body``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    prose = bin_dir / "prose"
    prose.write_text(f"#!/bin/sh\ncat >/dev/null\n{prose_body}\n")
    prose.chmod(0o755)
    data = event if isinstance(event, bytes) else json.dumps(event).encode()
    return subprocess.run([sys.executable, str(HOOK)], input=data, capture_output=True,
                          timeout=60, env={"PATH": f"{bin_dir}:/usr/bin:/bin",
                                           "HOME": str(tmp_path)})


def _verdict(out: bytes) -> tuple[str, str] | None:
    if not out.strip():
        return None
    answer = json.loads(out)["hookSpecificOutput"]
    return answer["permissionDecision"], answer["permissionDecisionReason"]


@pytest.mark.parametrize("body", [
    "printf 'Traceback (most recent call last):\\n  File x\\nImportError: no yaml\\n' >&2; exit 1",
    "echo 'not json at all'; exit 0",
    "kill -9 $$",
])
def test_a_subagents_call_is_refused_when_prose_hook_fails(tmp_path, body):
    done = _hook(tmp_path, body, SUBAGENT)
    assert done.returncode == 0, done.stderr
    verdict, reason = _verdict(done.stdout)
    assert verdict == "deny"
    assert "OpenProse could not check this call" in reason and "prose doctor" in reason
    assert b"Traceback" not in done.stdout


def test_the_main_agents_call_is_left_to_the_host_when_prose_hook_fails(tmp_path):
    done = _hook(tmp_path, "exit 1", MAIN)
    assert done.returncode == 0 and _verdict(done.stdout) is None


def test_the_main_agents_calls_do_not_start_prose(tmp_path):
    """The hook sees every tool call; the main agent's are never ours, so `prose` (seconds
    to start on a busy machine) is not run for them."""
    started = tmp_path / "started"
    done = _hook(tmp_path, f"touch {started}", MAIN)
    assert done.returncode == 0 and _verdict(done.stdout) is None
    assert not started.exists()
    _hook(tmp_path, f"touch {started}", SUBAGENT)
    assert started.exists()


def test_a_working_prose_hooks_answer_passes_through(tmp_path):
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                     "permissionDecision": "ask",
                                     "permissionDecisionReason": "bash: prompt"}}
    done = _hook(tmp_path, f"echo '{json.dumps(answer)}'", SUBAGENT)
    assert _verdict(done.stdout) == ("ask", "bash: prompt")
    silent = _hook(tmp_path, "exit 0", SUBAGENT)
    assert silent.returncode == 0 and _verdict(silent.stdout) is None


def test_prose_hook_refuses_a_subagents_call_when_its_check_raises(monkeypatch):
    def broken(payload, backends):
        raise OSError("disk gone")

    monkeypatch.setattr(host_hook, "decide", broken)
    for event, expected in ((SUBAGENT, "deny"), (MAIN, None)):
        done = CliRunner().invoke(cli, ["hook", "pre-tool-use"], input=json.dumps(event))
        assert done.exit_code == 0, done.output
        assert "Traceback" not in done.output
        got = _verdict(done.output.encode())
        assert (got[0] if got else None) == expected
        if got:
            assert "OSError: disk gone" in got[1]
