"""``prose lsp``: the language server editors start (see README, "Editor support")."""

from __future__ import annotations

import click

#: the packages of the ``lsp`` extra (and what they pull in)
EXTRA = frozenset({"pygls", "lsprotocol", "cattrs"})


@click.command("lsp")
@click.option("--stdio", is_flag=True, help="Speak over stdin/stdout (the only transport; "
                                              "accepted because editors often pass it).")
def lsp_command(stdio: bool) -> None:
    """Serve the Language Server Protocol for .prose files over stdin/stdout: diagnostics as
    you type, hover, go to definition, references, completion, outline, folding, formatting
    and highlighting. Needs the lsp extra: pip install 'openprose[lsp]'."""
    try:
        from openprose.lsp.server import main
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] not in EXTRA:
            raise
        raise click.ClickException(f"prose lsp needs the lsp extra ({err.name} is missing): "
                                   "pip install 'openprose[lsp]'") from None
    main()
