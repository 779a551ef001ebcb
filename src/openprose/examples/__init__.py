"""Example programs bundled with openprose, one per theme, together covering every construct.

Each ``NN-name.prose`` starts with three comment lines: a title, ``# constructs: ...`` and
optionally ``# inputs: name=value ...`` (values to run it with); ``NN-name.script.yaml``
beside it scripts the model, so every example runs on the scripted provider::

    from openprose import examples
    for example in examples.all_examples():
        print(example.number, example.name, example.title)
    hello = examples.find("hello")          # by name, number, or a keyword
    with examples.program_file(hello) as path:   # a real file (imports resolve beside it)
        ...
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import as_file, files
from pathlib import Path

_FILE = re.compile(r"(\d+)-([a-z0-9-]+)\.prose$")


@dataclass(frozen=True, slots=True)
class Example:
    number: int
    name: str
    file: str  # the program's file name in the package, e.g. 01-hello.prose
    title: str
    constructs: tuple[str, ...]
    source: str
    script: str  # the scripted provider's YAML
    inputs: dict[str, str] = field(default_factory=dict)

    def mentions(self, keyword: str) -> bool:
        """Whether ``keyword`` appears in the name, title or constructs (any case)."""
        word = keyword.lower()
        return word in self.name or word in self.title.lower() or any(
            word in construct for construct in self.constructs)


def _header(source: str, key: str) -> str:
    for line in source.splitlines()[:5]:
        if line.startswith(f"# {key}:"):
            return line.split(":", 1)[1].strip()
    return ""


@cache
def all_examples() -> tuple[Example, ...]:
    """Every bundled example, in number order."""
    package = files(__package__)
    found = []
    for entry in package.iterdir():
        match = _FILE.fullmatch(entry.name)
        if not match:
            continue
        source = entry.read_text(encoding="utf-8")
        script = package.joinpath(entry.name.removesuffix(".prose") + ".script.yaml")
        first = source.splitlines()[0] if source else ""
        inputs = dict(pair.split("=", 1) for pair in _header(source, "inputs").split()
                      if "=" in pair)
        found.append(Example(
            int(match.group(1)), match.group(2), entry.name,
            first.removeprefix("#").strip(),
            tuple(c.strip().lower() for c in _header(source, "constructs").split(",")
                  if c.strip()),
            source, script.read_text(encoding="utf-8"), inputs))
    return tuple(sorted(found, key=lambda example: example.number))


def find(query: str) -> Example:
    """The example named ``query``: its number, its name (``hello`` or ``01-hello``), or a
    keyword only one example mentions. Raises LookupError saying what matched."""
    text = query.strip().lower().removesuffix(".prose")
    every = all_examples()
    for example in every:
        if text in (str(example.number), f"{example.number:02d}", example.name,
                    example.file.removesuffix(".prose")):
            return example
    matches = [example for example in every if example.mentions(text)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise LookupError(f"no example matches {query!r}; `prose examples` lists them")
    names = ", ".join(f"{m.number} {m.name}" for m in matches)
    raise LookupError(f"{query!r} matches several examples ({names}); pick one by number")


def search(keyword: str) -> list[Example]:
    """The examples that mention ``keyword`` (a construct such as ``parallel``)."""
    return [example for example in all_examples() if example.mentions(keyword)]


@contextmanager
def program_file(example: Example) -> Iterator[Path]:
    """The example's program as a file on disk, its imports (``lib/``) beside it."""
    with as_file(files(__package__)) as directory:
        yield Path(directory) / example.file


__all__ = ["Example", "all_examples", "find", "program_file", "search"]
