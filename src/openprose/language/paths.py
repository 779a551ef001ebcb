"""The statement-path format, defined once: how a path is built and how it is read back.

A path is statement indexes through the program tree joined by ``.`` (``5.0`` is the first
statement of the loop at ``5``; ``review.0`` the first of ``block review``), with labels for
the bodies of constructs and the parts of expressions that can run sessions, and ``|b`` for a
parallel branch: the static part, which :mod:`openprose.language.analysis` gives every
statement. At run time the engine appends ``[i]`` for a loop iteration, ``>name`` for a block
call and ``?n`` for a judgment round (its resume keys). Both build every path with the
functions here, so a label is spelled in this module only; the strings are the keys of stored
runs, so they never change.

======================  ===============  =====================================
function                label            what
======================  ===============  =====================================
:func:`condition`       ``6.if1``        the condition of an ``if``/``elif``
:func:`then_body`       ``6.b1``         the body under that condition
:func:`else_body`       ``6.else``       the ``else`` body
:func:`option`          ``7.o0``         the body of a ``choice`` option
:func:`try_body` …      ``3.try``        ``try``, ``catch`` and ``finally`` bodies
:func:`sequence_step`   ``8.s1``         a step of an arrow ``->`` sequence
:func:`stage`           ``9.p0``         a pipeline stage (``| map:`` …)
:func:`item`            ``2.a0``         an item of an array literal
:func:`entry`           ``2.o0``         an entry of an object literal
:func:`branch`          ``4|1``          a branch of a ``parallel``
======================  ===============  =====================================
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_CONDITION = "if"
_THEN = "b"


def child(path: str, step: str | int) -> str:
    """The path of statement ``step`` of the body at ``path``."""
    return f"{path}.{step}" if path else str(step)


def condition(path: str, i: int) -> str:
    """The condition of branch ``i`` (``if`` is 0, each ``elif`` one more) of the ``if`` at
    ``path``."""
    return child(path, f"{_CONDITION}{i}")


def then_body(path: str, i: int) -> str:
    """The body run when condition ``i`` of the ``if`` at ``path`` holds."""
    return child(path, f"{_THEN}{i}")


def condition_body(condition_path: str) -> str:
    """The body a condition guards: ``6.b1`` for ``6.if1``."""
    path, _, i = condition_path.rpartition(f".{_CONDITION}")
    return then_body(path, int(i))


def else_body(path: str) -> str:
    return child(path, "else")


def option(path: str, i: int) -> str:
    """The body of option ``i`` of the ``choice`` at ``path``."""
    return child(path, f"o{i}")


def try_body(path: str) -> str:
    return child(path, "try")


def catch_body(path: str) -> str:
    return child(path, "catch")


def finally_body(path: str) -> str:
    return child(path, "finally")


def sequence_step(path: str, i: int) -> str:
    """Step ``i`` of the arrow sequence at ``path``."""
    return child(path, f"s{i}")


def stage(path: str, i: int) -> str:
    """Stage ``i`` of the pipeline at ``path`` (its body runs once per item, ``[j]``)."""
    return child(path, f"p{i}")


def item(path: str, i: int) -> str:
    """Item ``i`` of the array literal at ``path``."""
    return child(path, f"a{i}")


def entry(path: str, i: int) -> str:
    """Entry ``i`` of the object literal at ``path`` (the letter of a choice option's body: a
    path is a choice or an object literal, never both)."""
    return child(path, f"o{i}")


def branch(path: str, i: int) -> str:
    return f"{path}|{i}"


def iteration(path: str, i: int) -> str:
    return f"{path}[{i}]"


def call(path: str, block: str) -> str:
    return f"{path}>{block}"


def judgment(path: str, round_: int) -> str:
    return f"{path}?{round_}"


_TOKEN = re.compile(r"\[(\d+)\]|\|(\d+)|>([^.\[|>?]+)|\?(\d+)|\.?([a-z]+\d*|\d+)")


def tokens(key: str) -> Iterator[tuple[str, str, str]]:
    """The parts of a path or key, in order: (kind, value, the key before it); kind is step,
    branch, iteration, call or judgment."""
    kinds = ("iteration", "branch", "call", "judgment", "step")
    for match in _TOKEN.finditer(key):
        kind, value = next((k, v) for k, v in zip(kinds, match.groups(), strict=True)
                           if v is not None)
        yield kind, value, key[:match.start()]
