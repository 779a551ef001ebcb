"""`prose update` on a workspace holding both runs the engine made (filesystem or SQLite) and
what an older OpenProse left: .prose/execution/ and .prose/state.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.cli.conftest import Project, run_id_of

PROGRAM = 'let research = session "Collect facts"\noutput summary = session "Summarize"\n'


def legacy(root: Path, *names: str) -> None:
    """Run directories in the older layout: variables/ and position.json."""
    for name in names:
        run = root / ".prose" / "execution" / name
        (run / "variables").mkdir(parents=True)
        (run / "variables" / "research.md").write_text(f"facts of {name}\n")
        (run / "position.json").write_text('{"statement": 2}')


def fits(text: str) -> None:
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "\x1b[" not in text


def test_update_moves_legacy_runs_beside_current_ones_without_clobbering(
        project: Project) -> None:
    run_id = run_id_of(project.run(PROGRAM))
    legacy(project.root, "run-20260103-143052-a7b3c9", run_id)  # the second name is taken
    before = sorted(p.name for p in (project.root / ".prose" / "runs" / run_id).iterdir())
    agents = project.root / ".prose" / "agents"
    if agents.is_dir():
        agents.rmdir()  # an older workspace has none

    result = project.prose("update", "--project", str(project.root))
    assert result.exit_code == 0, result.output
    fits(result.stdout)
    runs = project.root / ".prose" / "runs"
    assert (runs / "run-20260103-143052-a7b3c9" / "variables" / "research.md").read_text() \
        == "facts of run-20260103-143052-a7b3c9\n"
    moved = runs / f"{run_id}-legacy"
    assert (moved / "variables" / "research.md").read_text() == f"facts of {run_id}\n"
    assert sorted(p.name for p in (runs / run_id).iterdir()) == before  # untouched
    assert not (project.root / ".prose" / "execution").exists()
    assert (project.root / ".prose" / "agents").is_dir()
    assert f"moved .prose/execution/{run_id} to .prose/runs/{run_id}-legacy" in \
        " ".join(result.stdout.split())
    assert "created .prose/agents/" in result.stdout

    # The engine's run still reads as before; the legacy folders are not mistaken for runs.
    shown = project.prose("show", run_id, "--project", str(project.root))
    assert shown.exit_code == 0 and "completed" in shown.stdout
    listed = json.loads(project.prose("runs", "--json", "--project",
                                      str(project.root)).stdout)["runs"]
    assert [row["run_id"] for row in listed] == [run_id]

    again = project.prose("update", "--project", str(project.root))
    assert again.exit_code == 0 and again.stdout == "nothing to update: .prose/ is current\n"


def test_state_json_settings_move_to_env_and_no_value_is_printed(project: Project) -> None:
    project.run(PROGRAM)
    prose = project.root / ".prose"
    (prose / "state.json").write_text(json.dumps({
        "ANTHROPIC_API_KEY": "sk-ant-legacy-secret-42", "OPENPROSE_MODEL_SONNET": "m1",
        "OPENPROSE_POSTGRES_SCHEMA": "kept-from-env"}))
    (prose / ".env").write_text("OPENPROSE_POSTGRES_SCHEMA=mine")
    (prose / ".env").chmod(0o640)

    dry = project.prose("update", "--dry-run", "--json", "--project", str(project.root))
    assert dry.exit_code == 0
    plan = json.loads(dry.stdout)
    assert [c["action"] for c in plan["changes"]] == ["create", "settings", "remove"]
    assert (prose / "state.json").exists()  # a dry run changes nothing

    result = project.prose("update", "--project", str(project.root))
    assert result.exit_code == 0, result.output
    assert "sk-ant-legacy-secret-42" not in result.output + dry.output
    assert "copied ANTHROPIC_API_KEY, OPENPROSE_MODEL_SONNET from .prose/state.json" in \
        " ".join(result.stdout.split())
    assert not (prose / "state.json").exists()
    from openprose.state import read_env_file

    assert read_env_file(project.root) == {
        "OPENPROSE_POSTGRES_SCHEMA": "mine", "ANTHROPIC_API_KEY": "sk-ant-legacy-secret-42",
        "OPENPROSE_MODEL_SONNET": "m1"}
    assert os.stat(prose / ".env").st_mode & 0o777 == 0o640  # its mode is kept


def test_settings_that_cannot_become_env_lines_keep_the_file(tmp_path: Path) -> None:
    project = Project(tmp_path, "filesystem")
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / "state.json").write_text('{"models": {"a": 1}, "KEY": "v"}')
    result = project.prose("update", "--project", str(tmp_path))
    assert result.exit_code == 1
    assert ".prose/state.json holds models" in result.stderr
    assert (tmp_path / ".prose" / "state.json").exists()
    assert not (tmp_path / ".prose" / ".env").exists()  # nothing half-done
    assert "Traceback" not in result.output


def test_a_new_env_file_is_private(tmp_path: Path) -> None:
    project = Project(tmp_path, "filesystem")
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / "state.json").write_text('{"ANTHROPIC_API_KEY": " spaced "}')
    assert project.prose("update", "--project", str(tmp_path)).exit_code == 0
    env = tmp_path / ".prose" / ".env"
    assert env.stat().st_mode & 0o777 == 0o600
    from openprose.state import read_env_file

    assert read_env_file(tmp_path)["ANTHROPIC_API_KEY"] == " spaced "


def test_nothing_to_update_without_prose_and_refusals_are_clear(tmp_path: Path) -> None:
    project = Project(tmp_path, "filesystem")
    result = project.prose("update", "--project", str(tmp_path))
    assert result.exit_code == 0 and "nothing to update: no .prose/" in result.stdout
    assert not (tmp_path / ".prose").exists()
    legacy(tmp_path, "run-a")
    (tmp_path / ".prose" / "runs").write_text("not a directory")
    refused = project.prose("update", "--json", "--project", str(tmp_path))
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)["problems"][0].startswith(".prose/runs exists but is "
                                                                "not a directory")
    assert (tmp_path / ".prose" / "execution" / "run-a").is_dir()
