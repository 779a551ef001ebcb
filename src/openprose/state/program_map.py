"""Where a journal key sits in its program: the statement it names and the constructs
(loops, parallel blocks, block calls) it runs inside.

A key is the engine's statement path, read with the one definition of the format
(:mod:`openprose.language.paths`). Only the program text is needed, so any process
can place a run's steps, whichever backend holds them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from openprose.language import nodes as n
from openprose.language import paths, syntax_tree
from openprose.language.analysis import Analysis, Statement, analyze

#: A loop round in a key (``[3]``): it names the round, never another statement.
_ROUND = re.compile(r"\[\d+\]")
#: A step another driver records under its namespace: ``<ns>:<statement id>@<frame>#<n>`` for
#: the n-th session of a statement in one frame, ``...?<round>`` for a verdict (the MCP
#: server's embodied runs). A statement id is a path without iterations; a block's body is
#: named by the block (``review.0``). Other namespaced keys (``mcp:driver``) are not steps.
_DRIVER_STEP = re.compile(r"[a-z]+:([^:@]+)@\d+[#?]\d+")


@dataclass(frozen=True, slots=True)
class Enclosing:
    """A construct a step runs inside: ``kind`` is iteration, branch or call; ``key`` is the
    construct's own key; ``index`` the iteration or branch number; ``name`` a called block."""

    kind: str
    key: str
    node: n.Node | None
    index: int = 0
    name: str = ""


@dataclass(frozen=True, slots=True)
class Placed:
    """The lines of the statement a key names (0: none) and the constructs around it."""

    line: int
    end_line: int
    enclosing: tuple[Enclosing, ...]


class ProgramMap:
    """Resolve journal keys of one program (parsed and analysed once; keys are cached)."""

    def __init__(self, source: str) -> None:
        self.program = syntax_tree(source)
        self.analysis: Analysis | None = (None if self.program is None
                                          else analyze(self.program, source))
        #: every static path a body or branch starts at (``6.b0``, ``9.p0``, ``4|1``)
        self._bodies = set() if self.analysis is None else {
            prefix for sid in self.analysis.statements
            for _kind, _value, prefix in paths.tokens(sid) if prefix}
        self._placed: dict[str, Placed] = {}
        self._lines: dict[str, tuple[int, int]] = {}

    @property
    def session_lines(self) -> list[int]:
        """The lines of the program's session statements (a run's view marks those no step
        reached: skipped, or pending while the run may still get there)."""
        return [] if self.analysis is None else sorted(
            {s.line for s in self.analysis.statements.values() if s.kind == "session"})

    def place(self, key: str) -> Placed:
        found = self._placed.get(key)
        if found is None:
            found = self._placed[key] = self._resolve(key)
        return found

    def lines(self, key: str) -> tuple[int, int]:
        """The lines of the statement ``key`` names, without the constructs around it:
        cached by the key without its iteration numbers, which never change the statement
        (a loop of 1,000 rounds is placed once, not once per round)."""
        shape = _ROUND.sub("[]", key)
        found = self._lines.get(shape)
        if found is None:
            placed = self._resolve(key)
            found = self._lines[shape] = (placed.line, placed.end_line)
        return found

    def _resolve(self, key: str) -> Placed:
        """Read ``key`` against the analysis: its runtime parts become the constructs around
        the step, what remains is the statement's static path."""
        if self.analysis is None:
            return Placed(0, 0, ())
        statements, constructs = self.analysis.statements, self.analysis.constructs
        path = ""  # the static path read so far
        statement: Statement | None = None
        enclosing: list[Enclosing] = []
        for kind, value, prefix in paths.tokens(key):
            if kind in ("iteration", "branch"):
                enclosing.append(Enclosing(kind, prefix, constructs.get(path), int(value)))
                if kind == "branch":
                    path = paths.branch(path, int(value))
                    statement = statements.get(path)
            elif kind == "call":
                enclosing.append(Enclosing("call", prefix, statement and statement.node,
                                           name=value))
                if value not in self.analysis.blocks:  # an imported program: its own run's
                    break
                path = value
            elif kind == "step":
                step = paths.child(path, value)
                if step in statements:
                    path, statement = step, statements[step]
                elif step in self._bodies:
                    path = step
                elif value.isdigit():  # no such statement
                    statement = None
                # else an expression inside the statement: the statement stands for it
            if statement is None and kind in ("branch", "step"):
                break
        if statement is None:
            return Placed(0, 0, tuple(enclosing))
        return Placed(statement.line, _end_line(statement, statements), tuple(enclosing))


def _end_line(statement: Statement, statements: dict[str, Statement]) -> int:
    """A condition stands for its whole branch: the condition and the body under it."""
    if statement.kind != "condition" or statement.parent is None:
        return statement.end_line
    body = paths.condition_body(statement.id) + "."
    return max([statement.end_line, *(s.end_line for s in statements.values()
                                      if s.id.startswith(body))])


def driver_path(key: str) -> str | None:
    """The path to place a driver's step key at (None: the key is not a driver's step)."""
    match = _DRIVER_STEP.fullmatch(key)
    if match is None:
        return None
    statement = match.group(1)
    return statement if statement[0].isdigit() else ">" + statement


@lru_cache(maxsize=16)
def program_map(source: str) -> ProgramMap:
    return ProgramMap(source)


__all__ = ["Enclosing", "Placed", "ProgramMap", "driver_path", "program_map"]
