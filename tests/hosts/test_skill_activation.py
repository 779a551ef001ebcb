"""What Claude Code's model sees of the plugin: the skill's one-line listing in every request,
and the full SKILL.md once the model activates it for "prose run …"."""

from __future__ import annotations

import json
from pathlib import Path

from tests.hosts.claude_code import PLUGIN_DIR, REPO, run_claude
from tests.hosts.fake_messages import FakeMessagesAPI, Reply, seen_text, text, tool_use
from tests.hosts.test_plugin_manifest import SKILL, frontmatter


def test_prose_run_activates_the_skill_and_the_model_reads_it(tmp_path: Path) -> None:
    meta, skill_body = frontmatter(SKILL)

    def host_model(body: dict) -> Reply:
        if "Launching skill: openprose:open-prose" in json.dumps(body["messages"]):
            return Reply([text("The skill is loaded.")])
        return Reply([tool_use("Skill", {"skill": "openprose:open-prose",
                                         "args": "run examples/hello.prose"})])

    with FakeMessagesAPI(host_model) as api:
        result = run_claude(["-p", "prose run examples/hello.prose topic=tides",
                             "--plugin-dir", str(PLUGIN_DIR), "--output-format", "json"],
                            tmp_path / "home", REPO, api.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert api.errors == []
    assert json.loads(result.stdout)["result"] == "The skill is loaded."
    first, last = api.requests[0], api.requests[-1]
    assert f"openprose:open-prose: {meta['description']}" in seen_text(first)
    assert "prose run examples/hello.prose topic=tides" in json.dumps(first["messages"])
    assert skill_body.strip() not in seen_text(first)
    assert skill_body.strip() in seen_text(last)
