"""Prompts hosts show as commands: ``prose-help`` and ``prose-run``.

``prose-run`` checks the program first (compile errors come back as ``file:line:col: CODE
message`` lines) and returns our VM text with the program. The state mode this server offers
today is ``in-context``: the host keeps the run's state in the conversation by narration.
"""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from openprose import prompts
from openprose.language import compile as compile_program

STATE_MODES = ("in-context",)


class PromptError(ValueError):
    """A prompt's arguments name no usable program; the message says why and where."""


def program_text(program: str, project_root: Path) -> tuple[str, str | None]:
    """(source, path) for ``program``: a ``.prose`` file inside ``project_root``, or source."""
    if not program.strip().endswith(".prose") or "\n" in program.strip():
        return program, None
    root = project_root.resolve()
    path = (root / program.strip()).resolve()
    if not path.is_relative_to(root):
        raise PromptError(f"program {program!r} is outside the project {root}")
    if not path.is_file():
        raise PromptError(f"program {program!r} does not exist under {root}")
    return path.read_text(encoding="utf-8"), str(path.relative_to(root))


def run_prompt(program: str, project_root: Path, state: str = "in-context") -> str:
    if state not in STATE_MODES:
        raise PromptError(f"state mode {state!r} is not offered by this server (offered: "
                          f"{', '.join(STATE_MODES)})")
    source, path = program_text(program, project_root)
    result = compile_program(source, path)
    if not result.ok:
        raise PromptError("the program does not compile:\n" + "\n".join(
            d.format().split("\n")[0] for d in result.errors))
    name = path or "(inline program)"
    return f"{prompts.load('run-in-context')}\n## Program: {name}\n\n```prose\n{source}\n```\n"


def register(mcp: MCPServer, project_root: str | Path) -> None:
    """Add the prompts to ``mcp``; program paths are read inside ``project_root`` only."""
    root = Path(project_root)

    @mcp.prompt(name="prose-help", description="What OpenProse programs can say, on one page.")
    def prose_help() -> str:
        return prompts.load("help")

    @mcp.prompt(name="prose-run",
                description="Run an OpenProse program: you act as its VM. program: a .prose "
                            "path in the project, or source text; state: in-context.")
    def prose_run(program: str, state: str = "in-context") -> str:
        try:
            return run_prompt(program, root, state)
        except (PromptError, OSError, UnicodeDecodeError) as exc:
            raise MCPError(INVALID_PARAMS, f"prose-run: {exc}") from None
