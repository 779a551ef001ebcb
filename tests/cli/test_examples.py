"""The bundled examples: together they use every construct of the language, each compiles
cleanly, and each runs to completion on the scripted provider through `prose examples`."""

from __future__ import annotations

import dataclasses
import json

import pytest
from tests.cli.conftest import Project

from openprose import examples
from openprose.language import compile as compile_program
from openprose.language import nodes as n

NOT_SYNTAX = {"Node", "Span", "Program"}


def _node_types(node: object, found: set[str]) -> None:
    if isinstance(node, n.Node):
        found.add(type(node).__name__)
    if dataclasses.is_dataclass(node):
        for item in dataclasses.fields(node):
            _node_types(getattr(node, item.name), found)
    elif isinstance(node, tuple | list):
        for item in node:
            _node_types(item, found)


def test_the_examples_use_every_construct_and_compile_cleanly() -> None:
    every = {name for name, value in vars(n).items()
             if isinstance(value, type) and issubclass(value, n.Node)} - NOT_SYNTAX
    used: set[str] = set()
    for example in examples.all_examples():
        result = compile_program(example.source, example.file)
        assert result.ok and not result.diagnostics, (example.file, result.diagnostics)
        _node_types(result.program, used)
        assert example.title and example.constructs and example.script
    assert every - used == set()
    assert [e.number for e in examples.all_examples()] == list(
        range(1, len(examples.all_examples()) + 1))


def test_find_by_number_name_and_keyword() -> None:
    assert examples.find("1").name == "hello"
    assert examples.find("01-hello").number == 1
    assert examples.find("pmap").name == "pipelines"
    with pytest.raises(LookupError, match="no example matches"):
        examples.find("nothing-like-this")
    with pytest.raises(LookupError, match="several examples"):
        examples.find("session")


@pytest.mark.parametrize("example", examples.all_examples(), ids=lambda e: e.name)
def test_each_example_runs_on_the_scripted_provider(project: Project, example) -> None:
    result = project.prose("examples", example.name, "--json", "--state", project.backend,
                           "--project", str(project.root))
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "completed" and outcome["sessions"] > 0


@pytest.mark.parametrize("backend", ["filesystem"])  # listing touches no run state
def test_listing_fits_80_columns_and_has_json(project: Project) -> None:
    listed = project.prose("examples")
    assert listed.exit_code == 0
    assert all(len(line) <= 80 for line in listed.stdout.splitlines())
    data = json.loads(project.prose("examples", "--json").stdout)["examples"]
    assert len(data) == len(examples.all_examples()) and data[0]["name"] == "hello"
    source = project.prose("examples", "hello", "--source").stdout
    assert source == examples.find("hello").source


@pytest.mark.parametrize("backend", ["filesystem"])  # listing touches no run state
def test_an_unknown_example_is_a_usage_error(project: Project) -> None:
    """Not found exits 2, as `prose resume` and `prose show` of an unknown run do."""
    for query in ("nothing-like-this", "session"):  # no match; several
        result = project.prose("examples", query, "--project", str(project.root))
        assert result.exit_code == 2, (query, result.output)
        assert "Traceback" not in result.output
