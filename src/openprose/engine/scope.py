"""Scopes: the environment chain names resolve through.

A block call's scope has the caller's scope as parent (names resolve outward through the call
stack, then the root). Loop, pipeline and ``catch`` bodies get a child scope holding their own
variables; a *transparent* child (sequential loop bodies, ``catch``) passes ``let`` declarations
through to its parent, so a value computed in the last iteration is visible after the loop.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from openprose.engine.errors import ValueFault
from openprose.engine.values import Value

# Orders bindings by when they were last written (judgments see the most recent first).
_writes = itertools.count()


@dataclass(slots=True)
class Slot:
    value: Value
    kind: str  # let | const | output | input | param | loop | error
    written: int = field(default_factory=lambda: next(_writes))


@dataclass(slots=True)
class Scope:
    parent: Scope | None = None
    transparent: bool = False
    execution_id: int | None = None
    slots: dict[str, Slot] = field(default_factory=dict)

    def child(self, transparent: bool = False, **variables: Value) -> Scope:
        scope = Scope(self, transparent, self.execution_id)
        for name, value in variables.items():
            scope.slots[name] = Slot(value, "loop")
        return scope

    def bind(self, name: str, value: Value, kind: str) -> None:
        """Declare ``name`` (``let``/``const``/``output``/...) in the nearest opaque scope."""
        scope = self
        while scope.transparent and scope.parent is not None and name not in scope.slots:
            scope = scope.parent
        scope.slots[name] = Slot(value, kind)

    def bind_here(self, name: str, value: Value, kind: str) -> None:
        self.slots[name] = Slot(value, kind)

    def assign(self, name: str, value: Value) -> None:
        """Reassign an existing ``let`` (or declare it when it does not exist yet)."""
        slot = self.find(name)
        if slot is None:
            self.bind(name, value, "let")
            return
        if slot.kind == "const":
            raise ValueFault(f"cannot reassign const '{name}'")
        slot.value = value
        slot.written = next(_writes)

    def find(self, name: str) -> Slot | None:
        scope: Scope | None = self
        while scope is not None:
            slot = scope.slots.get(name)
            if slot is not None:
                return slot
            scope = scope.parent
        return None

    def execution_id_of(self, name: str) -> int | None:
        """The execution id of the frame that holds ``name`` (``None``: root scope)."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.slots:
                return scope.execution_id
            scope = scope.parent
        return None

    def visible(self) -> Iterator[tuple[str, Slot, int | None]]:
        """Every name visible here (inner scopes shadow outer ones) with its slot and the
        execution id of the frame holding it."""
        seen: set[str] = set()
        scope: Scope | None = self
        while scope is not None:
            for name, slot in scope.slots.items():
                if name not in seen:
                    seen.add(name)
                    yield name, slot, scope.execution_id
            scope = scope.parent

    def lookup(self, name: str) -> Value:
        slot = self.find(name)
        if slot is None:
            raise ValueFault(f"'{name}' is not bound here")
        return slot.value

    def has(self, name: str) -> bool:
        return self.find(name) is not None
