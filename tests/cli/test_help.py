"""`prose help`: topics, command help, JSON, 80 columns, and a clear refusal."""

from __future__ import annotations

import json

from click.testing import CliRunner

from openprose.cli import COMMANDS, cli


def prose(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_every_topic_prints_and_fits_80_columns() -> None:
    listing = json.loads(prose("help", "--json").stdout)["topics"]
    assert set(listing) == {"language", "commands", "state", "config"}
    for topic in listing:
        result = prose("help", topic)
        assert result.exit_code == 0 and result.stdout.startswith("# ")
        assert all(len(line) <= 80 for line in result.stdout.splitlines()), topic
    commands = prose("help", "commands").stdout
    assert all(f"`prose {name}`" in commands for name in COMMANDS)
    assert "ANTHROPIC_API_KEY" in prose("help", "config").stdout


def test_a_command_name_shows_its_options() -> None:
    result = prose("help", "show")
    assert result.exit_code == 0 and result.stdout.startswith("Usage: prose show")
    assert "--json" in result.stdout


def test_an_unknown_topic_is_refused_with_the_choices() -> None:
    result = prose("help", "nonsense")
    assert result.exit_code == 2
    assert "no help topic 'nonsense'" in result.stderr and "language" in result.stderr
