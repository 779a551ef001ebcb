"""Project configuration: ``.prose/.env`` (key=value lines) and where PostgreSQL lives."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from openprose.terminal import printable


def read_env_file(project_root: Path) -> dict[str, str]:
    """Parse ``.prose/.env``: ``KEY=value`` lines; blank lines and ``#`` comments ignored;
    values may be quoted."""
    path = project_root / ".prose" / ".env"
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # no file, or no .prose/ directory
        return {}
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


#: The bearer token ``prose serve --http`` requires.
MCP_TOKEN_SETTING = "OPENPROSE_MCP_TOKEN"
#: ``prose serve``: ``run_program`` queues its runs for ``prose worker`` processes.
WORKERS_SETTING = "OPENPROSE_WORKERS"
#: The PostgreSQL server runs are kept in (with their inputs and outputs).
POSTGRES_URL_SETTING = "OPENPROSE_POSTGRES_URL"
#: Limits on what a run spends and its sessions do: a run's tokens and dollars, a session's
#: model turns, a shell command's seconds before it is killed.
MAX_TOKENS_SETTING = "OPENPROSE_MAX_TOKENS"
MAX_COST_SETTING = "OPENPROSE_MAX_COST"
MAX_TURNS_SETTING = "OPENPROSE_MAX_TURNS"
COMMAND_TIMEOUT = "OPENPROSE_BASH_TIMEOUT"
#: Settings that carry trust: whose API key sessions run under, where the model API (and with
#: it the API key) goes, where run state goes, the MCP server's bearer token, the limits above,
#: and every ``OPENPROSE_ALLOW_*`` consent and ``OPENPROSE_PRICE_*`` price (a price of 0 voids
#: a dollar limit). A ``.prose/.env`` that git tracks came with the repository, so its author
#: does not get to set them.
TRUST_SETTINGS = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", POSTGRES_URL_SETTING,
                            MCP_TOKEN_SETTING, MAX_TOKENS_SETTING, MAX_COST_SETTING,
                            MAX_TURNS_SETTING, COMMAND_TIMEOUT})
TRUST_PREFIXES = ("OPENPROSE_ALLOW_", "OPENPROSE_PRICE_")
_GIT_TIMEOUT = 5


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting a user can give; ``name`` ends in ``<...>`` for a family of them.
    The settings reference (docs/reference/settings.md) is generated from :data:`SETTINGS`,
    and a test checks that every setting name the code reads is listed here."""

    name: str
    meaning: str
    environment_only: bool = False

    @property
    def trust(self) -> bool:
        prefix = self.name.split("<")[0]
        return self.name in TRUST_SETTINGS or prefix.startswith(TRUST_PREFIXES)


SETTINGS: tuple[Setting, ...] = (
    Setting("ANTHROPIC_API_KEY", "the key the Anthropic provider calls the model with; never "
            "printed, stored or put in a prompt"),
    Setting("ANTHROPIC_BASE_URL", "another endpoint that speaks the Anthropic Messages API"),
    Setting("OPENPROSE_MODEL_<ALIAS>", "the model id an alias of a program's `model:` means, "
            "e.g. OPENPROSE_MODEL_SONNET=claude-sonnet-5-5"),
    Setting("OPENPROSE_PRICE_<ALIAS>", "INPUT,OUTPUT US dollars per million tokens for that "
            "alias or model id; runs then report their cost"),
    Setting(POSTGRES_URL_SETTING, "the PostgreSQL server of `--state postgres`"),
    Setting("DATABASE_URL", "read when OPENPROSE_POSTGRES_URL is unset", environment_only=True),
    Setting("OPENPROSE_POSTGRES_SCHEMA", "the schema holding the runs (default openprose)"),
    Setting(MCP_TOKEN_SETTING, "the bearer token `prose serve --http` requires (16 or more "
            "printable characters); unset, each start makes one and prints it once"),
    Setting(MAX_TOKENS_SETTING, "a run's token budget when `--max-tokens` is not given"),
    Setting(MAX_COST_SETTING, "a run's budget in US dollars when `--max-cost` is not given"),
    Setting(MAX_TURNS_SETTING, "model turns a session may take before it fails (default 60)"),
    Setting(COMMAND_TIMEOUT, "seconds a session's shell command may run (default 120)"),
    Setting("OPENPROSE_ALLOW_BASH", "1: consent up front to commands where a program's "
            "permissions say `prompt` (its `deny` stays)"),
    Setting("OPENPROSE_ALLOW_NETWORK", "1: consent up front to network access where a "
            "program's permissions say `prompt`"),
    Setting("OPENPROSE_ALLOW_UNSANDBOXED_BASH", "1: run permitted commands unconfined where "
            "no OS sandbox exists"),
    Setting(WORKERS_SETTING, "1: `prose serve` (as `--workers`) queues `run_program`'s runs "
            "for `prose worker` processes and answers with the run id at once (needs "
            "`--state postgres`)"),
    Setting("OPENPROSE_WORKER_HEARTBEAT", "seconds between a worker's heartbeats (default 2)"),
    Setting("OPENPROSE_WORKER_STALLED_AFTER", "seconds without a heartbeat after which a "
            "worker's runs are handed to another worker (default 10)"),
    Setting("OPENPROSE_WORKER_STOP_TIMEOUT", "seconds a stopping worker waits for its runs "
            "before it interrupts them and hands them back (default 30)"),
    Setting("OPENPROSE_MAX_SESSIONS_<PROVIDER>", "sessions of that provider running at once "
            "across every worker (rate limits are per API key, not per machine)"),
    Setting("OTEL_EXPORTER_OTLP_ENDPOINT", "where runs send OpenTelemetry traces over "
            "OTLP/HTTP (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); unset, runs are not traced "
            "unless `--trace` is given", environment_only=True),
    Setting("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true: spans carry "
            "sessions' prompts and answers (never keys or settings)", environment_only=True),
    Setting("OPENPROSE_REGISTRY", "where `handle/slug` programs are fetched from (default "
            "https://p.prose.md)", environment_only=True),
    Setting("OPENPROSE_GITHUB_ARCHIVE", "where `github:owner/repo` skills are downloaded "
            "from (default https://codeload.github.com)", environment_only=True),
    Setting("OPENPROSE_PROJECT", "the project Claude Desktop's bundle serves (set by the "
            "bundle from its user configuration)", environment_only=True),
    Setting("OPENPROSE_STATE", "the state backend Claude Desktop's bundle serves with",
            environment_only=True),
)
_warned: set[tuple[str, tuple[str, ...]]] = set()
#: Per project: what git answered on whether it tracks ``.prose/.env``, and the identities
#: of the file and the git index it answered from (see :func:`_env_tracked`).
_tracked: dict[Path, tuple[tuple[object, ...], bool]] = {}
#: Variables that point git elsewhere than the ``.git`` found above the project.
_GIT_PLACES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CEILING_DIRECTORIES")


def untrusted_env_keys(project_root: Path, file: Mapping[str, str] | None = None
                       ) -> tuple[str, ...]:
    """The trust-carrying keys of ``.prose/.env`` that are ignored because git tracks the file
    (a cloned repository's choice, not the user's); empty when it holds none or is untracked.
    Git runs only when the file has such a key; without git the file counts as untracked."""
    file = read_env_file(project_root) if file is None else file
    keys = tuple(sorted(k for k, v in file.items()
                        if v and (k in TRUST_SETTINGS or k.startswith(TRUST_PREFIXES))))
    if not keys:
        return ()
    try:
        tracked = _env_tracked(project_root)
    except OSError:  # no git (or no project directory): nothing says the file was cloned
        return ()
    except subprocess.TimeoutExpired:  # cannot tell: the trust settings are not taken
        tracked = True
    return keys if tracked else ()


def _env_tracked(project_root: Path) -> bool:
    """Whether git tracks ``.prose/.env``. Settings are read on every MCP request, so git's
    answer is kept until the file or the index it came from changes (``git add``, a commit,
    ``git rm --cached`` and ``git init`` above the project all do); nothing is kept while
    git is pointed elsewhere by the environment."""
    try:
        key: tuple[object, ...] | None = (_identity(project_root / ".prose" / ".env"),
                                          *_git_index(project_root))
    except OSError:  # an unreadable .git file: git is asked every time
        key = None
    cached = _tracked.get(project_root)
    if cached is not None and cached[0] == key:
        return cached[1]
    tracked = run_git(project_root, "ls-files", "--error-unmatch", "--", ".prose/.env",
                      timeout=_GIT_TIMEOUT).returncode == 0
    if key is not None and not any(name in os.environ for name in _GIT_PLACES):
        _tracked[project_root] = (key, tracked)
    return tracked


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _git_index(project_root: Path) -> tuple[str | None, tuple[int, int, int] | None]:
    """The index of the repository holding ``project_root`` (the nearest ``.git`` above
    it: a folder, or a worktree's file saying ``gitdir: PATH``) and its identity."""
    for folder in (project_root.absolute(), *project_root.absolute().parents):
        dot_git = folder / ".git"
        if dot_git.is_dir():
            index = dot_git / "index"
        elif dot_git.is_file():
            text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
            index = folder / text.removeprefix("gitdir:").strip() / "index"
        else:
            continue
        return str(index), _identity(index)
    return None, None


def run_git(root: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` in ``root``, with the repository's fsmonitor hook off: ``core.fsmonitor``
    in a ``.git/config`` that came with the project (an archive, a nested repository) is a
    command git runs even for ``ls-files``. Raises OSError (no git) or TimeoutExpired."""
    return subprocess.run(["git", "-c", "core.fsmonitor=false", *args], cwd=root,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                          check=False)


def settings(project_root: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The project's settings: the environment, overridden by non-empty ``.prose/.env``
    values, except trust settings from a ``.prose/.env`` git tracks (warned about once)."""
    file = {key: value for key, value in read_env_file(project_root).items() if value}
    ignored = untrusted_env_keys(project_root, file)
    if ignored:
        path = project_root / ".prose" / ".env"
        if (str(path), ignored) not in _warned:
            _warned.add((str(path), ignored))
            print(f"warning: {printable(str(path))} is committed to git, so its "
                  f"{', '.join(ignored)} (settings that carry trust) are ignored; set them in "
                  "the environment, or untrack the file (git rm --cached .prose/.env)",
                  file=sys.stderr)
        for key in ignored:
            del file[key]
    return {**(os.environ if environ is None else environ), **file}


def postgres_schema(project_root: Path, environ: Mapping[str, str] | None = None) -> str:
    """OPENPROSE_POSTGRES_SCHEMA from .prose/.env, then the environment; default openprose."""
    return settings(project_root, environ).get("OPENPROSE_POSTGRES_SCHEMA") or "openprose"


def postgres_url(project_root: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """OPENPROSE_POSTGRES_URL from .prose/.env, then the environment, then DATABASE_URL."""
    environ = os.environ if environ is None else environ
    return (settings(project_root, environ).get(POSTGRES_URL_SETTING)
            or environ.get("DATABASE_URL"))


#: A password in a key=value connection string or a URL's query (``password=...``).
_PASSWORD_WORD = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)
_NOT_A_URL = ("the URL is not a valid connection string (postgresql://USER:PASSWORD@HOST:PORT/DB"
              " or key=value words)")


def postgres_shown(url: str) -> str:
    """The server a PostgreSQL ``url`` names, fit for any message: user, host, port and
    database, never the password (in a URL, its query or key=value words)."""
    parts = _conninfo(url)
    if parts is None:
        return "the configured OPENPROSE_POSTGRES_URL"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host') or 'localhost'}{port}/{parts.get('dbname', '')}"


def postgres_scrubbed(text: str, url: str) -> str:
    """``text`` (a driver's error about ``url``) with every secret of the URL replaced by
    ``***``; for a URL the driver cannot parse, a sentence saying so (the driver's own text
    may quote any part of it)."""
    parts = _conninfo(url)
    if parts is None:
        return _NOT_A_URL
    secrets = {url, parts.get("password", "")}
    for match in _PASSWORD_WORD.finditer(url):
        secrets.add(match.group(1))
        secrets.add(unquote(match.group(1).strip("'")))
    with contextlib.suppress(ValueError):
        password = urlsplit(url).password or ""
        secrets |= {password, unquote(password)}
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _conninfo(url: str) -> dict[str, str] | None:
    """``url``'s parts as the driver reads them (a URL or key=value words); None when it
    cannot read them."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        return {key: str(value) for key, value in conninfo_to_dict(url).items()}
    except Exception:  # any driver error, or no driver: nothing of the URL is shown
        return None
