"""The plugin's PreToolUse hook in the real Claude Code: a session subagent whose agent may
not write src/ (nor run commands) has its Write, Edit and Bash on src/ refused — its model
gets the refusal as an error result — and every call is recorded in the run's journal; what
the agent may do goes through."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.hosts.claude_code import PLUGIN_DIR, PROSE, run_claude
from tests.hosts.fake_messages import FakeMessagesAPI, Reply, text, tool_use
from tests.hosts.host_model import calls, first_user_text

from openprose.engine.host_hook import LAUNCH, PATH_TOOLS, WEB_TOOLS
from openprose.engine.permissions import Permissions, grant_fields
from openprose.state import BindingRef, SessionStart, open_store

PROGRAM = '''\
agent reviewer:
  prompt: "You review code."
  permissions:
    write: ["docs/**"]
    bash: deny

let review = session: reviewer
  prompt: "Review src/app.py"
'''


def _session(project: Path) -> tuple[str, str]:
    """A run of PROGRAM with its session started as spawn_session starts it: (run, token)."""
    permissions = Permissions(write=("docs/**",), bash="deny")
    with open_store(project, "filesystem") as store:
        run = store.create_run(PROGRAM, "review.prose")
        [grant] = run.start_sessions([SessionStart(
            "1", "h", BindingRef("review"), "let", "let review = session: reviewer",
            work=grant_fields("reviewer", permissions, "mcp:1@0#1", 7))])
        return run.id, grant.token


class Host:
    """The main agent hands the brief to a subagent; the subagent tries its calls."""

    def __init__(self, project: Path, brief: str) -> None:
        self.brief = brief
        src, docs = project / "src", project / "docs"
        self.steps = [
            tool_use("Read", {"file_path": str(src / "app.py")}),
            tool_use("Write", {"file_path": str(src / "evil.py"), "content": "pwned\n"}),
            tool_use("Edit", {"file_path": str(src / "app.py"), "old_string": "a - b",
                              "new_string": "0"}),
            tool_use("Bash", {"command": f"echo pwned > {src / 'y.py'}",
                              "description": "write into src"}),
            tool_use("Write", {"file_path": str(docs / "review.md"), "content": "# Review\n"}),
        ]
        self.bodies: list[dict] = []

    def __call__(self, body: dict) -> Reply:
        self.bodies.append(body)
        done = sum(1 for m in body["messages"] if m["role"] == "user"
                   and isinstance(m["content"], list)
                   and any(b.get("type") == "tool_result" for b in m["content"]))
        if "token: ses_" in first_user_text(body):  # the session's subagent
            if done < len(self.steps):
                return Reply([self.steps[done]])
            return Reply([text("Review written to docs/review.md.")])
        if not body.get("tools"):  # a side request (a title, a summary): plain text
            return Reply([text("ok")])
        if done == 0:
            return Reply([tool_use("Agent", {"description": "OpenProse session",
                                             "prompt": self.brief,
                                             "subagent_type": "general-purpose",
                                             "run_in_background": False})])
        return Reply([text("The session finished.")])


def test_the_hook_refuses_what_the_sessions_agent_may_not_do(tmp_path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "docs").mkdir()
    (project / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    run_id, token = _session(project)
    brief = ("OpenProse session producing 'review'. Act as the agent 'reviewer'.\nTask:\n"
             "Review src/app.py\nPermissions: read **; write docs/**; shell deny; network "
             f"prompt; never .prose/.\ntoken: {token}")
    host = Host(project, brief)
    with FakeMessagesAPI(host) as api:
        result = run_claude(["-p", "Review the code with a subagent", "--plugin-dir",
                             str(PLUGIN_DIR), "--allowedTools", "Agent,Read,Write,Edit,Bash"],
                            tmp_path / "home", project, api.url, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert api.errors == []

    assert not (project / "src" / "evil.py").exists()
    assert not (project / "src" / "y.py").exists()
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert (project / "docs" / "review.md").read_text() == "# Review\n"

    subagent = [b for b in host.bodies if "token: ses_" in first_user_text(b)][-1]
    results = {c.name: c.result for c in calls(subagent)}
    for name in ("Edit", "Bash"):
        assert "refused: agent 'reviewer' may not" in (results[name] or ""), results[name]

    with open_store(project, "filesystem") as store:
        records = store.open_run(run_id).tool_calls()
    subject = {"Bash": lambda s: "bash", "Agent": lambda s: s}
    got = [(r.key, r.meta["tool"], subject.get(r.meta["tool"], lambda s: Path(s).name)(
        r.meta["subject"]), r.meta["allowed"], r.meta["rule"]) for r in records]
    assert got == [  # the launch (on the host's model: the agent names none), then its calls
        ("mcp:1@0#1", "Agent", "(the host's default model)", True, "no model named"),
        ("mcp:1@0#1", "Read", "app.py", True, "read: [**]"),
        ("mcp:1@0#1", "Write", "evil.py", False, "write: [docs/**]"),
        ("mcp:1@0#1", "Edit", "app.py", False, "write: [docs/**]"),
        ("mcp:1@0#1", "Bash", "bash", False, "bash: deny"),
        ("mcp:1@0#1", "Write", "review.md", True, "write: [docs/**]")]
    assert all(r.meta["agent"] == "reviewer" and r.meta["host"] == "claude-code"
               for r in records)
    shown = subprocess.run([str(PROSE), "show", run_id, "--project", str(project)],
                           capture_output=True, text=True, timeout=60).stdout
    assert "tool calls (6, 3 refused)" in shown and "line 7: let review = session: reviewer" \
        in shown


def test_the_hooks_decisions_for_each_kind_of_call(tmp_path):
    """decide() on events shaped as Claude Code sends them: the subagent's transcript names
    the session; prompt is left to the host (ask), refusals are denied, other calls and the
    main agent's are not ours to decide."""
    import json

    from openprose.engine.host_hook import decide

    project = tmp_path / "p"
    project.mkdir()
    with open_store(project, "filesystem") as store:
        run = store.create_run(PROGRAM, "review.prose")
        [grant] = run.start_sessions([SessionStart(
            "1", "h", BindingRef("review"), "let", "s", work=grant_fields(
                "reviewer", Permissions(bash="prompt", network=("docs.example.com",)), "1"))])
    main = tmp_path / "t" / "main.jsonl"
    (main.with_suffix("") / "subagents").mkdir(parents=True)
    (main.with_suffix("") / "subagents" / "agent-a1.jsonl").write_text(json.dumps(
        {"message": {"role": "user", "content": [{"type": "text",
                                                  "text": f"brief\ntoken: {grant.token}"}]}})
        + "\n")

    def verdict(tool, args, agent="a1"):
        answer = decide({"agent_id": agent, "transcript_path": str(main), "cwd": str(project),
                         "tool_name": tool, "tool_input": args})
        return answer and answer["hookSpecificOutput"]["permissionDecision"]

    assert verdict("Bash", {"command": "make"}) == "ask"
    assert verdict("Write", {"file_path": str(project / ".prose" / "x")}) == "deny"
    assert verdict("Read", {"file_path": str(tmp_path / "elsewhere")}) == "deny"
    assert verdict("Write", {"file_path": str(project / "a.txt"), "content": "x"}) is None
    assert verdict("WebFetch", {"url": "https://docs.example.com/a", "prompt": "p"}) is None
    assert verdict("WebFetch", {"url": "https://evil.example.net/", "prompt": "p"}) == "deny"
    assert verdict("WebSearch", {"query": "q"}) == "deny"
    assert verdict("TodoWrite", {"todos": []}) is None
    assert decide({"tool_name": "Write", "tool_input": {"file_path": "/etc/x"},
                   "cwd": str(project)}) is None  # the main agent: the host's own business
    with open_store(project, "filesystem") as store:
        kinds = [(r.meta["tool"], r.status) for r in store.open_run(run.id).tool_calls()]
    assert kinds == [("Bash", "allowed"), ("Write", "refused"), ("Read", "refused"),
                     ("Write", "allowed"), ("WebFetch", "allowed"), ("WebFetch", "refused"),
                     ("WebSearch", "refused")]


def test_a_guided_sessions_item_token_leads_the_hook_to_its_permissions(tmp_path):
    """In a guided run the subagent knows its session by the run's item token (gs_…): the
    engine notes it with the session's grant, so the hook finds the permissions too."""
    import asyncio
    import json

    from openprose.engine import runner
    from openprose.engine.host_hook import decide
    from openprose.engine.interpreter import Options
    from openprose.language import compile_or_raise
    from openprose.mcp_server.guided import HostProvider

    project = tmp_path / "p"
    (project / "src").mkdir(parents=True)
    main = tmp_path / "t" / "main.jsonl"
    (main.with_suffix("") / "subagents").mkdir(parents=True)
    provider = HostProvider()
    job = runner.Job(source=PROGRAM, file="review.prose", project_root=project,
                     program=compile_or_raise(PROGRAM, "review.prose"), options=Options())
    answers = []

    async def drive():
        task = asyncio.create_task(runner.execute(job, provider, provider.observe))
        [item] = await provider.wait_for_items(30)
        (main.with_suffix("") / "subagents" / "agent-g1.jsonl").write_text(json.dumps(
            {"message": {"role": "user", "content": f"Run session token {item.token}"}}) + "\n")
        for tool, args in (("Write", {"file_path": str(project / "src" / "x.py")}),
                           ("Bash", {"command": "ls"}),
                           ("Write", {"file_path": str(project / "docs" / "a.md")})):
            answer = await asyncio.to_thread(decide, {
                "agent_id": "g1", "transcript_path": str(main), "cwd": str(project),
                "tool_name": tool, "tool_input": args})
            answers.append(answer and answer["hookSpecificOutput"]["permissionDecision"])
        await provider.complete_session(item.token, "reviewed")
        return await task

    outcome = asyncio.run(drive())
    assert outcome.status == "completed"
    assert answers == ["deny", "deny", None]
    with open_store(project, "filesystem") as store:
        records = store.open_run(outcome.run_id).tool_calls()
    assert [(r.meta["tool"], r.meta["agent"], r.status) for r in records] == [
        ("Write", "reviewer", "refused"), ("Bash", "reviewer", "refused"),
        ("Write", "reviewer", "allowed")]


def test_the_hook_checks_where_a_search_pattern_reaches(tmp_path):
    """Glob's pattern and Grep's glob are resolved against the search's path like a path is:
    an absolute pattern, one leaving the project through '..' (before or after a wildcard),
    or one into .prose/ is refused; a pattern inside the project is left to the host. The
    event reaches `prose hook pre-tool-use` on stdin, as Claude Code sends it."""
    import json

    project = tmp_path / "p"
    (project / "src").mkdir(parents=True)
    with open_store(project, "filesystem") as store:
        run = store.create_run(PROGRAM, "review.prose")
        [grant] = run.start_sessions([SessionStart(
            "1", "h", BindingRef("review"), "let", "s",
            work=grant_fields("reviewer", Permissions(), "1"))])
    main = tmp_path / "t" / "main.jsonl"
    (main.with_suffix("") / "subagents").mkdir(parents=True)
    (main.with_suffix("") / "subagents" / "agent-a1.jsonl").write_text(json.dumps(
        {"message": {"role": "user", "content": f"brief\ntoken: {grant.token}"}}) + "\n")

    def verdict(tool, args):
        event = {"session_id": "s1", "agent_id": "a1", "transcript_path": str(main),
                 "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": tool,
                 "tool_input": args}
        done = subprocess.run([str(PROSE), "hook", "pre-tool-use"], input=json.dumps(event),
                              capture_output=True, text=True, timeout=60, check=True)
        if not done.stdout.strip():
            return None, ""
        answer = json.loads(done.stdout)["hookSpecificOutput"]
        return answer["permissionDecision"], answer["permissionDecisionReason"]

    src = str(project / "src")
    refused = [
        ("Glob", {"pattern": "../../etc/*", "path": src}),
        ("Glob", {"pattern": "/home/*/.ssh/*"}),
        ("Glob", {"pattern": "~/.ssh/*"}),
        ("Glob", {"pattern": "**/../../../etc/passwd", "path": src}),
        ("Glob", {"pattern": "{..,x}/../*", "path": src}),
        ("Glob", {"pattern": "{/etc,src}/*"}),
        ("Glob", {"pattern": ".prose/*"}),
        ("Grep", {"pattern": "secret", "glob": "../../*", "path": src}),
        ("Grep", {"pattern": "secret", "glob": "/etc/*"}),
    ]
    for tool, args in refused:
        decision, reason = verdict(tool, args)
        assert decision == "deny", (tool, args)
        assert "refused: agent 'reviewer' may not" in reason and \
            (args.get("glob") or args["pattern"]) in reason, reason
    for tool, args in [("Glob", {"pattern": "**/*.py", "path": src}),
                       ("Glob", {"pattern": "../src/*.py", "path": src}),
                       ("Glob", {"pattern": str(project / "src" / "*.py")}),
                       ("Grep", {"pattern": "/etc/passwd|\\.\\./", "path": src}),
                       ("Grep", {"pattern": "x", "glob": "*.py"})]:
        assert verdict(tool, args) == (None, ""), (tool, args)
    with open_store(project, "filesystem") as store:
        records = store.open_run(run.id).tool_calls()
    assert [r.status for r in records] == ["refused"] * len(refused) + ["allowed"] * 5
    assert records[0].meta["subject"] == "../../etc/*"


def test_the_plugin_runs_the_hook_for_exactly_the_tools_it_decides():
    """hooks.json names the tools Claude Code hands to the hook; host_hook decides by its own
    list. A tool in host_hook's list but not in the matcher would never be checked."""
    hooks = json.loads((PLUGIN_DIR / "hooks" / "hooks.json").read_text(encoding="utf-8"))
    [entry] = hooks["hooks"]["PreToolUse"]
    assert set(entry["matcher"].split("|")) == {*PATH_TOOLS, "Bash", *WEB_TOOLS, LAUNCH}


def test_the_hook_launches_a_session_on_its_programs_model(tmp_path):
    """The main agent's Agent call whose prompt holds a session token: refused, naming the
    model, when the session's agent names one and the call gives another or none; let
    through (and recorded with the model it runs on) otherwise."""
    from openprose.engine.host_hook import decide

    project = tmp_path / "p"
    project.mkdir()
    with open_store(project, "filesystem") as store:
        run = store.create_run(PROGRAM, "review.prose")
        grants = run.start_sessions([
            SessionStart("1", "h", BindingRef("review"), "let", "s", work=grant_fields(
                "reviewer", None, "k1", 7, "claude-opus-5-5")),
            SessionStart("2", "h", BindingRef("other"), "let", "s",
                         work=grant_fields(None, None, "k2", 9))])
    opus, free = (grant.token for grant in grants)

    def launch(token, **model):
        answer = decide({"cwd": str(project), "tool_name": "Agent", "tool_input": {
            "description": "session", "subagent_type": "openprose:session",
            "prompt": f'OpenProse session: call get_brief(token="{token}")', **model}})
        return answer and answer["hookSpecificOutput"]["permissionDecisionReason"]

    assert "agent 'reviewer' runs on model opus" in launch(opus)
    assert 'model: "opus" (not \'sonnet\')' in launch(opus, model="sonnet")
    assert 'model: "opus"' in launch(opus, model="haiku")
    assert launch(opus, model="opus") is None
    assert launch(free) is None and launch(free, model="haiku") is None
    assert decide({"cwd": str(project), "tool_name": "Agent",
                   "tool_input": {"prompt": "no session here"}}) is None
    with open_store(project, "filesystem") as store:
        records = store.open_run(run.id).tool_calls()
    assert [(r.key, r.status, r.meta.get("model")) for r in records] == [
        ("k1", "refused", None), ("k1", "refused", None), ("k1", "refused", None),
        ("k1", "allowed", "opus"), ("k2", "allowed", "(the host's default model)"),
        ("k2", "allowed", "haiku")]
