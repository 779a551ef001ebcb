"""Bringing an older ``.prose/`` workspace up to date (``prose update``).

Older OpenProse kept runs in ``.prose/execution/`` and settings in ``.prose/state.json``. Today
runs live in ``.prose/runs/``, project agents in ``.prose/agents/`` and settings in
``.prose/.env``. Every change is a rename or an atomic write, one at a time, so an update cut
short loses nothing and the next one finishes it; nothing that exists is ever overwritten.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from openprose.state.config import read_env_file
from openprose.state.files import atomic_write

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, slots=True)
class Change:
    """One step of an update: ``action`` is move, create, settings or remove."""

    action: str
    path: str
    target: str | None = None
    detail: str = ""

    def describe(self, *, dry_run: bool = False) -> str:
        verb = {"move": "move", "create": "create", "settings": "copy",
                "remove": "remove"}[self.action]
        verb = f"would {verb}" if dry_run else ("copied" if verb == "copy" else f"{verb}d")
        if self.action == "move":
            return f"{verb} {self.path} to {self.target}" + (
                f" ({self.detail})" if self.detail else "")
        if self.action == "settings":
            return f"{verb} {self.detail} from {self.path} to {self.target}"
        return f"{verb} {self.path}" + (f" ({self.detail})" if self.detail else "")


@dataclass(slots=True)
class UpdateReport:
    changes: list[Change] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def update_workspace(project_root: Path, *, dry_run: bool = False) -> UpdateReport:
    """Migrate ``project_root``'s ``.prose/``; with ``dry_run``, only say what would change."""
    report = UpdateReport()
    prose = project_root / ".prose"
    if not prose.is_dir() or prose.is_symlink():
        if prose.is_symlink():
            report.problems.append(".prose is a symbolic link; update the directory it points "
                                   "to by running prose update there")
        return report
    _move_runs(prose, report, dry_run)
    agents = prose / "agents"
    if not agents.exists() and not agents.is_symlink():
        report.changes.append(Change("create", ".prose/agents/"))
        if not dry_run:
            agents.mkdir()
    elif not agents.is_dir():
        report.problems.append(".prose/agents exists but is not a directory; move it aside "
                               "so project agents can be kept there")
    _retire_state_json(prose, report, dry_run)
    return report


def _move_runs(prose: Path, report: UpdateReport, dry_run: bool) -> None:
    legacy = prose / "execution"
    if legacy.is_symlink():
        report.problems.append(".prose/execution is a symbolic link; move the runs it points "
                               "to into .prose/runs/ yourself")
        return
    if not legacy.is_dir():
        return
    runs = prose / "runs"
    if runs.exists() and (runs.is_symlink() or not runs.is_dir()):
        report.problems.append(".prose/runs exists but is not a directory; move it aside, "
                               "then run prose update again")
        return
    if not runs.exists():
        report.changes.append(Change("create", ".prose/runs/"))
        if not dry_run:
            runs.mkdir()
    taken = {p.name for p in runs.iterdir()} if runs.is_dir() else set()
    for entry in sorted(legacy.iterdir()):
        name = _free_name(entry.name, taken)
        taken.add(name)
        target = runs / name
        note = "" if name == entry.name else f"{entry.name} was taken"
        report.changes.append(Change("move", f".prose/execution/{entry.name}",
                                     f".prose/runs/{name}", note))
        if not dry_run:
            _rename_new(entry, target)
    report.changes.append(Change("remove", ".prose/execution/", detail="now empty"))
    if not dry_run:
        legacy.rmdir()


def _free_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name-legacy``, ``name-legacy-2``… when a run already has it."""
    if name not in taken:
        return name
    candidate, n = f"{name}-legacy", 2
    while candidate in taken:
        candidate, n = f"{name}-legacy-{n}", n + 1
    return candidate


def _rename_new(source: Path, target: Path) -> None:
    """Rename, refusing a target that appeared meanwhile (a plain rename would replace an
    empty directory or a file there)."""
    if target.exists() or target.is_symlink():
        raise FileExistsError(f"{target} appeared while updating; run prose update again")
    os.rename(source, target)


def _retire_state_json(prose: Path, report: UpdateReport, dry_run: bool) -> None:
    """Carry ``state.json``'s settings into ``.env`` (keys ``.env`` lacks), then remove it.
    A file whose settings cannot all be carried over is left in place, with the reason."""
    path = prose / "state.json"
    if path.is_symlink() or not path.is_file():
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:
        report.problems.append(f".prose/state.json is not readable JSON ({type(err).__name__})"
                               "; copy any settings it holds into .prose/.env as KEY=value "
                               "lines, then delete it")
        return
    if not isinstance(data, dict):
        report.problems.append(".prose/state.json is not a JSON object; copy any settings it "
                               "holds into .prose/.env as KEY=value lines, then delete it")
        return
    existing = read_env_file(prose.parent)
    lines: list[str] = []
    carried: list[str] = []
    unfit: list[str] = []
    for key, value in data.items():
        line = _env_line(key, value)
        if line is None:
            unfit.append(key)
        elif key not in existing:
            lines.append(line)
            carried.append(key)
    if unfit:
        report.problems.append(
            f".prose/state.json holds {', '.join(sorted(unfit))}, which cannot become "
            ".prose/.env lines (not a NAME=text setting); move what you need by hand, then "
            "delete the file")
        return
    if carried:
        report.changes.append(Change("settings", ".prose/state.json", ".prose/.env",
                                     ", ".join(carried)))
        if not dry_run:
            _append_env(prose / ".env", lines)
    report.changes.append(Change("remove", ".prose/state.json",
                                 detail="settings now live in .prose/.env"))
    if not dry_run:
        path.unlink()


def _env_line(key: str, value: object) -> str | None:
    if not ENV_KEY.match(key) or isinstance(value, dict | list) or value is None:
        return None
    text = json.dumps(value) if isinstance(value, bool) else str(value)
    if "\n" in text or "\r" in text:
        return None
    quote = text != text.strip() or not text or (
        len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"")
    return f'{key}="{text}"' if quote else f"{key}={text}"


def _append_env(env: Path, lines: list[str]) -> None:
    """Append to ``.env`` atomically; a new file is readable by its owner only."""
    old = env.read_text(encoding="utf-8") if env.is_file() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    atomic_write(env, old + "\n".join(lines) + "\n", durable=True, private=True)
