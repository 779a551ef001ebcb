"""The shape of src/openprose, read from its syntax trees: no import circle, no class name
defined twice, no private name imported from another module (see docs/architecture.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, ast.Module]:
    trees = {}
    for path in sorted((SRC / "openprose").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        trees[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return trees


MODULES = _modules()


def _is_package(name: str) -> bool:
    return (SRC / name.replace(".", "/") / "__init__.py").exists()


def _imports(name: str, tree: ast.Module) -> Iterator[tuple[str, str | None]]:
    """(module, imported name or None) for every import, those for type checking included:
    a circle of annotations is still a circle of knowledge."""
    package = name if _is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in MODULES:
                    yield submodule, None
                else:
                    yield base, alias.name


def _defining(module: str, alias: str | None) -> str:
    """The module that defines ``alias``, following a package's re-exports to their source."""
    if alias is None or not _is_package(module):
        return module
    for source, name in _imports(module, MODULES[module]):
        if name == alias and source in MODULES and source != module:
            return _defining(source, alias)
    return module


def _graph() -> dict[str, set[str]]:
    """Module → modules it imports from; a name taken from a package facade counts as taken
    from the module defining it, and a package does not depend on its own submodules."""
    graph = {}
    for name, tree in MODULES.items():
        targets = {_defining(mod, alias) for mod, alias in _imports(name, tree) if mod in MODULES}
        graph[name] = {t for t in targets if t != name and not t.startswith(name + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_no_class_name_defined_twice() -> None:
    seen: dict[str, list[str]] = {}
    for name, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(name)
    assert {cls for cls, where in seen.items() if len(where) > 1} == set()


def test_no_private_name_imported_from_another_module() -> None:
    borrowed = [f"{name} imports {alias} from {mod}" for name, tree in MODULES.items()
                for mod, alias in _imports(name, tree)
                if alias and alias.startswith("_") and not alias.startswith("__")
                and mod.startswith("openprose")]
    assert borrowed == []


def test_every_public_error_derives_from_the_root() -> None:
    """``except OpenProseError`` catches whatever openprose raises on purpose."""
    import importlib

    from openprose.errors import OpenProseError

    loose = []
    for name in MODULES:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__ == name and not value.__name__.startswith("_")
                    and not issubclass(value, OpenProseError)):
                loose.append(f"{name}.{value.__name__}")
    assert loose == []
