"""The plugin's PreToolUse hook in the real Claude Code: a session subagent whose agent may
not write src/ (nor run commands) has its Write, Edit and Bash on src/ refused — its model
gets the refusal as an error result — and every call is recorded in the run's journal; what
the agent may do goes through."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.hosts.claude_code import PLUGIN_DIR, PROSE, TOOL_PREFIX, run_claude
from tests.hosts.fake_messages import FakeMessagesAPI, Reply, text, tool_use
from tests.hosts.host_model import SESSION_MARK, calls, first_user_text, ours, subagent

from openprose.engine.permissions import Permissions, grant_fields
from openprose.state import BindingRef, SessionStart, open_store

PROGRAM = '''\
agent reviewer:
  prompt: "You review code."
  permissions:
    read: ["src/**", "docs/**"]
    write: ["docs/**"]
    bash: deny

let review = session: reviewer
  prompt: "Review src/app.py"
'''
SECRET = "hunter2-not-for-sessions"


class Host:
    """The main agent starts the run and spawns its session through the plugin's server,
    then hands the token to a session subagent, which tries its calls: some its agent may
    make, some it may not, and some after it has written its binding."""

    def __init__(self, project: Path) -> None:
        src, docs = project / "src", project / "docs"
        self.steps = [
            lambda t: tool_use("Read", {"file_path": str(src / "app.py")}),
            lambda t: tool_use("Write", {"file_path": str(src / "evil.py"),
                                         "content": "pwned\n"}),
            lambda t: tool_use("Edit", {"file_path": str(src / "app.py"),
                                        "old_string": "a - b", "new_string": "0"}),
            lambda t: tool_use("Bash", {"command": f"echo pwned > {src / 'y.py'}",
                                        "description": "write into src"}),
            # a search above the read globs: Claude Code would show every file's lines
            lambda t: tool_use("Grep", {"pattern": "hunter2", "path": ".",
                                        "output_mode": "content"}),
            lambda t: tool_use("Write", {"file_path": str(docs / "review.md"),
                                         "content": "# Review\n"}),
            lambda t: ours("write_binding", token=t, value="reviewed", summary="done"),
            # the session has ended: nothing more for its subagent
            lambda t: tool_use("Read", {"file_path": str(project / "secret.txt")}),
            lambda t: tool_use("Write", {"file_path": str(src / "after.py"), "content": "x\n"}),
        ]
        self.bodies: list[dict] = []

    def __call__(self, body: dict) -> Reply:
        self.bodies.append(body)
        history = calls(body)
        if SESSION_MARK in first_user_text(body):  # the session's subagent
            token = first_user_text(body).split('"')[1]
            if len(history) < len(self.steps):
                return Reply([self.steps[len(history)](token)])
            return Reply([text("Review written to docs/review.md.")])
        if not body.get("tools"):  # a side request (a title, a summary): plain text
            return Reply([text("ok")])
        if not history:
            return Reply([ours("start_run", program="review.prose")])
        last = history[-1]
        if last.name == "start_run":
            [session] = [s for s in last.data["outline"] if s["kind"] == "session"]
            return Reply([ours("spawn_session", vm_token=last.data["vm_token"],
                               statement=session["id"])])
        if last.name == "spawn_session":
            return Reply([subagent(last.data["session_token"], "review")])
        return Reply([text("The session finished.")])


def test_the_hook_refuses_what_the_sessions_agent_may_not_do(tmp_path):
    """Refused: writes outside docs/, commands, a Grep of the whole project (not offered to
    the session agent), and anything after the session wrote its binding."""
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "docs").mkdir()
    (project / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (project / "secret.txt").write_text(f"password = {SECRET}\n")
    (project / "review.prose").write_text(PROGRAM)
    host = Host(project)
    with FakeMessagesAPI(host) as api:
        result = run_claude(["-p", "Review the code with a subagent", "--plugin-dir",
                             str(PLUGIN_DIR), "--allowedTools",
                             f"Agent,Read,Write,Edit,Bash,Grep,{TOOL_PREFIX.rstrip('_')}"],
                            tmp_path / "home", project, api.url, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert api.errors == []

    assert not (project / "src" / "evil.py").exists()
    assert not (project / "src" / "y.py").exists()
    assert not (project / "src" / "after.py").exists()
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert (project / "docs" / "review.md").read_text() == "# Review\n"

    session = [b for b in host.bodies if SESSION_MARK in first_user_text(b)][-1]
    results = [(c.name, c.result or "") for c in calls(session)]
    assert not any(SECRET in result for _, result in results), results
    refused = [name for name, result in results if "refused:" in result]
    assert refused == ["Write", "Edit", "Bash", "Read", "Write"], results
    # the plugin's session agent is not offered Grep (a general-purpose subagent's Grep above
    # the read globs is refused by the hook: tests/hosts/test_hook_sessions.py)
    [grep] = [result for name, result in results if name == "Grep"]
    assert "No such tool available" in grep, grep
    assert "once its session has ended" in results[-1][1]

    [run_id] = [p.name for p in (project / ".prose" / "runs").iterdir()]
    with open_store(project, "filesystem") as store:
        run = store.open_run(run_id)
        assert run.read_binding(BindingRef("review")).value == "reviewed"
        records = run.tool_calls()
    got = [(r.meta["tool"].removeprefix(TOOL_PREFIX), Path(r.meta["subject"]).name
            if r.meta["tool"] not in ("Bash", "Grep") else r.meta["tool"].lower(),
            r.meta["allowed"], r.meta["rule"]) for r in records]
    assert got == [  # the launch (on the host's model: the agent names none), then its calls
        ("Agent", "(the host's default model)", True, "no model named"),
        ("Read", "app.py", True, "read: [src/**, docs/**]"),
        ("Write", "evil.py", False, "write: [docs/**]"),
        ("Edit", "app.py", False, "write: [docs/**]"),
        ("Bash", "bash", False, "bash: deny"),
        ("Write", "review.md", True, "write: [docs/**]"),
        ("write_binding", "write_binding", True, "a session's own tool")]
    assert all(r.meta["agent"] == "reviewer" and r.meta["host"] == "claude-code"
               for r in records)
    shown = subprocess.run([str(PROSE), "show", run_id, "--project", str(project)],
                           capture_output=True, text=True, timeout=60).stdout
    assert "tool calls (7, 3 refused)" in shown and "line 8: let review = session: reviewer" \
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
    engine notes it with the session's grant, so the hook finds the permissions too, and
    refuses everything once the session's binding is written."""
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
        ended = await asyncio.to_thread(decide, {  # its binding is written: nothing more
            "agent_id": "g1", "transcript_path": str(main), "cwd": str(project),
            "tool_name": "Write", "tool_input": {"file_path": str(project / "docs" / "b.md")}})
        answers.append(ended and ended["hookSpecificOutput"]["permissionDecision"])
        return await task

    outcome = asyncio.run(drive())
    assert outcome.status == "completed"
    assert answers == ["deny", "deny", None, "deny"]
    with open_store(project, "filesystem") as store:
        records = store.open_run(outcome.run_id).tool_calls()
    assert [(r.meta["tool"], r.meta["agent"], r.status) for r in records] == [
        ("Write", "reviewer", "refused"), ("Bash", "reviewer", "refused"),
        ("Write", "reviewer", "allowed")]


def test_the_hook_checks_where_a_search_pattern_reaches(tmp_path):
    """Glob's pattern and Grep's glob are resolved against the search's path like a path is:
    an absolute pattern, one leaving the project through '..' (before or after a wildcard),
    a negated one, or one into .prose/ is refused; a pattern inside the project is left to
    the host."""
    import json

    from openprose.engine.host_hook import decide

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
        answer = decide({"session_id": "s1", "agent_id": "a1", "transcript_path": str(main),
                         "cwd": str(project), "hook_event_name": "PreToolUse",
                         "tool_name": tool, "tool_input": args})
        if answer is None:
            return None, ""
        return (answer["hookSpecificOutput"]["permissionDecision"],
                answer["hookSpecificOutput"]["permissionDecisionReason"])

    src = str(project / "src")
    refused = [
        ("Glob", {"pattern": "../../etc/*", "path": src}),
        ("Glob", {"pattern": "/home/*/.ssh/*", "path": src}),
        ("Glob", {"pattern": "~/.ssh/*", "path": src}),
        ("Glob", {"pattern": "**/../../../etc/passwd", "path": src}),
        ("Glob", {"pattern": "{..,x}/../*", "path": src}),
        ("Glob", {"pattern": "{/etc,src}/*", "path": src}),
        ("Glob", {"pattern": "../.prose/*", "path": src}),
        ("Glob", {"pattern": "!*.py", "path": src}),
        ("Grep", {"pattern": "secret", "glob": "../../*", "path": src}),
        ("Grep", {"pattern": "secret", "glob": "/etc/*", "path": src}),
    ]
    for tool, args in refused:
        decision, reason = verdict(tool, args)
        assert decision == "deny", (tool, args)
        assert "refused: agent 'reviewer' may not" in reason and \
            (args.get("glob") or args["pattern"]) in reason, reason
    for tool, args in [("Glob", {"pattern": "**/*.py", "path": src}),
                       ("Glob", {"pattern": "../src/*.py", "path": src}),
                       ("Glob", {"pattern": str(project / "src" / "*.py"), "path": src}),
                       ("Grep", {"pattern": "/etc/passwd|\\.\\./", "path": src}),
                       ("Grep", {"pattern": "x", "glob": "*.py", "path": src})]:
        assert verdict(tool, args) == (None, ""), (tool, args)
    with open_store(project, "filesystem") as store:
        records = store.open_run(run.id).tool_calls()
    assert [r.status for r in records] == ["refused"] * len(refused) + ["allowed"] * 5
    assert records[0].meta["subject"] == "../../etc/*"


def test_the_plugin_hands_every_tool_call_to_the_hook():
    """A session may be offered any tool (another server's, a new one of Claude Code's): the
    hook must see every call to refuse what it cannot check, so its matcher is every tool."""
    hooks = json.loads((PLUGIN_DIR / "hooks" / "hooks.json").read_text(encoding="utf-8"))
    [entry] = hooks["hooks"]["PreToolUse"]
    assert entry["matcher"] == "*"


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
