"""Placing journal keys back on the program: the lines state.md annotates and the constructs
(loop iterations, parallel branches, block calls) around a step, read from the analysis."""

from __future__ import annotations

import pytest

from openprose.state.program_map import ProgramMap, driver_path

PROGRAM = '''\
agent writer:
  model: sonnet
  prompt: "You write."

block review(draft):
  session "Review {draft}"

loop until **the draft is good** (max: 3):
  session: writer
    prompt: "Improve it"

parallel:
  a = session "First"
  b = session "Second"

if **the news is urgent**:
  session "Alert"
  session "Log it"
elif **it is stale**:
  session "Archive"
else:
  session "Ignore"

let items = ["x", "y"]
let out = items | map:
  session "Handle {item}"

do review("text")
'''


def shape(key: str) -> tuple[int, int, list[tuple[str, str, str | None, int, str]]]:
    placed = ProgramMap(PROGRAM).place(key)
    return placed.line, placed.end_line, [
        (e.kind, e.key, type(e.node).__name__ if e.kind != "call" and e.node else None,
         e.index, e.name) for e in placed.enclosing]


@pytest.mark.parametrize(("key", "expected"), [
    ("2[1].0", (9, 10, [("iteration", "2", "Loop", 1, "")])),
    ("2?0", (8, 10, [])),  # the loop's judgment: the whole loop
    ("3|1", (14, 14, [("branch", "3", "Parallel", 1, "")])),
    ("3|5", (0, 0, [("branch", "3", "Parallel", 5, "")])),  # no such branch
    ("4.if0?0", (16, 18, [])),  # a condition stands for its whole branch
    ("4.if1?0", (19, 20, [])),
    ("4.b0.1", (18, 18, [])),
    ("4.else.0", (22, 22, [])),
    ("6.p0[1].0", (26, 26, [("iteration", "6.p0", "PipeOp", 1, "")])),
    ("7>review.0", (6, 6, [("call", "7", None, 0, "review")])),
    ("8", (0, 0, [])),  # past the program
])
def test_place(key: str, expected: tuple[int, int, list[tuple[str, str, str | None, int, str]]]
               ) -> None:
    assert shape(key) == expected


def test_driver_step_is_placed_by_its_statement() -> None:
    assert driver_path("mcp:4.b0.1@0#1") == "4.b0.1"
    assert driver_path("mcp:review.0@2?1") == ">review.0"
    assert shape(">review.0")[:2] == (6, 6)
    assert driver_path("mcp:driver") is None


def test_a_program_that_does_not_compile_places_nothing() -> None:
    assert ProgramMap("session\n  ???").place("0").line == 0
