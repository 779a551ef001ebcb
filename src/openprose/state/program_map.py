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

from openprose.language import compile as compile_program
from openprose.language import nodes as n
from openprose.language import paths

#: A step another driver records under its namespace: ``<ns>:<statement id>@<frame>#<n>`` for
#: the n-th session of a statement in one frame, ``...?<round>`` for a verdict (the MCP
#: server's embodied runs). A statement id is a path without iterations; a block's body is
#: named by the block (``review.0``). Other namespaced keys (``mcp:driver``) are not steps.
_DRIVER_STEP = re.compile(r"[a-z]+:([^:@]+)@\d+[#?]\d+")
_LABEL = re.compile(r"([a-z]+)(\d*)")


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
    node: n.Node | None
    enclosing: tuple[Enclosing, ...]

    @property
    def line(self) -> int:
        return self.node.span.line if self.node is not None else 0

    @property
    def end_line(self) -> int:
        return self.node.span.end_line if self.node is not None else 0


class ProgramMap:
    """Resolve journal keys of one program (compiled once; keys are cached)."""

    def __init__(self, source: str, file: str | None = None) -> None:
        result = compile_program(source, file)
        self.program = result.program
        self.blocks = {} if self.program is None else {
            s.name: s for s in self.program.body if isinstance(s, n.BlockDef)}
        self._placed: dict[str, Placed] = {}

    def place(self, key: str) -> Placed:
        found = self._placed.get(key)
        if found is None:
            found = self._placed[key] = self._walk(key)
        return found

    def _walk(self, key: str) -> Placed:
        if self.program is None:
            return Placed(None, ())
        node: n.Node | None = self.program
        body: tuple[n.Node, ...] | None = self.program.body
        enclosing: list[Enclosing] = []
        for kind, value, prefix in paths.tokens(key):
            target = _unwrap(node)
            if kind == "iteration":
                enclosing.append(Enclosing("iteration", prefix, target, int(value)))
                body = getattr(target, "body", None)
                body = body if isinstance(body, tuple) else None
            elif kind == "branch":
                branches = getattr(target, "branches", ())
                index = int(value)
                enclosing.append(Enclosing("branch", prefix, target, index))
                node = branches[index] if index < len(branches) else None
                body = None
            elif kind == "call":
                block = self.blocks.get(value)
                enclosing.append(Enclosing("call", prefix, node, name=value))
                if block is None:  # an imported program: its steps are its own run's
                    return Placed(node, tuple(enclosing))
                body = block.body
            elif kind == "step":
                node, body = _step(node, body, value)
            if node is None:
                break
        return Placed(node, tuple(enclosing))


def _unwrap(node: n.Node | None) -> n.Node | None:
    """The construct a statement stands for (``let x = parallel: ...`` is the parallel)."""
    while True:
        if isinstance(node, n.Let | n.Output | n.Assign):
            node = node.value
        elif isinstance(node, n.ExprStmt):
            node = node.expr
        elif isinstance(node, n.Branch):
            node = node.body
        else:
            return node


def _step(node: n.Node | None, body: tuple[n.Node, ...] | None, step: str
          ) -> tuple[n.Node | None, tuple[n.Node, ...] | None]:
    if step.isdigit():
        if body is None:
            inner = getattr(_unwrap(node), "body", None)
            body = inner if isinstance(inner, tuple) else None
        index = int(step)
        if body is None or index >= len(body):
            return None, None
        return body[index], None
    label, number = _LABEL.fullmatch(step).groups()  # type: ignore[union-attr]
    target = _unwrap(node)
    i = int(number) if number else 0
    try:
        if isinstance(target, n.If):
            if label == "if":
                return target.branches[i], None
            if label == "b":
                return target, target.branches[i].body
            if label == "else":
                return target, target.else_body
        if isinstance(target, n.Choice) and label == "o":
            return target.options[i], target.options[i].body
        if isinstance(target, n.Try) and label in ("try", "catch", "finally"):
            return target, {"try": target.body, "catch": target.catch_body,
                            "finally": target.finally_body}[label]
        if isinstance(target, n.Arrow) and label == "s":
            return target.steps[i], None
        if isinstance(target, n.Pipeline) and label == "p":
            return target.ops[i], None
    except IndexError:
        return None, None
    return node, None  # an expression inside the statement: the statement stands for it


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
