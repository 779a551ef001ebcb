"""A program compiled for a project (``compile(..., root=...)``, as the MCP server does)
imports only files of that project, found from the program's own place in it — never from the
working directory of whoever compiles it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openprose.language import compile

CHILD = 'input topic: "t"\noutput findings = session "Find {topic}"\n'
CALL = 'output x = c(topic: "a").findings\n'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "child.prose").write_text(CHILD)
    (tmp_path / "outside.prose").write_text(CHILD)
    return root


@pytest.mark.parametrize(("file", "target"), [
    ("lib/main.prose", "../../outside.prose"), ("main.prose", "../outside.prose"),
    (None, "../outside.prose"), ("lib/main.prose", "ABS")])
def test_a_use_leaving_the_project_is_E034(project, file, target):
    target = str(project.parent / "outside.prose") if target == "ABS" else target
    source = f'use "{target}" as c\n{CALL}'
    result = compile(source, file, root=project)
    assert [d.code for d in result.errors] == ["E034"]
    assert "outside" in result.errors[0].message
    # without a project (the command line's own files) the same program compiles
    assert compile(source, str(project / (file or "main.prose"))).ok


def test_a_link_out_of_the_project_is_E034(project):
    (project / "lib" / "out.prose").symlink_to(project.parent / "outside.prose")
    result = compile(f'use "./out.prose" as c\n{CALL}', "lib/main.prose", root=project)
    assert [d.code for d in result.errors] == ["E034"]


def test_imports_resolve_from_the_programs_place_not_the_working_directory(
        project, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # a child.prose in the working directory with another contract must not be read
    (elsewhere / "child.prose").write_text('input other: "o"\noutput y = "z"\n')
    monkeypatch.chdir(elsewhere)
    good = compile(f'use "./child.prose" as c\n{CALL}', "lib/main.prose", root=project)
    assert good.ok, [d.message for d in good.diagnostics]
    inline = compile(f'use "./lib/child.prose" as c\n{CALL}', None, root=project)
    assert inline.ok, [d.message for d in inline.diagnostics]
    # the contract read is the project's: an unknown input is reported against it
    wrong = compile('use "./child.prose" as c\noutput x = c(other: "a").findings\n',
                    "lib/main.prose", root=project)
    assert not wrong.ok
    assert os.getcwd() == str(elsewhere)
