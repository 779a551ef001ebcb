"""Program inputs: when they are bound, which must be given before a run starts, and which
may be left out.

An input is bound when execution reaches its declaration, in every mode (seed 001 binds a
supplied value there, or pauses there for one): to the value the caller gave (recorded as
the run's given inputs when it starts or resumes, :func:`openprose.engine.runner.record_given`),
else to the answer to asking for it. An input in a branch the run does not take is never bound.

Inputs declared ahead of the first executable statement are needed up front: a run that
cannot ask for them is refused before it exists, naming every missing one at once. An input
reached later pauses the run when nobody can be asked (ruling 1). An input whose description
calls it optional ("Optional: …", "… (optional)") may be left out; it is then empty.
"""

from __future__ import annotations

import re

from openprose.language import nodes as n

# The value a printed hint shows for an input to fill in. Pasted unedited it is a shell
# syntax error (a redirect with no file at the end of the line), never a value.
HINT_VALUE = "<value>"
# Values that are placeholders copied from documentation, not answers: refused.
PLACEHOLDERS = ("…", "...")

_OPTIONAL = re.compile(r"\boptional\b", re.IGNORECASE)
_DECLARATIONS = (n.Input, n.Use, n.ImportSkill, n.AgentDef, n.BlockDef)


def flag(name: str) -> str:
    """The ``--input`` flag a hint prints for ``name``: its value left to fill in."""
    return f"--input {name}={HINT_VALUE}"


def placeholder_refusal(name: str, value: str) -> str | None:
    """Why ``value`` cannot be input ``name``'s value (a placeholder), or ``None``."""
    if value.strip() not in PLACEHOLDERS:
        return None
    return (f"--input {name}={value}: {value!r} is a placeholder, not a value; "
            f"put the value of '{name}' in its place")


def is_optional(description: str) -> bool:
    """Whether an input's description says it may be left out."""
    return bool(_OPTIONAL.search(description))


def upfront(program: n.Program) -> list[n.Input]:
    """The inputs declared before the first executable statement."""
    found = []
    for stmt in program.body:
        if not isinstance(stmt, _DECLARATIONS):
            break
        if isinstance(stmt, n.Input):
            found.append(stmt)
    return found


def missing(program: n.Program, given: dict[str, object]) -> list[tuple[str, str]]:
    """Up-front inputs without a value that are not optional: (name, description)."""
    return [(decl.name, decl.prompt.text) for decl in upfront(program)
            if decl.name not in given and not is_optional(decl.prompt.text)]


def undeclared(program: n.Program, given: dict[str, object]) -> list[str]:
    """Names given that the program declares no input for."""
    declared = {decl.name for decl in program.inputs}
    return [name for name in given if name not in declared]
