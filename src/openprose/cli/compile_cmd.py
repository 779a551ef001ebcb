"""``prose compile``: parse and validate programs, report diagnostics, print canonical form."""

from __future__ import annotations

import json
import sys

import click

from openprose.language import CompileResult, compile


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


@click.command("compile")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with all diagnostics.")
@click.option("--emit", type=click.Choice(["diagnostics", "canonical"]), default="diagnostics",
              show_default=True, help="'canonical' prints the normalized program (one file).")
@click.option("--no-warnings", is_flag=True, help="Report errors only.")
def compile_command(files: tuple[str, ...], as_json: bool, emit: str, no_warnings: bool) -> None:
    """Check OpenProse programs without running them.

    Exit status: 0 no errors (warnings allowed), 1 errors found, 2 usage problems or
    unreadable files.
    """
    if emit == "canonical" and len(files) != 1:
        raise click.UsageError("--emit canonical takes exactly one FILE")
    results: list[CompileResult] = []
    for path in files:
        try:
            source = _read(path)
        except FileNotFoundError:
            _fail(f"{path}: no such file")
        except IsADirectoryError:
            _fail(f"{path}: is a directory, not a .prose file")
        except UnicodeDecodeError as err:
            _fail(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})")
        except OSError as err:
            _fail(f"{path}: cannot read ({err.strerror})")
        results.append(compile(source, "<stdin>" if path == "-" else path))

    if emit == "canonical":
        result = results[0]
        if not result.ok or result.program is None:
            _report(results, as_json, no_warnings)
            sys.exit(1)
        from openprose.language.canonical import format_program

        click.echo(format_program(result.program), nl=False)
        sys.exit(0)

    _report(results, as_json, no_warnings)
    sys.exit(1 if any(r.errors for r in results) else 0)


def _report(results: list[CompileResult], as_json: bool, no_warnings: bool) -> None:
    diagnostics = [(r, d) for r in results for d in r.diagnostics
                   if d.is_error or not no_warnings]
    if as_json:
        payload: dict[str, object] = {"diagnostics": [d.to_dict() for _, d in diagnostics]}
        omitted = {r.path or "<input>": r.omitted for r in results if r.omitted}
        if omitted:
            payload["omitted"] = omitted
        click.echo(json.dumps(payload, indent=2))
        return
    for result, diagnostic in diagnostics:
        click.echo(diagnostic.format(result.source), err=True)
    for result in results:
        if result.omitted_note:
            click.echo(result.omitted_note, err=True)
    errors = sum(len(r.errors) for r in results)
    warnings = sum(len(r.warnings) for r in results)
    if errors or (warnings and not no_warnings):
        click.echo(f"{errors} error(s), {warnings} warning(s) in {len(results)} file(s)", err=True)


def _fail(message: str) -> None:
    click.echo(f"prose compile: {message}", err=True)
    sys.exit(2)
