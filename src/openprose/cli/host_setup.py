"""What each chat host needs to reach ``prose serve``: the Claude Desktop ``mcpServers`` entry
(merged into an existing config file, backed up first), the Claude Code plugin and
``claude mcp add`` lines, Codex CLI's server table and skill, the other clients' entries, and
where the plugin folder is on this installation."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from types import ModuleType

from openprose.errors import OpenProseError
from openprose.state.files import atomic_write

SERVER_NAME = "openprose"
MARKETPLACE_NAME = "openprose"
PLUGIN_ID = f"{SERVER_NAME}@{MARKETPLACE_NAME}"
MARKETPLACE_FILE = Path(".claude-plugin") / "marketplace.json"
# The plugin's server entry (``.mcp.json`` runs it): finds prose, or explains how to install it.
LAUNCHER = Path("skill") / "bin" / "prose_mcp.py"
SKILL_NAME = "open-prose"


class HostSetupError(OpenProseError):
    """Setup cannot proceed; the message names the file and the problem."""


def prose_executable() -> Path:
    """The absolute path of the ``prose`` command running now (or installed beside Python)."""
    names = ("prose", "prose.exe")
    argv0 = Path(sys.argv[0])
    if argv0.name in names and argv0.is_file():
        return argv0.absolute()
    for name in names:
        beside = Path(sys.executable).parent / name
        if beside.is_file():
            return beside.absolute()
    found = shutil.which("prose")
    if found:
        return Path(found).absolute()
    raise HostSetupError("cannot find the 'prose' executable; install the openprose package "
                         "so that 'prose' is on PATH")


def marketplace_root() -> Path | None:
    """The folder holding ``.claude-plugin/marketplace.json``: the source checkout this package
    runs from, or the copy a wheel carries; None if neither is present."""
    checkout = Path(__file__).resolve().parents[3]
    if (checkout / MARKETPLACE_FILE).is_file():
        return checkout
    bundled = Path(str(files("openprose").joinpath("claude_plugin")))
    if (bundled / MARKETPLACE_FILE).is_file():
        return bundled
    return None


def plugin_launcher(marketplace: Path) -> ModuleType:
    """The plugin's server launcher (``skill/bin/prose_mcp.py``, standard library only, not
    part of this package): it owns where ``prose`` is looked for and recorded."""
    launcher = marketplace / LAUNCHER
    spec = importlib.util.spec_from_file_location("openprose_plugin_launcher", launcher)
    if spec is None or spec.loader is None:
        raise HostSetupError(f"{launcher}: cannot load the plugin's server launcher")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record_for_plugin(executable: Path, marketplace: Path | None) -> Path | None:
    """Record ``executable`` where the plugin's server launcher looks for ``prose``; the
    record file, or None without the plugin folder."""
    if marketplace is None:
        return None
    return plugin_launcher(marketplace).record(executable)


def desktop_config_path() -> Path:
    """Claude Desktop's ``claude_desktop_config.json`` for this user and platform."""
    home = Path.home()
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    if sys.platform == "win32":
        appdata = os.environ.get("APPDATA") or str(home / "AppData" / "Roaming")
        return Path(appdata) / "Claude" / "claude_desktop_config.json"
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    return Path(config_home) / "Claude" / "claude_desktop_config.json"


def server_entry(executable: Path, project: Path) -> dict:
    """The ``mcpServers`` entry that starts ``prose serve`` for ``project``."""
    return {"command": str(executable), "args": ["serve", "--project", str(project)]}


@dataclass(frozen=True)
class DesktopResult:
    config: Path
    changed: bool
    backup: Path | None
    replaced: dict | None  # the previous openprose entry, when there was a different one


def install_desktop(config: Path, entry: dict) -> DesktopResult:
    """Merge ``entry`` as ``mcpServers.openprose`` into ``config``, keeping everything else.

    An existing file is copied to a new timestamped backup before it is rewritten; the new
    content is written to a temporary file and moved into place. Nothing changes (and no
    backup is made) when the entry is already there.
    """
    if config.is_symlink():
        raise HostSetupError(f"{config} is a symbolic link; pass --config with the file it "
                             "points to")
    data: dict = {}
    original: bytes | None = None
    if config.exists():
        if not config.is_file():
            raise HostSetupError(f"{config} is not a regular file")
        original = config.read_bytes()
        if original.strip():
            try:
                data = json.loads(original)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise HostSetupError(f"{config}: not valid JSON ({exc}); fix or move it, "
                                     "then run this again") from None
        if not isinstance(data, dict):
            raise HostSetupError(f"{config}: the top level is not a JSON object")
    servers = data.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise HostSetupError(f"{config}: 'mcpServers' is not a JSON object")
    previous = servers.get(SERVER_NAME)
    if previous == entry:
        return DesktopResult(config, False, None, None)
    servers[SERVER_NAME] = entry
    backup = None
    if original is not None:
        backup = _backup(config, original)
    config.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(config, json.dumps(data, indent=2, ensure_ascii=False) + "\n", durable=True,
                 private=True)
    return DesktopResult(config, True, backup, previous)


def _backup(config: Path, content: bytes) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        suffix = f".{stamp}.bak" if n == 0 else f".{stamp}-{n}.bak"
        target = config.with_name(config.name + suffix)
        try:
            with target.open("xb") as handle:  # never overwrites an earlier backup
                handle.write(content)
        except FileExistsError:
            continue
        shutil.copymode(config, target)
        return target
    raise HostSetupError(f"cannot find a free backup name beside {config}")


@dataclass(frozen=True)
class ClientEntry:
    """What one more MCP client needs: where the snippet goes and the snippet itself."""

    client: str
    place: str
    snippet: str


def codex_table(entry: dict) -> str:
    """The stdio server ``entry`` as Codex CLI's ``[mcp_servers.openprose]`` TOML table."""
    command, args = entry["command"], entry["args"]
    # JSON strings are valid TOML basic strings (json.dumps escapes to ASCII).
    return "\n".join([
        f"[mcp_servers.{SERVER_NAME}]",
        f"command = {json.dumps(command)}",
        f"args = [{', '.join(json.dumps(arg) for arg in args)}]",
        "# a guided run makes many calls: approve this server's tools once, here",
        'default_tools_approval_mode = "approve"',
        "# if prose cannot start, Codex stops and names it instead of going on without it",
        "required = true",
        "# the first start (or a busy machine) can take longer than Codex's 10 s default",
        "startup_timeout_sec = 60"])


def client_entries(entry: dict) -> list[ClientEntry]:
    """The stdio server ``entry`` in the configuration format of Codex CLI (TOML), Cursor and
    VS Code (``mcp.json``) and Gemini CLI (``settings.json``)."""
    mcp_servers = json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2)
    vscode = json.dumps({"servers": {SERVER_NAME: {"type": "stdio", **entry}}}, indent=2)
    return [
        ClientEntry("Codex CLI", "~/.codex/config.toml (or run: prose install-skill --codex)",
                    codex_table(entry)),
        ClientEntry("Cursor", "~/.cursor/mcp.json (or .cursor/mcp.json in the project)",
                    mcp_servers),
        ClientEntry("VS Code", ".vscode/mcp.json in the project (or the user mcp.json: "
                    "MCP: Open User Configuration)", vscode),
        ClientEntry("Gemini CLI", "~/.gemini/settings.json (or .gemini/settings.json in the "
                    "project)", mcp_servers),
    ]


def codex_home() -> Path:
    """Codex CLI's folder: ``CODEX_HOME``, or ``~/.codex``."""
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


@dataclass(frozen=True)
class CodexResult:
    config: Path
    changed: bool
    backup: Path | None
    replaced: bool  # an earlier, different openprose table (kept in the backup)
    skill: Path | None  # where the open-prose skill was copied, when the plugin folder exists


def install_codex(home: Path, snippet: str, marketplace: Path | None) -> CodexResult:
    """Put the ``[mcp_servers.openprose]`` table ``snippet`` into ``home/config.toml`` and the
    open-prose skill into ``home/skills/open-prose``.

    Every other line of the config is kept as written: an earlier openprose table (and its
    sub-tables) is cut out as text and the snippet appended, and the result must parse to the
    same settings apart from that table, or nothing is written. A changed file is backed up
    first; a second run changes nothing.
    """
    config = home / "config.toml"
    if config.is_symlink():
        raise HostSetupError(f"{config} is a symbolic link; edit the file it points to")
    original = config.read_text(encoding="utf-8") if config.is_file() else ""
    before = _toml(config, original)
    wanted = tomllib.loads(snippet)["mcp_servers"][SERVER_NAME]
    previous = (before.get("mcp_servers") or {}).get(SERVER_NAME)
    changed = previous != wanted
    backup = None
    if changed:
        kept = _without_table(original, f"mcp_servers.{SERVER_NAME}")
        text = kept.rstrip("\n") + ("\n\n" if kept.strip() else "") + snippet + "\n"
        try:
            after = tomllib.loads(text)
        except tomllib.TOMLDecodeError:  # e.g. dotted openprose keys outside its table
            after = {"mcp_servers": {}}
        if _but_ours(after) != _but_ours(before) or \
                after["mcp_servers"].get(SERVER_NAME) != wanted:
            raise HostSetupError(f"{config}: cannot replace its [mcp_servers.{SERVER_NAME}] "
                                 "table without touching other settings; edit it by hand")
        if config.exists():
            backup = _backup(config, original.encode("utf-8"))
        home.mkdir(parents=True, exist_ok=True)
        atomic_write(config, text, durable=True, private=True)
    skill = None
    if marketplace is not None:
        skill = home / "skills" / SKILL_NAME
        _replace_tree(marketplace / "skill" / "skills" / SKILL_NAME, skill)
    return CodexResult(config, changed, backup, changed and previous is not None, skill)


def _toml(path: Path, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HostSetupError(f"{path}: not valid TOML ({exc}); fix it, then run this "
                             "again") from None


def _but_ours(data: dict) -> dict:
    servers = {k: v for k, v in (data.get("mcp_servers") or {}).items() if k != SERVER_NAME}
    rest = {k: v for k, v in data.items() if k != "mcp_servers"}
    return {**rest, "mcp_servers": servers} if servers else rest


def _without_table(text: str, name: str) -> str:
    """``text`` without the lines of table ``[name]`` and its sub-tables."""
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        header = line.strip()
        if header.startswith("[") and not header.startswith("[["):
            title = header.strip("[]").split("#")[0].strip().replace(" ", "")
            inside = title == name or title.startswith(name + ".")
        if not inside:
            kept.append(line)
    return "".join(kept)


def _replace_tree(source: Path, target: Path) -> None:
    """Copy the folder ``source`` to ``target``, replacing an earlier copy only once the new
    one is complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        shutil.copytree(source, staging, dirs_exist_ok=True)
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            staging.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def claude_code_lines(executable: Path, marketplace: Path | None) -> list[str]:
    """Shell lines that install the plugin (when its folder is available) and, as the
    alternative without the skill, register only the MCP server."""
    lines = []
    if marketplace is not None:
        lines += ["# the plugin: the open-prose skill, the /prose command and the MCP server",
                  f"claude plugin marketplace add {shlex.quote(str(marketplace))}",
                  f"claude plugin install {PLUGIN_ID}"]
    lines += ["# or only the MCP server, for every project of this user",
              f"claude mcp add --scope user {SERVER_NAME} -- {shlex.quote(str(executable))} serve"]
    return lines
