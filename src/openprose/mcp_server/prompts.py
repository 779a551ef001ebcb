"""Prompts hosts show as commands: ``prose-run``, ``prose-compile``, ``prose-help``,
``prose-examples`` and ``prose-update``.

Each returns our own text for the host model (package data in :mod:`openprose.prompts`) plus
what the server found: ``prose-run`` and ``prose-compile`` compile the program first (errors as
``file:line:col: CODE message`` lines), ``prose-examples`` lists the example programs and
``prose-update`` the legacy files in the project. ``prose-run`` in a state backend mode
(filesystem, sqlite, postgres) explains how to step the program with the server's tools;
``in-context`` keeps the run in the conversation by narration.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from openprose import prompts
from openprose.errors import OpenProseError
from openprose.language import CompileResult
from openprose.language import compile as compile_program
from openprose.language import nodes as n
from openprose.language.files import MAX_PROGRAM_BYTES
from openprose.paths import PathRefused, contained, read_file
from openprose.state import postgres_url

TOOL_MODES = ("filesystem", "sqlite", "postgres")
STATE_MODES = (*TOOL_MODES, "in-context")
INLINE = "(inline program)"


class PromptError(OpenProseError, ValueError):
    """A prompt's arguments name no usable program; the message says why and where."""


def program_text(program: str, project_root: Path) -> tuple[str, str | None]:
    """(source, path) for ``program``: a ``.prose`` file inside ``project_root`` (a regular
    file: a FIFO or device is refused unopened), or source; either at most
    :data:`MAX_PROGRAM_BYTES`."""
    if not program.strip().endswith(".prose") or "\n" in program.strip():
        if len(program.encode()) > MAX_PROGRAM_BYTES:
            raise PromptError(f"the program source is larger than "
                              f"{MAX_PROGRAM_BYTES // (1024 * 1024)} MiB")
        return program, None
    root, name = project_root.resolve(), program.strip()
    try:
        path = contained(name, [root], base=root, what="program", within="the project")
        return (read_file(path, f"program {name!r}", MAX_PROGRAM_BYTES).decode("utf-8"),
                str(path.relative_to(root)))
    except PathRefused as err:
        raise PromptError(str(err)) from None
    except UnicodeDecodeError:
        raise PromptError(f"program {name!r} is not UTF-8 text") from None


def compiled_text(program: str, project_root: Path) -> tuple[str, str | None, CompileResult]:
    """:func:`program_text` compiled for the project: its imports resolve from its own place
    in the project and may not leave it."""
    source, path = program_text(program, project_root)
    return source, path, compile_program(source, path, root=project_root.resolve())


async def compiled(program: str, project_root: Path) -> tuple[str, str | None, CompileResult]:
    """:func:`compiled_text` on a worker thread: a large program's compile never holds up
    the other clients' calls."""
    return await anyio.to_thread.run_sync(compiled_text, program, project_root)


def _listing(source: str) -> str:
    return f"```prose\n{source}{'' if source.endswith(chr(10)) else chr(10)}```\n"


def _compiled(program: str, project_root: Path) -> tuple[str, str | None, n.Program | None]:
    source, path, result = compiled_text(program, project_root)
    if not result.ok:
        raise PromptError("the program does not compile:\n" + "\n".join(
            d.format().split("\n")[0] for d in result.errors))
    return source, path, result.program


def command_arguments(program: str, *rest: str) -> tuple[str, dict[str, str], str | None]:
    """A command's arguments as a user types them (``/prose-run q.prose topic=tides sqlite``):
    hosts hand words to the declared arguments in order, so every argument after the program
    is read the same way, whichever it landed in: ``NAME=VALUE`` is an input, a state mode is
    the state. Returns (program, inputs, state or None)."""
    words = _words(program) if "\n" not in program.strip() else []
    if words and words[0].endswith(".prose"):  # a path, maybe with the other words
        program = words.pop(0)
    else:  # source text: the other arguments are separate
        words = []
    for argument in rest:
        words += _words(argument)
    inputs: dict[str, str] = {}
    state = None
    for word in words:
        name, equals, value = word.partition("=")
        if equals and name.isidentifier():
            inputs[name] = value
        elif word in STATE_MODES and state is None:
            state = word
        else:
            raise PromptError(f"state mode {word!r} is not offered by this server (offered: "
                              f"{', '.join(STATE_MODES)}); inputs are NAME=VALUE")
    return program, inputs, state


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote: plain words
        return text.split()


def _checked_inputs(program: n.Program | None, inputs: dict[str, str]) -> None:
    declared = [decl.name for decl in program.inputs] if program is not None else []
    unknown = [name for name in inputs if name not in declared]
    if unknown:
        raise PromptError(f"unknown input(s) {', '.join(unknown)} (declared: "
                          f"{', '.join(declared) or 'none'})")


def run_prompt(program: str, project_root: Path, state: str = "filesystem",
               inputs: dict[str, str] | None = None) -> str:
    if state not in STATE_MODES:
        raise PromptError(f"state mode {state!r} is not offered by this server (offered: "
                          f"{', '.join(STATE_MODES)})")
    if state == "postgres" and not postgres_url(project_root):
        raise PromptError("state mode 'postgres' needs OPENPROSE_POSTGRES_URL in .prose/.env "
                          "or the environment")
    source, path, compiled_program = _compiled(program, project_root)
    given = dict(inputs or {})
    _checked_inputs(compiled_program, given)
    name = path or INLINE
    if state == "in-context":
        values = "".join(f"[Input] {k} = {v}\n" for k, v in given.items())
        known = f"The user gave these inputs:\n{values}\n" if values else ""
        return (f"{prompts.load('run-in-context')}\n{known}## Program: {name}\n\n"
                f"{_listing(source)}")
    where = json.dumps(path) if path else "<the source below>"
    call = (f"start_run(program={where}, inputs={json.dumps(given)}, "
            f"backend={json.dumps(state)})")
    return (f"{prompts.load('run-tools')}\n## Your run\n\nState backend: `{state}`. To begin, "
            f"call `{call}`.\n\n## Program: {name}\n\n{_listing(source)}")


def compile_prompt(program: str, project_root: Path, inputs: dict[str, str] | None = None
                   ) -> str:
    source, path, result = compiled_text(program, project_root)
    if result.ok and inputs:
        _checked_inputs(result.program, inputs)
    name = path or INLINE
    errors, warnings = len(result.errors), len(result.warnings)
    verdict = (f"{name}: {errors} error(s), {warnings} warning(s)" if not result.ok else
               f"{name} compiles: no errors, {warnings} warning(s)")
    findings = "\n".join(d.format(source) for d in result.diagnostics)
    return "\n".join([prompts.load("compile"), f"## Result: {verdict}", "",
                      *([f"```\n{findings}\n```", ""] if findings else []),
                      f"## Program: {name}", "", _listing(source)])


def example_programs(project_root: Path) -> dict[str, tuple[str, str]]:
    """name -> (location, source) of the example programs in the project's ``examples/``."""
    folder = project_root / "examples"
    if not folder.is_dir():
        return {}
    return {path.stem: (str(path.relative_to(project_root)), path.read_text(encoding="utf-8"))
            for path in sorted(folder.glob("*.prose")) if path.is_file()}


def _summary(source: str) -> str:
    """The first comment line of a program, as its one-line description."""
    for line in source.splitlines():
        text = line.strip()
        if text.startswith("#") and text.lstrip("# ").strip():
            return text.lstrip("# ").strip()
        if text and not text.startswith("#"):
            break
    return "(no description)"


def examples_prompt(project_root: Path, name: str = "") -> str:
    found = example_programs(project_root)
    if name:
        if name not in found:
            raise PromptError(f"no example named {name!r} (examples: "
                              f"{', '.join(found) or 'none'})")
        location, source = found[name]
        return (f"# Example: {name}\n\nThis is the example program `{location}`. Explain what "
                f"it does step by step; to run it, use `prose-run` with program "
                f"`{location}`.\n\n{_listing(source)}")
    if not found:
        return (prompts.load("examples") + "\nThis project has no example programs (none in "
                "`examples/`). `prose-help` shows what a program can say.\n")
    rows = [f"- `{key}` ({location}): {_summary(source)}"
            for key, (location, source) in found.items()]
    return prompts.load("examples") + "\n## Examples\n\n" + "\n".join(rows) + "\n"


def legacy_findings(project_root: Path) -> list[str]:
    """What older OpenProse versions left in ``.prose/`` that this version does not read."""
    prose = project_root / ".prose"
    findings = []
    state_json = prose / "state.json"
    if state_json.is_file():
        try:
            keys = sorted(json.loads(state_json.read_text(encoding="utf-8")))
        except (ValueError, TypeError, OSError):
            keys = []
        named = ", ".join(f"`{key}`" for key in keys) or "no readable keys"
        findings.append(f"`.prose/state.json` holds settings ({named}). Settings now live in "
                        "`.prose/.env` as `KEY=value` lines: copy each key there (keep any line "
                        "`.prose/.env` already has), then delete `state.json`.")
    execution = prose / "execution"
    if execution.is_dir():
        runs = sorted(p.name for p in execution.iterdir() if p.is_dir())
        findings.append(f"`.prose/execution/` holds {len(runs)} run(s) in the older layout. "
                        "Runs now live in `.prose/runs/`: move each run directory there (rename "
                        "any whose name is already taken). This server reads them as files but "
                        "cannot continue them.")
    runs_dir = prose / "runs"
    if runs_dir.is_dir():
        foreign = sorted(p.name for p in runs_dir.iterdir() if p.is_dir() and not (
            (p / "run.json").is_file() or (p / "state.db").is_file()))
        if foreign:
            listed = ", ".join(f"`{name}`" for name in foreign[:20])
            more = f" and {len(foreign) - 20} more" if len(foreign) > 20 else ""
            findings.append(f"`.prose/runs/` has run directories the server did not write "
                            f"({listed}{more}): they lack `run.json`, so they cannot be listed "
                            "or resumed. Keep them as records, or move them to "
                            "`.prose/archive/` to keep `.prose/runs/` for live runs.")
    return findings


def update_prompt(project_root: Path) -> str:
    findings = legacy_findings(project_root)
    if not findings:
        return (prompts.load("update") + "\n## Findings\n\nNothing to update: this project's "
                "`.prose/` is current. Tell the user so.\n")
    return prompts.load("update") + "\n## Findings\n\n" + "\n".join(
        f"{n}. {text}" for n, text in enumerate(findings, 1)) + "\n"


async def _answer(name: str, make: Callable[..., str], *args: object) -> str:
    """``make(*args)`` on a worker thread (compiling a program may take a while), its
    refusal as an invalid-params error naming the prompt."""
    try:
        return await anyio.to_thread.run_sync(make, *args)
    except (PromptError, OSError, UnicodeDecodeError) as exc:
        raise MCPError(INVALID_PARAMS, f"{name}: {exc}") from None


def register(mcp: MCPServer, project_root: str | Path) -> None:
    """Add the prompts to ``mcp``; program paths are read inside ``project_root`` only."""
    root = Path(project_root)

    @mcp.prompt(name="prose-run",
                description="Run an OpenProse program: you act as its VM. program: a .prose "
                            "path in the project, or source text; then its inputs as "
                            "NAME=VALUE and the state: filesystem (default), sqlite, postgres "
                            "(kept by the server's tools) or in-context.")
    async def prose_run(program: str, inputs: str = "", state: str = "") -> str:
        def make() -> str:
            path, given, mode = command_arguments(program, inputs, state)
            return run_prompt(path, root, mode or "filesystem", given)
        return await _answer("prose-run", make)

    @mcp.prompt(name="prose-compile",
                description="Check an OpenProse program without running it. program: a .prose "
                            "path in the project, or source text; inputs (NAME=VALUE) are "
                            "checked against its declared ones.")
    async def prose_compile(program: str, inputs: str = "") -> str:
        def make() -> str:
            path, given, _ = command_arguments(program, inputs)
            return compile_prompt(path, root, given)
        return await _answer("prose-compile", make)

    @mcp.prompt(name="prose-help", description="What OpenProse programs can say, on one page.")
    def prose_help() -> str:
        return prompts.load("help")

    @mcp.prompt(name="prose-examples",
                description="List the example programs, or show one. name: an example's name "
                            "(optional).")
    async def prose_examples(name: str = "") -> str:
        return await _answer("prose-examples", examples_prompt, root, name)

    @mcp.prompt(name="prose-update",
                description="Find files older OpenProse versions left in .prose/ and say how "
                            "to bring them up to date.")
    async def prose_update() -> str:
        return await _answer("prose-update", update_prompt, root)
