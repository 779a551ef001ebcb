"""The ``prose`` command. Each subcommand lives in its own module and is loaded lazily,
so ``prose compile`` never imports the engine, the MCP SDK or database drivers."""

from __future__ import annotations

import importlib

import click

# subcommand name -> "module:attribute"
COMMANDS = {
    "compile": "openprose.cli.compile_cmd:compile_command",
    "run": "openprose.cli.run_cmd:run_command",
    "resume": "openprose.cli.run_cmd:resume_command",
    "export": "openprose.cli.export_cmd:export_command",
    "runs": "openprose.cli.runs_cmd:runs_command",
    "show": "openprose.cli.show_cmd:show_command",
    "watch": "openprose.cli.watch_cmd:watch_command",
    "examples": "openprose.cli.examples_cmd:examples_command",
    "help": "openprose.cli.help_cmd:help_command",
    "update": "openprose.cli.update_cmd:update_command",
    "doctor": "openprose.cli.doctor_cmd:doctor_command",
    "clean": "openprose.cli.clean_cmd:clean_command",
    "install-skill": "openprose.cli.install_skill_cmd:install_skill_command",
    "serve": "openprose.cli.serve_cmd:serve_command",
    "hook": "openprose.cli.hook_cmd:hook_command",
    "worker": "openprose.cli.worker_cmd:worker_command",
    "cancel": "openprose.cli.worker_cmd:cancel_command",
    "ui": "openprose.cli.ui_cmd:ui_command",
    "lsp": "openprose.cli.lsp_cmd:lsp_command",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="openprose", prog_name="prose")
def cli() -> None:
    """OpenProse: compile, run and resume multi-agent workflows."""


def main() -> None:
    cli()
