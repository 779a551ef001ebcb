"""``prose hook pre-tool-use``: the Claude Code plugin's permission hook.

Claude Code runs it before each tool call with the event as JSON on stdin; a call an
OpenProse session's subagent makes is decided by the session's permissions
(:mod:`openprose.engine.host_hook`) and recorded in its run. The answer goes to stdout as
Claude Code's hook JSON; nothing printed means the host decides as it would without us.
It fails closed: when deciding fails, a subagent's call is refused rather than let through.
"""

from __future__ import annotations

import json
import sys

import click


@click.command("hook")
@click.argument("event", type=click.Choice(["pre-tool-use"]))
def hook_command(event: str) -> None:
    """A host's hook (reads the host's event as JSON on stdin); used by the Claude Code
    plugin to enforce sessions' permissions."""
    from openprose.cli.common import backends_for
    from openprose.engine.host_hook import decide, failed

    try:
        payload = json.loads(sys.stdin.read() or "{}")
    except ValueError as err:
        click.echo(f"prose hook: the event on stdin is not JSON ({err})", err=True)
        sys.exit(1)
    if not isinstance(payload, dict):
        return
    try:
        answer = decide(payload, lambda project: backends_for(project, None))
    except Exception as err:  # fail closed: an unchecked session call is refused
        answer = failed(payload, err)
    if answer is not None:
        click.echo(json.dumps(answer))
