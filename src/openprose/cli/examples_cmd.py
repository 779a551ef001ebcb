"""``prose examples [NAME|NUMBER]``: list the bundled example programs, show one, or run one
(on the scripted provider unless told otherwise, so no API key is needed)."""

from __future__ import annotations

from pathlib import Path

import click

from openprose.cli.common import USAGE, console, emit_json, fail, json_option, project_option


@click.command("examples")
@click.argument("query", required=False, metavar="[NAME|NUMBER|KEYWORD]")
@click.option("--source", "show_source", is_flag=True,
              help="Print the example's program instead of running it.")
@click.option("--provider", type=click.Choice(["scripted", "anthropic"]), default="scripted",
              show_default=True, help="Who answers the sessions: the example's script or "
                                      "a real model.")
@click.option("--input", "inputs", multiple=True, metavar="NAME=VALUE",
              help="Override one of the example's inputs (repeatable).")
@click.option("--state", "backend", type=click.Choice(["filesystem", "sqlite", "postgres"]),
              default="filesystem", show_default=True, help="State backend for the run.")
@json_option
@project_option
def examples_command(query: str | None, show_source: bool, provider: str,
                     inputs: tuple[str, ...], backend: str, as_json: bool,
                     project: Path) -> None:
    """List the example programs, or run one by name, number or keyword (a construct such
    as `parallel` finds the example that shows it)."""
    from openprose import examples

    if query is None:
        _list(examples.all_examples(), as_json)
        return
    try:
        example = examples.find(query)
    except LookupError as err:
        matches = examples.search(query)
        if matches and not as_json:
            click.echo(f"prose examples: {err}", err=True)
            _list(tuple(matches), False)
            raise SystemExit(USAGE) from None
        fail("examples", str(err), USAGE)
    if show_source:
        if as_json:
            emit_json({"number": example.number, "name": example.name,
                       "file": example.file, "source": example.source,
                       "script": example.script, "inputs": example.inputs})
        else:
            click.echo(example.source, nl=False)
        return
    _run(example, provider, inputs, backend, as_json, project)


def _list(found: tuple, as_json: bool) -> None:
    if as_json:
        emit_json({"examples": [
            {"number": e.number, "name": e.name, "file": e.file, "title": e.title,
             "constructs": list(e.constructs), "inputs": e.inputs} for e in found]})
        return
    out = console()
    for example in found:
        out.print(f"{example.number:>3}  [bold]{example.name:<12}[/] {example.title}",
                  overflow="ellipsis", no_wrap=True)
    out.print("\nrun one: prose examples NAME   ·   read one: prose examples NAME --source")


def _run(example: object, provider_name: str, inputs: tuple[str, ...], backend: str,
         as_json: bool, project: Path) -> None:
    import yaml

    from openprose import examples
    from openprose.cli.run_cmd import cli_provider, execute, parse_inputs
    from openprose.engine import runner
    from openprose.engine.errors import ImportFailed
    from openprose.engine.scripted import ScriptedProvider
    from openprose.language import compile as compile_program

    assert isinstance(example, examples.Example)
    values = {**example.inputs, **parse_inputs(inputs)}
    with examples.program_file(example) as path:
        result = compile_program(example.source, str(path))
        if not result.ok or result.program is None:  # pragma: no cover - tested in CI
            fail("examples", f"example {example.name} does not compile")
        try:
            imports = runner.load_imports(result.program, str(path), project)
        except ImportFailed as err:
            fail("examples", str(err))
        provider = ScriptedProvider(yaml.safe_load(example.script)) \
            if provider_name == "scripted" else cli_provider(provider_name, None, str(project))
        job = runner.Job(source=example.source, file=str(path),
                         program=result.program, imports=imports, inputs=values,
                         project_root=project, backend=backend)
        execute(job, provider, as_json, str(project))
