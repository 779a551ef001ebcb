"""``use`` imports: resolve, fetch, cache and compile imported programs.

Resolution (ruling 6): ``http(s)://`` URLs are fetched as given; ``handle/slug`` (optionally
``@handle/slug``) is registry shorthand for ``https://p.prose.md/handle/slug``; anything else
is a local path relative to the importing file (or URL); ``OPENPROSE_REGISTRY`` points the
shorthand at another registry (a mirror, or a local server in tests). Fetched programs are cached under
``.prose/cache/imports/`` by content hash, with an index from URL to hash, so a run can go on
when the network cannot; imported programs' own ``use`` statements resolve the same way.

A local import must be a regular ``.prose`` file (after following links) inside an allowed
root — the project and the directory of the program being run, checked by
:func:`openprose.paths.contained` — of at most
:data:`~openprose.language.files.MAX_PROGRAM_BYTES`; an error about a file that is not a program never shows its text.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlparse

from openprose.engine.errors import ImportFailed
from openprose.language import CompileResult
from openprose.language import compile as compile_program
from openprose.language import nodes as n
from openprose.language.files import ProgramFileError, read_program_file
from openprose.paths import PathRefused, contained

if TYPE_CHECKING:  # httpx is imported when a program is fetched: local runs never load it
    import httpx

REGISTRY = "https://p.prose.md"
_SHORTHAND = re.compile(r"^@?([A-Za-z0-9_][A-Za-z0-9_.-]*)/([A-Za-z0-9_][A-Za-z0-9_.-]*)$")


@dataclass(frozen=True, slots=True)
class Location:
    """Where an imported program comes from; ``state_name`` is its ``handle--slug`` dir."""

    where: str
    is_url: bool
    state_name: str


def resolve(spec: str, base: str | None, here: Path | None = None) -> Location:
    """Resolve a ``use`` path against the importing program's file or URL (``here``, else
    the working directory, for a program that is no file)."""
    if spec.startswith(("http://", "https://")):
        return Location(spec, True, _url_state_name(spec))
    shorthand = _SHORTHAND.match(spec)
    if shorthand and not spec.endswith(".prose"):
        handle, slug = shorthand.groups()
        registry = os.environ.get("OPENPROSE_REGISTRY", REGISTRY).rstrip("/")
        return Location(f"{registry}/{handle}/{slug}", True, f"{handle}--{slug}")
    if base is not None and base.startswith(("http://", "https://")):
        url = urljoin(base, spec)
        return Location(url, True, _url_state_name(url))
    root = Path(base).parent if base else (here or Path.cwd())
    path = (root / spec).resolve()
    return Location(str(path), False, f"local--{path.stem}")


def _url_state_name(url: str) -> str:
    parsed = urlparse(url)
    parts = [p for p in parsed.path.split("/") if p]
    slug = Path(parts[-1]).stem if parts else "index"
    handle = parts[-2] if len(parts) >= 2 else parsed.hostname or "remote"
    return f"{handle}--{slug}"


@dataclass(frozen=True, slots=True)
class Imported:
    """An imported program, compiled and ready to call, with its own imports."""

    handle: str
    program: n.Program
    source: str
    file: str
    imports: dict[str, Imported] = field(default_factory=dict)


class ImportLoader:
    """Loads imported programs (recursively) with an on-disk cache for fetched ones. Local
    imports are read only inside ``roots`` and the directory of the program being loaded.
    ``base``: what a relative program path is relative to, and where a program that is no
    file sits (the project); None: the working directory."""

    def __init__(self, cache_dir: Path, client: httpx.Client | None = None,
                 roots: list[Path] | None = None, base: Path | None = None) -> None:
        self.cache_dir = cache_dir
        self.client = client
        self.roots = [Path(root).resolve() for root in roots or []]
        self.base = base
        self._allowed = self.roots

    def load(self, program: n.Program, file: str | None, seen: tuple[str, ...] = ()
             ) -> dict[str, Imported]:
        here = (self.base or Path.cwd()).resolve()
        if not seen:  # the program being run: its directory is an allowed root
            top = here
            if file and "://" not in file:
                file = str((here / file).resolve())
                top = Path(file).parent
            self._allowed = [*self.roots, top]
        loaded: dict[str, Imported] = {}
        for use in program.uses:
            location = resolve(use.path.text, file, here)
            if location.where in seen:
                raise ImportFailed(f"import cycle through {location.where}")
            source = self.fetch(location, use.path.text, keep=False)
            result = compile_program(source, location.where)
            if not result.ok or result.program is None:
                raise ImportFailed(_not_compiling(use.path.text, location, result, source))
            if location.is_url:  # kept for offline runs once it is known to be a program
                self._store(location.where, source)
            nested = self.load(result.program, location.where, (*seen, location.where))
            loaded[use.handle] = Imported(location.state_name, result.program, source,
                                          location.where, nested)
        return loaded

    def fetch(self, location: Location, spec: str | None = None, *, keep: bool = True) -> str:
        """The program's text; a fetched one is cached when ``keep``."""
        if not location.is_url:
            return self._read_local(Path(location.where), spec or location.where)
        import httpx

        try:
            client = self.client or httpx.Client(follow_redirects=True, timeout=30)
            response = client.get(location.where)
            response.raise_for_status()
        except httpx.HTTPError as err:
            cached = self._cached(location.where)
            if cached is not None:
                return cached
            reason = (f"HTTP {err.response.status_code} {err.response.reason_phrase}"
                      if isinstance(err, httpx.HTTPStatusError)
                      else (str(err).splitlines() or [type(err).__name__])[0])
            raise ImportFailed(f"cannot fetch {location.where}: {reason}") from err
        if keep:
            self._store(location.where, response.text)
        return response.text

    def _read_local(self, path: Path, spec: str) -> str:
        """A local program inside an allowed root (see :func:`read_program_file`)."""
        if path.suffix != ".prose":
            raise ImportFailed(f"use {spec!r}: a local import must be a .prose file")
        try:
            return read_program_file(contained(path, self._allowed, base=path.parent,
                                               what=f"use {spec!r}:",
                                               within="the project"))
        except PathRefused as err:
            raise ImportFailed(f"use {spec!r}: {err}") from None
        except ProgramFileError as err:
            raise ImportFailed(f"use {spec!r}: {err}") from None

    def _index(self) -> dict[str, str]:
        try:
            return json.loads((self.cache_dir / "index.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def _cached(self, url: str) -> str | None:
        digest = self._index().get(url)
        if digest is None:
            return None
        try:
            text = (self.cache_dir / f"{digest}.prose").read_text(encoding="utf-8")
        except OSError:
            return None
        return text if hashlib.sha256(text.encode()).hexdigest() == digest else None

    def _store(self, url: str, text: str) -> None:
        digest = hashlib.sha256(text.encode()).hexdigest()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        (self.cache_dir / f"{digest}.prose").write_text(text, encoding="utf-8")
        index = self._index()
        index[url] = digest
        tmp = self.cache_dir / "index.json.tmp"
        tmp.write_text(json.dumps(index, indent=1), encoding="utf-8")
        tmp.replace(self.cache_dir / "index.json")


def _not_compiling(spec: str, location: Location, result: CompileResult, source: str) -> str:
    """Why an imported program cannot be used. A fetched one's text is never quoted: a
    program may name any URL, and the answer of a server on the user's network (a cloud's
    metadata service, a local admin page) is no program to show to whoever asked."""
    if not result.errors:
        return f"imported program {spec} has errors:\nno program"
    first = result.errors[0]
    if location.is_url:
        return (f"imported program {spec} is not a program: {len(result.errors)} error(s), the "
                f"first {first.code} at line {first.span.line} (its text is not shown: it came "
                "from the network)")
    return f"imported program {spec} has errors:\n{first.format(source)}"
