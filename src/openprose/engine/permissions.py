"""What a session may do to the project: every work-tool call is decided here, before it runs.

An agent's ``permissions:`` block (or a session's own, which overrides it key by key) says
which paths its file tools may read and write (globs relative to the project; ``/…`` and
``~/…`` name places outside it), which commands it may run without being asked
(``execute:``), and whether it may use a shell (``bash:``) and the network (``network:``).
A key the program leaves out takes its default (:data:`DEFAULTS`):

- reads and writes anywhere inside the project, nothing outside it;
- ``.prose/`` (the run state, and ``.prose/.env`` with its secrets) is never readable or
  writable by a session: state changes only through the session's capability tools;
- shell commands and the network need consent (``prompt``) unless the program or the user
  (``--allow-bash``, ``--allow-network``, or the settings below) allows them.

A refusal names the agent, the rule and the path or command; the model gets it as an error
result and the journal records it.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openprose.paths import PathRefused, checked_text, inside_by_identity

MODES = ("allow", "deny", "prompt")
#: Settings (environment or ``.prose/.env``) that give the user's consent up front.
ALLOW_BASH = "OPENPROSE_ALLOW_BASH"
ALLOW_NETWORK = "OPENPROSE_ALLOW_NETWORK"
ALLOW_UNSANDBOXED = "OPENPROSE_ALLOW_UNSANDBOXED_BASH"
#: The project's own state: off limits to work tools.
STATE_DIR = ".prose"
#: Where skills fetched from GitHub are kept, inside ``STATE_DIR``: readable as skills.
SKILL_CACHE = "cache/skills"
#: The project's repository (its config and hooks run code on the user's next git command).
GIT_DIR = ".git"
#: Files and folders of the project that other programs run code from later, outside any
#: sandbox and without the person asking for that code: on a git command (config, hooks,
#: pre-commit), on entering a folder (direnv), on starting an agent or an editor (Claude
#: Code's settings, hooks, agents and commands; MCP server lists; VS Code tasks, launch and
#: settings; JetBrains run configurations; dev containers), on a push (CI workflows). Never
#: writable unless a ``write:`` pattern names the place itself (``write: [".github/**"]``,
#: not ``**``). Globs relative to the project, matched ignoring case. Files that run only
#: when the person runs them (a Makefile, package.json scripts, tests) are the project's
#: code like any other source and stay under ``write:``.
RUNS_CODE_LATER = (
    "**/.git", ".gitmodules", "**/.envrc", ".pre-commit-config.yaml", ".husky", ".lefthook.yml",
    ".claude/settings.json", ".claude/settings.local.json", ".claude/hooks", ".claude/agents",
    ".claude/commands", ".mcp.json", ".vscode/tasks.json", ".vscode/launch.json",
    ".vscode/settings.json", ".vscode/mcp.json", ".cursor/mcp.json", ".idea", ".devcontainer",
    ".github/workflows", ".github/actions", ".gitlab-ci.yml", ".circleci")
#: Places in the user's home that hold credentials, hidden from sessions by what they
#: resolve to: commands see an empty folder or file there, and the file tools refuse them
#: unless a pattern names the place (``read: ["~/.claude/**"]``). The rest of the home stays
#: readable to commands, so toolchains installed there (pyenv, ~/.local) still work.
SECRET_PLACES = (".ssh", ".aws", ".gnupg", ".config", ".docker", ".kube", ".azure",
                 ".netrc", ".git-credentials", ".npmrc", ".pypirc", ".claude", ".codex",
                 ".prose", ".pgpass", ".password-store", ".vault-token", ".terraform.d",
                 ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
                 ".m2/settings.xml", ".local/share/keyrings", ".mozilla", ".bash_history",
                 ".zsh_history", ".python_history", ".psql_history", ".mysql_history")
#: Characters that make a command line more than one command: an ``execute:`` pattern never
#: vouches for such a line (it is asked for, or refused, like any other).
_COMPOUND = re.compile(r"[;&|`$<>()\n\\]")


@dataclass(frozen=True, slots=True)
class Permissions:
    """A ``permissions:`` block as written (``None``: the key is not given)."""

    read: tuple[str, ...] | None = None
    write: tuple[str, ...] | None = None
    execute: tuple[str, ...] | None = None
    bash: str | None = None
    network: str | tuple[str, ...] | None = None

    def over(self, base: Permissions | None) -> Permissions:
        """These permissions with ``base``'s for the keys not given here (a session's own
        block over its agent's)."""
        if base is None:
            return self
        return Permissions(*(mine if mine is not None else theirs for mine, theirs in
                             zip(self.fields(), base.fields(), strict=True)))

    def fields(self) -> tuple[Any, ...]:
        return (self.read, self.write, self.execute, self.bash, self.network)

    def effective(self) -> Permissions:
        """Every key filled in: given, else the default."""
        return self.over(DEFAULTS)

    def to_dict(self) -> dict[str, Any]:
        """The effective permissions as plain data (for a host's brief and for records)."""
        eff = self.effective()
        network = eff.network if isinstance(eff.network, str) else list(eff.network or ())
        return {"read": list(eff.read or ()), "write": list(eff.write or ()),
                "execute": list(eff.execute or ()), "bash": eff.bash, "network": network,
                "never": [f"{STATE_DIR}/"]}


#: What an agent without a ``permissions:`` block (or a key of it) gets.
DEFAULTS = Permissions(read=("**",), write=("**",), execute=(), bash="prompt",
                       network="prompt")


@dataclass(frozen=True, slots=True)
class Grants:
    """The user's consent given up front (flags or settings): ``prompt`` becomes ``allow``
    for shell commands / the network; ``unsandboxed`` lets commands run where no OS sandbox
    exists. A program's explicit ``deny`` stays a denial."""

    bash: bool = False
    network: bool = False
    unsandboxed: bool = False

    @classmethod
    def from_settings(cls, env: Mapping[str, str], *, bash: bool = False,
                      network: bool = False, unsandboxed: bool = False) -> Grants:
        return cls(bash or truthy(env.get(ALLOW_BASH)),
                   network or truthy(env.get(ALLOW_NETWORK)),
                   unsandboxed or truthy(env.get(ALLOW_UNSANDBOXED)))


def truthy(value: str | None) -> bool:
    """Whether a setting's value says yes (1, true, yes, on)."""
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one call. ``rule`` names what decided it (``write: [src/**]``,
    ``.prose/ is never writable``, ``bash: deny``, …)."""

    allowed: bool
    rule: str
    subject: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class ConsentRequest:
    """What a person is asked: may ``agent`` do ``subject`` (a command, or ``network``)
    for the statement ``statement``?"""

    agent: str
    tool: str
    subject: str
    statement: str


#: Asks a person; answers "yes", "no", "always" (this agent, this run), or ``None`` when
#: nobody can answer (no terminal, CI, a worker).
Consent = Callable[[ConsentRequest], "str | Awaitable[str | None] | None"]


@dataclass
class Policy:
    """Run-wide: the project, the user's grants, who to ask, and the answers "always"
    given so far (per agent and kind of call)."""

    project: Path
    grants: Grants = field(default_factory=Grants)
    consent: Consent | None = None
    always: set[tuple[str, str]] = field(default_factory=set)

    #: The user's home, whose :data:`SECRET_PLACES` stay hidden (default: ``$HOME``).
    home: Path | None = None
    #: Each glob of the run's permissions made absolute and compiled once, whatever number
    #: of sessions it applies to.
    _patterns: dict[str, Pattern] = field(default_factory=dict, init=False, repr=False,
                                          compare=False)

    def __post_init__(self) -> None:
        self.project = Path(os.path.realpath(self.project))

    @functools.cached_property
    def hidden(self) -> list[Path]:
        return secret_places(self.project, self.home or Path(os.environ.get("HOME") or "/"))

    def patterns(self, globs: tuple[str, ...] | None) -> list[Pattern]:
        """``globs`` (a permissions key's) as patterns over absolute paths in the project."""
        found = []
        for glob in globs or ():
            pattern = self._patterns.get(glob)
            if pattern is None:
                pattern = self._patterns[glob] = _absolute(glob, self.project)
            found.append(pattern)
        return found

    def gate(self, agent: str | None, permissions: Permissions | None,
             statement: str = "", skills: dict[str, Path] | None = None) -> Gate:
        """``skills``: the folders of the session's skills (name → folder), readable by it
        wherever they are."""
        return Gate(self, agent or "(no agent)", (permissions or Permissions()).effective(),
                    statement, skills or {})


class Gate:
    """One session's permissions, applied to each call it makes."""

    def __init__(self, policy: Policy, agent: str, permissions: Permissions,
                 statement: str, skills: dict[str, Path] | None = None) -> None:
        self.policy = policy
        self.skills = {name: Path(os.path.realpath(folder))
                       for name, folder in (skills or {}).items()}
        self.agent = agent
        self.permissions = permissions
        self.statement = statement

    # Made when the session first touches a path: most sessions never do.
    @functools.cached_property
    def read_patterns(self) -> list[Pattern]:
        return self.policy.patterns(self.permissions.read)

    @functools.cached_property
    def write_patterns(self) -> list[Pattern]:
        return self.policy.patterns(self.permissions.write)

    @property
    def project(self) -> Path:
        return self.policy.project

    # ------------------------------------------------------------------ paths

    def path(self, path: str, *, write: bool, listing: bool = False
             ) -> tuple[Decision, Path | None]:
        """May this session read (or write) ``path``? With the resolved path when allowed.
        ``listing``: a directory to search (glob, grep) — allowed where reading is allowed
        somewhere under it; the caller shows only the matches a read would allow."""
        verb = "write" if write else "read"
        root = self.project
        try:
            raw = os.path.expanduser(checked_text(path, "path"))
            lexical = Path(os.path.normpath(raw if os.path.isabs(raw) else root / raw))
            real = Path(os.path.realpath(lexical))
        except (PathRefused, ValueError, OSError) as err:
            return self._refuse(f"not a usable path: {err}", path, f"{verb} {path!r}"), None
        return self._decide(path, lexical, real, write=write, listing=listing)

    def readable(self, real: Path) -> bool:
        """May this session read ``real`` — a path met on a walk that follows no link, so it
        is its own real path and is judged as it stands, never resolved again."""
        return self._decide(str(real), real, real, write=False)[0].allowed

    def _decide(self, path: str, lexical: Path, real: Path, *, write: bool,
                listing: bool = False) -> tuple[Decision, Path | None]:
        verb = "write" if write else "read"
        root = self.project
        raw = path
        patterns = self.write_patterns if write else self.read_patterns
        state = root / STATE_DIR
        in_state = _within(real, state) or _within(lexical, state) or \
            inside_by_identity(real, state)
        if not write and (not in_state or _within(real, state / SKILL_CACHE)):
            # a skill's folder may hold the project (a repository that is a skill): its
            # .prose/ stays closed, but for the skills fetched into .prose's cache
            for name, folder in self.skills.items():
                if _within(real, folder):
                    return Decision(True, f"skill '{name}'", path), real
        if in_state:
            rule = f"{STATE_DIR}/ is never {'writable' if write else 'readable'} by a session"
            return self._refuse(rule, path, f"{verb} {path}"), None
        hidden = next((place for place in self.policy.hidden if _within(real, place)), None)
        if hidden is not None and not any(
                _within(Path(os.path.realpath(p.base)), hidden) for p in patterns):
            rule = f"{hidden} holds credentials: only a pattern naming it reaches it"
            return self._refuse(rule, path, f"{verb} {path}"), None
        place = runs_code_later(real, root) if write else None
        if place is not None and not _names(patterns, place, root):
            rule = (f"{place.removeprefix('**/')} runs code later: writable only when a "
                    "write: pattern names it")
            return self._refuse(rule, path, f"{verb} {path}"), None
        if write and _linked_elsewhere(real):
            return self._refuse("a hard link may lead outside the project", path,
                                f"{verb} {path}"), None
        inside = _within(real, root)
        granted = any(p.match(str(real)) or (listing and p.under(real)) for p in patterns)
        if inside and granted:
            return Decision(True, f"{verb}: {_shown(patterns)}", path), real
        if not inside:
            outside_grant = any(p.match(str(real)) and not p.inside
                                for p in patterns)
            if outside_grant:
                return Decision(True, f"{verb}: {_shown(patterns)}", path), real
            if not _within(lexical, root):
                rule = ("'..' leads outside the project" if ".." in Path(raw).parts
                        else "outside the project")
            else:
                rule = "a symlink leads outside the project"
            return self._refuse(rule, path, f"{verb} {path}"), None
        rule = f"{verb}: {_shown(patterns)}" if patterns else f"{verb}: []"
        return self._refuse(rule, path, f"{verb} {path} (not matched)"), None

    def write_roots(self) -> list[Path]:
        """Where a shell command may write: the existing places the write globs start at
        (a directory or a file), never ``.prose/``. The OS confines at this grain, so
        ``docs/**/*.md`` lets a command write anywhere under ``docs/``.
        A root inside the project whose real path leaves it (a link, made by an earlier
        command or committed in a cloned repository) is left out: binding it would open its
        target."""
        roots: list[Path] = []
        for pattern in self.write_patterns:
            base = Path(os.path.realpath(pattern.base))
            if not base.exists() or _within(base, self.project / STATE_DIR) or \
                    inside_by_identity(base, self.project / STATE_DIR):
                continue
            if pattern.inside and not _within(base, self.project):
                continue
            roots.append(base)
        return roots

    def kept_read_only(self) -> list[Path]:
        """Places a command must still not change inside its write roots: the existing
        top-level places of :data:`RUNS_CODE_LATER` no write pattern names, each whole, so
        it is a mount point that cannot be renamed away and refilled; one that is a link
        by what it resolves to in the project (``.prose/`` is always read-only in the
        sandbox)."""
        kept = []
        for entry in RUNS_CODE_LATER:
            place = Path(os.path.realpath(self.project / entry.removeprefix("**/")
                                          .split("/")[0]))
            if os.path.exists(place) and _within(place, self.project) and \
                    place not in kept and not _names(self.write_patterns, entry, self.project):
                kept.append(place)
        return kept

    # ------------------------------------------------------------------ commands, network

    def vouches(self, command: str) -> bool:
        """Whether an ``execute:`` pattern names this whole, simple command line."""
        return _vouched(command, self.permissions.execute or ())

    async def command(self, command: str) -> Decision:
        """May this session run ``command`` (in the sandbox)? Asks when the mode is
        ``prompt`` and no grant or earlier "always" answers it."""
        mode = self.permissions.bash or "prompt"
        if self.vouches(command):
            return Decision(True, f"execute: {list(self.permissions.execute or ())}", command)
        if mode == "deny":
            return self._refuse("bash: deny", command, f"run {command!r}")
        if mode == "allow":
            return Decision(True, "bash: allow", command)
        if self.policy.grants.bash:
            return Decision(True, "bash: prompt, allowed by --allow-bash", command)
        return await self._ask("bash", command, "bash: prompt", "--allow-bash", ALLOW_BASH)

    async def network(self, *, ask: bool = True) -> Decision:
        """May this session reach the network (web tools, and the shell's network)?
        ``ask``: under ``prompt``, ask a person (else refuse without asking)."""
        mode = self.permissions.network or "prompt"
        if isinstance(mode, tuple):
            return Decision(True, f"network: {list(mode)}", "network")
        if mode == "deny":
            return self._refuse("network: deny", "network", "use the network")
        if mode == "allow":
            return Decision(True, "network: allow", "network")
        if self.policy.grants.network:
            return Decision(True, "network: prompt, allowed by --allow-network", "network")
        if not ask and (self.agent, "network") not in self.policy.always:
            return self._refuse("network: prompt", "network", "use the network unasked")
        return await self._ask("network", "network", "network: prompt", "--allow-network",
                               ALLOW_NETWORK)

    def domains(self) -> tuple[str, ...] | None:
        """The hosts a ``network: [...]`` list names (``None``: no list)."""
        mode = self.permissions.network
        if not isinstance(mode, tuple):
            return None
        hosts = (host_of(entry.strip()) for entry in mode)
        return tuple(dict.fromkeys(host for host in hosts if host))

    async def _ask(self, tool: str, subject: str, rule: str, flag: str,
                   setting: str) -> Decision:
        key = (self.agent, tool)
        if key in self.policy.always:
            return Decision(True, f"{rule}, allowed always for this run", subject)
        answer = None
        if self.policy.consent is not None:
            answer = self.policy.consent(ConsentRequest(self.agent, tool, subject,
                                                        self.statement))
            if inspect.isawaitable(answer):
                answer = await answer
        what = f"run {subject!r}" if tool == "bash" else "use the network"
        if answer is None:
            return self._refuse(rule, subject, f"{what} without consent, and nobody can "
                                f"answer here; allow it with {flag} or {setting}=1")
        if answer == "always":
            self.policy.always.add(key)
        if answer in ("yes", "always"):
            return Decision(True, f"{rule}, allowed by the user", subject)
        return self._refuse(f"{rule}, declined by the user", subject, what)

    def _refuse(self, rule: str, subject: str, what: str) -> Decision:
        message = f"refused: agent '{self.agent}' may not {what} ({rule})"
        return Decision(False, rule, subject, message)


# ---------------------------------------------------------------------- globs


@dataclass(frozen=True, slots=True)
class Pattern:
    """A glob made absolute: ``text`` as shown, ``base`` its literal leading part."""

    text: str
    regex: re.Pattern[str]
    base: str
    inside: bool

    def match(self, path: str) -> bool:
        return self.regex.match(path) is not None

    def under(self, directory: Path) -> bool:
        """Whether this pattern can match something inside ``directory``."""
        base = Path(self.base)
        return _within(base, directory) or _within(directory, base)


def _absolute(pattern: str, root: Path) -> Pattern:
    raw = os.path.expanduser(pattern.strip())
    full = raw if os.path.isabs(raw) else os.path.join(str(root), raw)
    full = os.path.normpath(full)
    if pattern.strip().endswith("/") and not full.endswith("/"):
        full += "/**"
    parts = full.split(os.sep)
    literal = []
    for part in parts:
        if any(c in part for c in "*?["):
            break
        literal.append(part)
    base = os.sep.join(literal) or os.sep
    return Pattern(pattern, glob_regex(full), base, _within(Path(base), root))


def glob_regex(pattern: str, *, below: bool = True) -> re.Pattern[str]:
    """A glob as a regex over ``/``-separated paths: ``*`` and ``?`` stay within one
    component, ``**`` crosses them; a match also covers everything under the matched path
    (``src`` grants ``src/app.py``) unless ``below`` is false (a search's pattern)."""
    out, i = [], 0
    if below and pattern.endswith("/**"):  # a directory and everything in it
        return re.compile(re.escape(pattern[:-3]) + r"(?:/.*)?\Z", re.DOTALL) \
            if not any(c in pattern[:-3] for c in "*?[") else \
            re.compile(glob_regex(pattern[:-3]).pattern, re.DOTALL)
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + (r"(?:/.*)?\Z" if below else r"\Z"), re.DOTALL)


def _within(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def secret_places(project: Path, home: Path) -> list[Path]:
    """The :data:`SECRET_PLACES` of ``home`` that exist, by what they resolve to (a link
    ``~/.ssh -> dotfiles/ssh`` gives ``dotfiles/ssh``), never one holding the project (which
    must stay visible). One that cannot be checked is one the user cannot reach either."""
    found: list[Path] = []
    for name in SECRET_PLACES:
        try:
            real = Path(os.path.realpath(home / name))
            if not real.exists() or project.is_relative_to(real) or real == Path("/"):
                continue
        except (OSError, ValueError):
            continue
        if real not in found:
            found.append(real)
    return found


@functools.cache
def _code_regexes() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((entry, glob_regex(entry.lower())) for entry in RUNS_CODE_LATER)


def runs_code_later(path: Path, project: Path) -> str | None:
    """The entry of :data:`RUNS_CODE_LATER` that ``path`` (absolute, resolved) is or lies
    in, or ``None``; the project's ``.git`` is recognised by identity too (a second name of
    it, a file system that ignores case)."""
    if inside_by_identity(path, project / GIT_DIR):
        return "**/.git"
    if not _within(path, project):
        return None
    relative = path.relative_to(project).as_posix().lower()
    return next((entry for entry, regex in _code_regexes() if regex.match(relative)), None)


def _names(patterns: list[Pattern], entry: str, project: Path) -> bool:
    """Whether a write pattern names the place ``entry`` itself: its literal part reaches
    into it (``.github/**`` names ``.github/workflows``; ``**`` names nothing)."""
    top = project / entry.removeprefix("**/")
    for pattern in patterns:
        base = Path(pattern.base)
        if base != project and _within(base, project) and \
                (_within(base, top) or _within(top, base)):
            return True
        if entry.startswith("**/") and base != project and _within(base, project) and \
                top.name.lower() in (part.lower() for part in base.relative_to(project).parts):
            return True
    return False


def _linked_elsewhere(path: Path) -> bool:
    """A regular file with more than one name: a write through one changes the other,
    which may be anywhere on the file system."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink > 1


def _shown(patterns: list[Pattern]) -> str:
    return "[" + ", ".join(p.text for p in patterns) + "]"


def _vouched(command: str, patterns: tuple[str, ...]) -> bool:
    """Whether an ``execute:`` pattern names this whole, simple command line."""
    line = command.strip()
    if not patterns or not line or _COMPOUND.search(line):
        return False
    return any(glob_regex(p).match(line) for p in patterns)


def shown(text: str) -> str:
    """``text`` safe to show a person: control characters (a carriage return, an escape
    sequence that would redraw the line) written as ``\\xNN``, so what is asked about is
    what runs."""
    return "".join(c if c.isprintable() or c == " " else f"\\x{ord(c):02x}" for c in text)


def host_of(url: str) -> str:
    """``https://user@host:port/path`` or ``host`` → ``host`` (lower case)."""
    text = url.split("://", 1)[-1]
    return text.split("/", 1)[0].split("@")[-1].split(":")[0].lower()


# ---------------------------------------------------------------------- from the program


def permissions_of(block: Any, value: Callable[[Any], Any]) -> Permissions:
    """A ``permissions:`` property block (a :class:`~openprose.language.nodes.PropertyBlock`)
    as :class:`Permissions`; ``value`` evaluates an entry (an interpolated string, the name
    of a string const) to its text."""
    from openprose.language import nodes as n

    found: dict[str, Any] = {}
    for entry in getattr(block, "properties", ()):
        node = entry.value
        if entry.name in ("read", "write", "execute") or (
                entry.name == "network" and isinstance(node, n.Array)):
            items = node.items if isinstance(node, n.Array) else ()
            found[entry.name] = tuple(str(value(item)) for item in items)
        elif entry.name in ("bash", "network"):
            word = node.id if isinstance(node, n.Name) else getattr(node, "text", None)
            if word in MODES:
                found[entry.name] = word
    return Permissions(**found)


def permissions_for(session: Any, agent: Any, value: Callable[[Any], Any]
                    ) -> Permissions | None:
    """A session's permissions: the keys of its own ``permissions:`` block over its agent's
    (``session`` a Session node, ``agent`` an AgentDef node or ``None``); ``None`` when
    neither gives a block. ``value`` evaluates a pattern (see :func:`permissions_of`)."""
    from openprose.language import nodes as n

    found: Permissions | None = None
    for owner in (agent, session):  # the agent's first, then the session's over it
        prop = owner.property("permissions") if owner is not None else None
        if prop is not None and isinstance(prop.value, n.PropertyBlock):
            found = permissions_of(prop.value, value).over(found)
    return found


def grant_fields(agent: str | None, permissions: Permissions | None, key: str,
                 line: int = 0, model: str | None = None) -> dict[str, Any]:
    """What a session's grant records of its permissions (and its journal key, program
    line and model), so a host's hook can look them up from the session token alone
    (:mod:`openprose.engine.host_hook`)."""
    fields = {"agent": agent or "(no agent)", "key": key, "line": line,
              "permissions": (permissions or Permissions()).to_dict()}
    if model:
        fields["model"] = model
    return fields


def from_grant(fields: Mapping[str, Any]) -> Permissions:
    """The permissions :func:`grant_fields` recorded."""
    data = fields.get("permissions") or {}
    network = data.get("network")
    return Permissions(
        read=tuple(data.get("read") or ()), write=tuple(data.get("write") or ()),
        execute=tuple(data.get("execute") or ()), bash=data.get("bash") or "prompt",
        network=tuple(network) if isinstance(network, list) else (network or "prompt"))


def brief_permissions(permissions: Permissions | None) -> dict[str, str] | None:
    """A session's permissions as its brief shows them (what it may do; the host's hook
    enforces them where the host has one, elsewhere the host's own permission settings do).
    ``None`` when the program gives no permissions: the documented defaults apply, and the
    brief stays short."""
    if permissions is None:
        return None
    eff = permissions.to_dict()
    network = eff["network"] if isinstance(eff["network"], str) else \
        "only " + " ".join(eff["network"])
    return {"read": _listed(eff["read"]), "write": _listed(eff["write"]),
            "bash": eff["bash"], "network": network, "never": ".prose/"}


def _listed(patterns: list[str]) -> str:
    return "nothing" if not patterns else " ".join(patterns)
