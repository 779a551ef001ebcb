"""Run-time values and how they turn into text, collections and truth.

Values are plain Python data: ``str`` (what sessions produce), ``int``/``float``, ``bool``,
``None``, ``list`` and ``dict`` (arrays, objects, an imported program's outputs).
"""

from __future__ import annotations

import json
import re
from typing import Any

from openprose.engine.errors import ValueFault

Value = Any

_YES = re.compile(r"^\W*(yes|true|y|keep|correct|pass|passed|approved?)\b", re.IGNORECASE)
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def to_text(value: Value) -> str:
    """The text a value has in a prompt, an interpolation or a binding file."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, indent=2)


def from_text(text: str) -> Value:
    """Inverse of :func:`to_text` for values stored as JSON (arrays, objects)."""
    stripped = text.strip()
    if stripped[:1] in "[{":
        try:
            return json.loads(stripped)
        except ValueError:
            return text
    return text


def items_of(value: Value) -> list[Value]:
    """The elements a ``for`` or a pipeline iterates over.

    Text from a session is read as a JSON array when it is one, else as one element per
    non-empty line (list markers such as ``-`` or ``1.`` removed).
    """
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, str):
        parsed = from_text(value)
        if isinstance(parsed, list):
            return parsed
        lines = [_LIST_MARK.sub("", line).strip() for line in value.splitlines()]
        return [line for line in lines if line]
    if value is None:
        return []
    raise ValueFault(f"cannot iterate over {type(value).__name__} {to_text(value)!r}")


def truthy(value: Value) -> bool:
    """Truth of a value; text counts as true when it reads as a yes."""
    if isinstance(value, str):
        return bool(_YES.match(value))
    return bool(value)


def to_number(value: Value) -> int | float:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            pass
        else:
            return int(number) if number.is_integer() else number
    raise ValueFault(f"not a number: {to_text(value)!r}")


def member(value: Value, attr: str) -> Value:
    """``value.attr``: a key of an object (text holding a JSON object counts).

    Unstructured text has no fields; reading one yields the whole text, so the session that
    receives it can still find what it needs (a model-run VM would extract it).
    """
    if isinstance(value, str):
        parsed = from_text(value)
        if not isinstance(parsed, dict):
            return value
        value = parsed
    if isinstance(value, dict):
        if attr in value:
            return value[attr]
        raise ValueFault(f"no member '{attr}' (has: {', '.join(map(str, value)) or 'none'})")
    if attr == "length" and isinstance(value, list):
        return len(value)
    raise ValueFault(f"cannot read member '{attr}' of {type(value).__name__}")


def index(value: Value, key: Value) -> Value:
    """``value[key]``."""
    if isinstance(value, dict):
        return member(value, to_text(key))
    items = items_of(value)
    position = to_number(key)
    if not isinstance(position, int) or not -len(items) <= position < len(items):
        raise ValueFault(f"index {to_text(key)} out of range for {len(items)} elements")
    return items[position]


_ARITH = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}
_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def binary(op: str, left: Value, right: Value) -> Value:
    """Evaluate a binary operator (``and``/``or`` are short-circuited by the caller)."""
    if op == "==":
        return _comparable(left) == _comparable(right)
    if op == "!=":
        return _comparable(left) != _comparable(right)
    if op == "+" and (isinstance(left, str) or isinstance(right, str)):
        try:
            return to_number(left) + to_number(right)
        except ValueFault:
            return to_text(left) + to_text(right)
    if op == "+" and isinstance(left, list):
        return left + (right if isinstance(right, list) else [right])
    fn = _ARITH.get(op) or _COMPARE.get(op)
    if fn is None:
        raise ValueFault(f"unknown operator {op}")
    if op in _COMPARE:
        a, b = _comparable(left), _comparable(right)
        if isinstance(a, str) or isinstance(b, str):
            return fn(to_text(a), to_text(b))
        return fn(a, b)
    try:
        return fn(to_number(left), to_number(right))
    except ZeroDivisionError as err:
        raise ValueFault("division by zero") from err


def _comparable(value: Value) -> Value:
    if isinstance(value, str):
        try:
            return to_number(value)
        except ValueFault:
            return value.strip()
    return value
