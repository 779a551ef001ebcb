"""``prose install-skill``: connect Claude Desktop, Claude Code, Codex CLI and other MCP clients to
``prose serve``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from openprose.cli.bundle import build_bundle
from openprose.cli.host_setup import (
    SERVER_NAME,
    HostSetupError,
    claude_code_lines,
    client_entries,
    codex_home,
    codex_table,
    desktop_config_path,
    install_codex,
    install_desktop,
    marketplace_root,
    prose_executable,
    record_for_plugin,
    server_entry,
)


@click.command("install-skill")
@click.option("--claude-desktop", "target", flag_value="desktop",
              help="Add the openprose server to Claude Desktop's claude_desktop_config.json "
                   "(other entries kept, a backup written first).")
@click.option("--bundle", "target", flag_value="bundle",
              help="Build openprose.mcpb, Claude Desktop's one-click bundle (it asks for the "
                   "project folder and the state backend).")
@click.option("--codex", "target", flag_value="codex",
              help="Add the openprose server to Codex CLI's config.toml (other settings kept, "
                   "a backup first) and the open-prose skill to its skills folder.")
@click.option("--claude-code", "target", flag_value="code",
              help="Print the 'claude plugin' and 'claude mcp add' lines for Claude Code, and "
                   "record this prose for the plugin's server to start.")
@click.option("--print", "target", flag_value="print", default=True,
              help="Print what every host needs and change nothing (the default).")
@click.option("--project", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default=True, help="Project the Claude Desktop server reads programs from "
                                      "and keeps runs in.")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
              help="Claude Desktop config file to edit (default: the platform's location).")
@click.option("--output", type=click.Path(path_type=Path), default=Path("openprose.mcpb"),
              show_default=True, help="Where --bundle writes the bundle (a file or a folder).")
def install_skill_command(target: str, project: Path, config: Path | None,
                          output: Path) -> None:
    """Connect a chat host to the OpenProse MCP server.

    Claude Desktop gets a one-click bundle (--bundle: open openprose.mcpb with Claude Desktop),
    or an 'openprose' entry under mcpServers with the absolute path of this prose executable;
    running it again changes nothing. Claude Code gets the plugin (skill,
    /prose command and server) through its marketplace, or the server alone.
    """
    try:
        if target == "bundle":
            built = build_bundle(output)
            click.echo(f"Built {built}: open it with Claude Desktop (Settings > Extensions, or "
                       "double-click) and choose the project folder and the state backend.")
            return
        executable = prose_executable()
        root = project.resolve()
        if not root.is_dir():
            raise HostSetupError(f"--project {project}: no such directory")
        entry = server_entry(executable, root)
        if target == "desktop":
            _desktop(config or desktop_config_path(), entry)
        elif target == "codex":
            _codex(codex_home(), codex_table(entry), marketplace_root())
        elif target == "code":
            marketplace = marketplace_root()
            click.echo("\n".join(claude_code_lines(executable, marketplace)))
            recorded = record_for_plugin(executable, marketplace)
            if recorded is not None:
                click.echo(f"# the plugin's server starts {executable} (recorded in {recorded})")
        else:
            _print_all(executable, entry, config or desktop_config_path())
    except (HostSetupError, OSError) as exc:
        click.echo(f"prose install-skill: {exc}", err=True)
        sys.exit(1)


def _desktop(config: Path, entry: dict) -> None:
    result = install_desktop(config, entry)
    if not result.changed:
        click.echo(f"Claude Desktop already has the '{SERVER_NAME}' server in {config}; "
                   "nothing changed.")
        return
    if result.backup:
        click.echo(f"Backed up {config} to {result.backup}")
    if result.replaced is not None:
        click.echo(f"Replaced the previous '{SERVER_NAME}' entry (kept in the backup).")
    click.echo(f"Added the '{SERVER_NAME}' server to {config}. Restart Claude Desktop to use it.")


def _codex(home: Path, table: str, marketplace: Path | None) -> None:
    result = install_codex(home, table, marketplace)
    if result.backup:
        click.echo(f"Backed up {result.config} to {result.backup}")
    if result.replaced:
        click.echo(f"Replaced the previous '{SERVER_NAME}' table (kept in the backup).")
    if result.changed:
        click.echo(f"Added the '{SERVER_NAME}' server to {result.config}.")
    else:
        click.echo(f"Codex CLI already has the '{SERVER_NAME}' server in {result.config}.")
    if result.skill is not None:
        click.echo(f"Copied the open-prose skill to {result.skill}.")
    click.echo("Start codex and type: prose run FILE")


def _print_all(executable: Path, entry: dict, config: Path) -> None:
    snippet = json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2)
    click.echo("Claude Desktop in one click: prose install-skill --bundle, then open "
               "openprose.mcpb with Claude Desktop.\n")
    click.echo(f"Claude Desktop without the bundle: merge this into {config}\n"
               f"(or run: prose install-skill --claude-desktop)\n\n{snippet}\n")
    click.echo("Claude Code:\n\n" + "\n".join(claude_code_lines(executable, marketplace_root())))
    for other in client_entries(entry):
        click.echo(f"\n{other.client}: merge this into {other.place}\n\n{other.snippet}")
    click.echo(f"\nAny other MCP client (stdio): {executable} serve --project {entry['args'][2]}")
