"""The Claude Code plugin in ``skill/`` and the marketplace at the repository root: their
manifests agree with the package, Claude Code's own validator accepts them, and a user can add
the marketplace and install the plugin, whose server ``claude mcp list`` then reports connected."""

from __future__ import annotations

import json
import re
from importlib.metadata import version
from pathlib import Path

import yaml
from tests.hosts.claude_code import PLUGIN_DIR, REPO, run_claude

from openprose import prompts

SKILL = PLUGIN_DIR / "skills" / "open-prose" / "SKILL.md"


def frontmatter(path: Path) -> tuple[dict, str]:
    text = path.read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, f"{path} has no frontmatter"
    return yaml.safe_load(match.group(1)), text[match.end():]


def test_plugin_version_is_the_package_version() -> None:
    manifest = json.loads((PLUGIN_DIR / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "openprose"
    assert manifest["version"] == version("openprose")
    assert (PLUGIN_DIR / manifest["icon"]).is_file()


def test_marketplace_lists_the_plugin_folder() -> None:
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    [entry] = market["plugins"]
    assert entry["name"] == "openprose"
    assert (REPO / entry["source"]).resolve() == PLUGIN_DIR


def test_skill_activates_on_prose_requests_and_routes_every_command() -> None:
    meta, body = frontmatter(SKILL)
    assert meta["name"] == "open-prose"
    assert len(meta["description"]) <= 1024
    for trigger in (".prose", "prose run", "prose compile", "prose help", "prose examples",
                    "prose update"):
        assert trigger in meta["description"]
    for mode in ("guided", "embodied", "delegated", "in-context"):
        assert f"**{mode}**" in body
    for tool in ("start_run", "next_step", "write_binding", "submit_verdict", "fail_session",
                 "spawn_session", "complete_run", "run_program", "compile_program"):
        assert f"`{tool}`" in body


def test_skill_language_card_is_the_servers_help_prompt() -> None:
    card = (SKILL.parent / "language.md").read_text(encoding="utf-8")
    assert card == prompts.load("help"), (
        "skill/skills/open-prose/language.md differs from the prose-help prompt: "
        "cp src/openprose/prompts/help.md skill/skills/open-prose/language.md")


def test_claude_validates_the_plugin_and_the_marketplace(tmp_path: Path) -> None:
    for target in ("skill", "."):
        result = run_claude(["plugin", "validate", "--strict", target], tmp_path / "home", REPO)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Validation passed" in result.stdout
    result = run_claude(["plugin", "validate", "--json", "skill"], tmp_path / "home", REPO)
    provides = json.loads(result.stdout)["provides"]
    assert provides["skills"] == ["openprose:open-prose"]
    assert provides["commands"] == ["openprose:prose"]
    assert provides["agents"] == ["openprose:session"]
    assert [s["name"] for s in provides["mcpServers"]] == ["openprose"]


def test_marketplace_add_then_install_enables_the_plugin(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for args in (["plugin", "marketplace", "add", str(REPO)],
                 ["plugin", "install", "openprose@openprose"]):
        result = run_claude(args, home, tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    listing = run_claude(["plugin", "list"], home, tmp_path).stdout
    assert "openprose@openprose" in listing
    assert f"Version: {version('openprose')}" in listing
    assert "enabled" in listing
    # Claude Code starts the plugin's server (the launcher runs prose serve), finds it healthy.
    health = run_claude(["mcp", "list"], home, tmp_path)
    assert re.search(r"plugin:openprose:openprose: python3 \S*/bin/prose_mcp.py serve - \W*Connected", health.stdout), \
        health.stdout + health.stderr
