"""Skills: folders with a ``SKILL.md`` that an agent's sessions are offered.

A program imports a skill (``import "name" from "source"``) and an agent lists it in
``skills: [...]``. The source is a local path (``./…``, ``../…``, ``/…``, relative to the
program's file) or ``github:owner/repo[/path]``, fetched once as an archive and cached under
``.prose/cache/skills/`` like remote programs are. In the source, the skill is the folder
itself, ``NAME/`` or ``skills/NAME/`` — the first holding a ``SKILL.md``. Its name and
description (the ``SKILL.md`` front matter) are given to the session up front; its files are
readable on demand with the session's read tool. A skill that cannot be resolved is a
warning at the start of the run naming it, never silently dropped.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from openprose.engine.permissions import SKILL_CACHE, STATE_DIR
from openprose.errors import OpenProseError
from openprose.language import nodes as n

#: Where ``github:owner/repo`` archives come from (a mirror, or a local server in tests).
GITHUB_ARCHIVE = "OPENPROSE_GITHUB_ARCHIVE"
DEFAULT_ARCHIVE = "https://codeload.github.com"
MAX_ARCHIVE = 50 * 1024 * 1024
_GITHUB = re.compile(r"^github:([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)((?:/[^/]+)*)/?$")


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    folder: Path


class SkillUnavailable(OpenProseError):
    """Why a skill could not be resolved (becomes the run's warning)."""


def resolve_skills(program: n.Program, file: str | None, project: Path,
                   env: dict[str, str] | None = None) -> tuple[dict[str, Skill], list[str]]:
    """The skills the program's agents use, resolved; and a warning for each one that could
    not be (naming it, its source and why)."""
    env = dict(os.environ) if env is None else env
    sources = {node.name.text: node.source.text for node in program.body
               if isinstance(node, n.ImportSkill)}
    found: dict[str, Skill] = {}
    warnings: list[str] = []
    for name in _used(program):
        source = sources.get(name)
        if source is None:
            warnings.append(f"skill '{name}' is not imported: its sessions run without it "
                            f"(add import \"{name}\" from \"<path or github:owner/repo>\")")
            continue
        try:
            found[name] = _resolve(name, source, file, project, env)
        except SkillUnavailable as err:
            warnings.append(f"skill '{name}' from \"{source}\" is unavailable ({err}): its "
                            "sessions run without it")
    return found, warnings


def _used(program: n.Program) -> list[str]:
    names: dict[str, None] = {}
    for node in n.walk(program):
        if isinstance(node, n.AgentDef | n.Session):
            prop = node.property("skills")
            if prop is not None and isinstance(prop.value, n.Array):
                for item in prop.value.items:
                    if isinstance(item, n.String):
                        names[item.text] = None
    return list(names)


def _resolve(name: str, source: str, file: str | None, project: Path,
             env: dict[str, str]) -> Skill:
    github = _GITHUB.match(source)
    if github:
        owner, repo, sub = github.groups()
        base = _fetch(owner, repo, project, env) / sub.strip("/")
    elif source.startswith(("./", "../", "/")):
        program_dir = Path(file).resolve().parent if file and Path(file).is_file() else project
        base = (program_dir / source).resolve()
    else:
        raise SkillUnavailable("only local paths and github:owner/repo sources are supported")
    for folder in (base, base / name, base / "skills" / name):
        if (folder / "SKILL.md").is_file():
            return Skill(name, _description(folder / "SKILL.md"), folder.resolve())
    raise SkillUnavailable(f"no SKILL.md in {base}, {base / name} or {base / 'skills' / name}")


def _description(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    match = re.match(r"---\n(.*?)\n---", text, re.S)
    if match:
        try:
            meta = yaml.safe_load(match.group(1))
        except yaml.YAMLError:
            meta = None
        if isinstance(meta, dict) and isinstance(meta.get("description"), str):
            return " ".join(meta["description"].split())
    body = text[match.end():] if match else text
    first = next((line.strip() for line in body.splitlines() if line.strip()
                  and not line.startswith("#")), "")
    return first[:300]


def _fetch(owner: str, repo: str, project: Path, env: dict[str, str]) -> Path:
    """The repository's files: cached, else its archive downloaded and unpacked (safely)."""
    url = f"{env.get(GITHUB_ARCHIVE, DEFAULT_ARCHIVE).rstrip('/')}/{owner}/{repo}/tar.gz/HEAD"
    cache = project / STATE_DIR / SKILL_CACHE / \
        f"{owner}--{repo}--{hashlib.sha256(url.encode()).hexdigest()[:12]}"
    if cache.is_dir():
        return _top(cache)
    import httpx  # only when an archive is downloaded: runs without skills never pay for it

    try:
        response = httpx.get(url, timeout=15, follow_redirects=True)
    except httpx.HTTPError as err:
        raise SkillUnavailable(f"cannot fetch {url}: {err}") from None
    if response.status_code != 200:
        raise SkillUnavailable(f"fetching {url} answered HTTP {response.status_code}")
    if len(response.content) > MAX_ARCHIVE:
        raise SkillUnavailable(f"{url} is larger than {MAX_ARCHIVE // 1024 // 1024} MiB")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=cache.name + ".", suffix=".part",
                                        dir=cache.parent))
        partial.chmod(0o755)  # as a folder made by mkdir would be (mkdtemp's is 0o700)
    except OSError as err:
        raise SkillUnavailable(f"cannot unpack {url} under {cache.parent}: {err}") from None
    try:
        with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as archive:
            archive.extractall(partial, members=_plain_members(archive), **_DATA_FILTER)
        os.replace(partial, cache)
    except (tarfile.TarError, OSError) as err:
        shutil.rmtree(partial, ignore_errors=True)
        if not cache.is_dir():
            raise SkillUnavailable(f"{url} is not a usable archive: {err}") from None
        # another run (or session of a server) unpacked the same archive first: use it
    return _top(cache)


#: tarfile's own "data" filter where this Python has it (3.11.4 and later); before that,
#: :func:`_plain_members` alone keeps the archive inside its folder.
_DATA_FILTER: dict[str, str] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _plain_members(archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The archive's regular files and folders whose names stay inside the folder they are
    unpacked into; links, devices, absolute names and ``..`` are left out, and no file is
    made executable by another user or set-id."""
    kept = []
    for member in archive.getmembers():
        parts = PurePosixPath(member.name).parts
        if not (member.isfile() or member.isdir()) or member.name.startswith("/") \
                or ".." in parts or not parts:
            continue
        member.mode &= 0o755
        kept.append(member)
    return kept


def _top(folder: Path) -> Path:
    """An archive's single top folder (GitHub's ``repo-sha/``), else the folder itself."""
    entries = list(folder.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else folder
