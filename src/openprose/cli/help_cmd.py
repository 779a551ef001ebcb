"""``prose help [TOPIC]``: the language in brief, the commands, where state is kept, and
configuration; a command's name as TOPIC shows that command's help."""

from __future__ import annotations

from importlib.resources import files

import click

from openprose.cli.common import USAGE, console, emit_json, fail, json_option

TOPICS = {
    "language": "the language in brief",
    "commands": "every prose command in one line each",
    "state": "where runs are kept (filesystem, sqlite, postgres)",
    "config": "API key, models, prices, PostgreSQL settings",
}


def topic_text(topic: str) -> str:
    if topic == "commands":
        return _commands()
    return files(__package__).joinpath("topics", f"{topic}.md").read_text(encoding="utf-8")


def _commands() -> str:
    from openprose.cli import COMMANDS, cli

    ctx = click.Context(cli)
    lines = ["# Commands", ""]
    for name in sorted(COMMANDS):
        command = cli.get_command(ctx, name)
        summary = command.get_short_help_str(limit=56) if command else ""
        lines.append(f"- `prose {name}`: {summary}")
    lines += ["", "`prose help COMMAND` (or `prose COMMAND --help`) shows its options."]
    return "\n".join(lines) + "\n"


@click.command("help")
@click.argument("topic", required=False)
@json_option
@click.pass_context
def help_command(ctx: click.Context, topic: str | None, as_json: bool) -> None:
    """Explain a topic: language, commands, state, config (or a command's name)."""
    from openprose.cli import COMMANDS, cli

    if topic is None:
        if as_json:
            emit_json({"topics": TOPICS})
            return
        out = console()
        out.print("prose help TOPIC, where TOPIC is one of:\n")
        for name, what in TOPICS.items():
            out.print(f"  {name:<10} {what}")
        out.print("\nor a command's name (prose help run). Commands: "
                  + ", ".join(sorted(COMMANDS)), overflow="fold")
        return
    name = topic.lower()
    if name in TOPICS:
        text = topic_text(name)
    elif name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        with click.Context(command, info_name=f"prose {name}") as sub:
            text = command.get_help(sub) + "\n"
    else:
        fail("help", f"no help topic {topic!r}; topics: {', '.join(TOPICS)}, or a command "
                     f"({', '.join(sorted(COMMANDS))})", USAGE)
    if as_json:
        emit_json({"topic": name, "text": text})
        return
    out = console()
    if out.is_terminal and name in TOPICS:
        from rich.markdown import Markdown

        out.print(Markdown(text))
    else:
        click.echo(text, nl=False)
