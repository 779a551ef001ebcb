"""Anything ``compile`` accepts, every later stage handles: canonical form (which compiles
again), the dry-run plan and a real run. Programs at the depth limit are built from long
operator chains, member and index chains and nested blocks; one level deeper is refused
with a diagnostic instead of a RecursionError."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from openprose.engine import runner
from openprose.engine.scripted import ScriptedProvider
from openprose.language import MAX_TREE_DEPTH, compile
from openprose.language.canonical import format_program


def chain(terms: int) -> str:
    return "let x = " + " + ".join(["1"] * terms) + "\noutput o = x\n"


def members(terms: int) -> str:
    return 'let a = {a: "s"}\nlet x = a' + ".a" * terms + "\noutput o = x\n"


def indexes(terms: int) -> str:
    return 'let a = ["s"]\nlet x = a' + "[0]" * terms + "\noutput o = x\n"


def nested(opener: str) -> Callable[[int], str]:
    """60 nested blocks around a session whose prompt is a chain of ``terms`` strings."""
    def build(terms: int) -> str:
        lines = [f"{'  ' * level}{opener}" for level in range(60)]
        prompt = " + ".join(['"p"'] * terms)
        lines.append(f"{'  ' * 60}let x = session {prompt}" if opener != "parallel:"
                     else f"{'  ' * 60}x = session {prompt}")
        return "\n".join(lines) + "\n"
    return build


SHAPES = {"chain": chain, "members": members, "indexes": indexes,
          "ifs": nested("if **yes**:"), "parallels": nested("parallel:"),
          "fors": nested("for item in [1]:"), "repeats": nested("repeat 1:")}


def deepest(build: Callable[[int], str]) -> tuple[str, str]:
    """The largest program of this shape that compiles, and the smallest that does not."""
    low, high = 1, 2 * MAX_TREE_DEPTH
    assert compile(build(low)).ok and not compile(build(high)).ok
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if compile(build(middle)).ok else (low, middle)
    return build(low), build(high)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_stage_handles_the_deepest_program_compile_accepts(shape, tmp_path: Path):
    source, too_deep = deepest(SHAPES[shape])
    program = compile(source, "deep.prose").program
    canonical = format_program(program)
    assert compile(canonical).ok
    assert format_program(compile(canonical).program) == canonical
    runner.dry_run(program)
    job = runner.Job(source=source, file="deep.prose", program=program, project_root=tmp_path)
    provider = ScriptedProvider({"default_output": "ok", "default_verdict": True})
    outcome = asyncio.run(runner.execute(job, provider))
    assert outcome.status == "completed", outcome.error

    refused = compile(too_deep, "deep.prose")
    assert [d.code for d in refused.errors] == ["E005"]
    assert "nested" in refused.errors[0].message


def test_issue_examples_are_refused_with_a_diagnostic():
    long_chain = "let x = " + " + ".join(["1"] * 490) + "\noutput o = x\n"
    member_chain = 'let a = "s"\nlet x = a' + ".a" * 600 + "\n"
    parallels = "".join(f"{'  ' * i}parallel:\n" for i in range(500)) + "  " * 500 + \
        'session "x"\n'
    for source in (long_chain, member_chain, parallels):
        result = compile(source, "deep.prose")
        assert not result.ok
        assert any(d.code == "E005" and "levels" in d.message for d in result.errors)


@pytest.mark.parametrize("source", ["******", "let x = ** **", "** *a **", "** a* **",
                                    'if ** *x* **:\n  session "x"\n'])
def test_canonical_discretion_that_touches_a_star_compiles_again(source):
    program = compile(source).program
    canonical = format_program(program)
    again = compile(canonical)
    assert again.ok, again.errors
    assert again.program.body == program.body
    assert format_program(again.program) == canonical
