"""The documentation is checked like code: every ```prose block in docs/ compiles (or fails
with the code an ``<!-- expect: CODE -->`` line before it names), the tutorial's commands
print exactly what the tutorial shows, every setting the code reads is in the settings
reference, and the site builds with warnings as errors."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openprose.language import compile as compile_program
from openprose.state.config import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
EXPECT = re.compile(r"<!-- expect: ([EW]\d{3}) -->")


def _blocks(lang: str) -> list[tuple[Path, int, str, str | None]]:
    """(page, line, body, expected code) of each ```LANG fence, read line by line."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("```"):
                info, start = lines[i][3:].strip(), i
                i += 1
                while i < len(lines) and lines[i] != "```":
                    i += 1
                if info == lang:
                    expect = EXPECT.fullmatch(lines[start - 1]) if start else None
                    found.append((page, start + 1, "\n".join(lines[start + 1:i]) + "\n",
                                  expect[1] if expect else None))
            i += 1
    return found


PROSE = _blocks("prose")


def test_every_construct_has_an_example_in_the_docs() -> None:
    """Each kind of syntax node appears in some ```prose block that compiles."""
    from dataclasses import fields, is_dataclass

    from openprose.language import nodes

    seen: set[type] = set()

    def walk(node: object) -> None:
        if isinstance(node, nodes.Node):
            seen.add(type(node))
        if is_dataclass(node):
            for f in fields(node):
                walk(getattr(node, f.name))
        elif isinstance(node, tuple | list):
            for item in node:
                walk(item)

    for page, _, body, expected in PROSE:
        result = compile_program(body, str(page.relative_to(ROOT)), root=ROOT)
        if expected is None and result.program is not None:
            walk(result.program)
    kinds = {cls for cls in vars(nodes).values()
             if isinstance(cls, type) and issubclass(cls, nodes.Node) and cls is not nodes.Node}
    assert not {k.__name__ for k in kinds - seen}


@pytest.mark.parametrize(("page", "line", "body", "expected"), PROSE,
                         ids=[f"{p.relative_to(DOCS)}:{n}" for p, n, _, _ in PROSE])
def test_every_prose_block_compiles(page: Path, line: int, body: str,
                                    expected: str | None) -> None:
    result = compile_program(body, str(page.relative_to(ROOT)), root=ROOT)
    errors = [d.code for d in result.errors]
    if expected is None:
        assert result.ok, [d.format(body) for d in result.errors]
    else:
        codes = errors + [d.code for d in result.warnings]
        assert expected in codes, f"{page.name}:{line} expects {expected}, got {codes}"


TUTORIAL = [(body.splitlines()[0].removeprefix("$ "), "\n".join(body.splitlines()[1:]))
            for page, _, body, _ in _blocks("console") if page.name == "tutorial.md"]


def test_the_tutorial_shows_every_step() -> None:
    assert [cmd.split()[2] for cmd, _ in TUTORIAL] == [f"step{i}.prose" for i in range(1, 7)]


@pytest.mark.parametrize(("command", "shown"), TUTORIAL, ids=[c.split()[2] for c, _ in TUTORIAL])
def test_the_tutorial_prints_what_it_shows(tmp_path: Path, command: str, shown: str) -> None:
    shutil.copytree(DOCS / "tutorial", tmp_path, dirs_exist_ok=True)
    prose = Path(sys.executable).with_name("prose")
    args = [str(prose), *command.split()[1:]]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1"}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip("\n") == shown.rstrip("\n")


SETTING_NAME = re.compile(r"""["'](OPENPROSE_[A-Z_]+|ANTHROPIC_[A-Z_]+|DATABASE_URL)""")


def test_every_setting_the_code_reads_is_documented() -> None:
    documented = {s.name.split("<")[0] for s in SETTINGS}
    read = set()
    for path in (ROOT / "src" / "openprose").rglob("*.py"):
        read |= set(SETTING_NAME.findall(path.read_text(encoding="utf-8")))
    missing = {name for name in read
               if name not in documented and not any(name.startswith(d) for d in documented
                                                      if d.endswith("_"))
               and not any(d.startswith(name) for d in documented)}
    assert not missing, f"settings read but not in openprose.state.config.SETTINGS: {missing}"


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]')")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", "-d", str(tmp_path / "doctrees"), str(DOCS),
                           str(tmp_path / "html")], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:]
    html = (tmp_path / "html" / "reference" / "mcp.html").read_text(encoding="utf-8")
    assert "start_run" in html and "write_binding" in html
    cli = (tmp_path / "html" / "reference" / "cli.html").read_text(encoding="utf-8")
    assert "--max-concurrency" in cli


EXIT = re.compile(r"(?:sys\.exit|SystemExit)\((\d+)\)|fail\([^()]*(?:\([^()]*\)[^()]*)*,\s*(\d+)\)")


def test_every_exit_status_is_in_the_table() -> None:
    from openprose.cli.common import EXIT_CODES

    used = set()
    for path in [*(ROOT / "src/openprose/cli").glob("*.py"),
                 ROOT / "src/openprose/engine/runner.py"]:
        text = path.read_text(encoding="utf-8")
        if path.name == "runner.py":
            text = text[text.index("def exit_code"):text.index("def to_dict")]
            used |= {int(m) for m in re.findall(r"\b(\d+)\b", text)}
        else:
            used |= {int(a or b) for a, b in EXIT.findall(text)}
    assert used, "no exit status found: the scan is broken"
    assert used <= set(EXIT_CODES), used - set(EXIT_CODES)
