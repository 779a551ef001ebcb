"""More of the server's promise tried from outside, in shapes the first attacks did not take:
each test is an attempt that once crashed the server or got through."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tests.mcp_server.attack_project import make_project
from tests.mcp_server.host import ERAS, host

from openprose.mcp_server.server import MAX_ERROR_CHARS, create_server
from openprose.state import MAX_VALUE_BYTES

pytestmark = pytest.mark.anyio

@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_project(tmp_path)


# ------------------------------------------------------------------ text no store can hold

@pytest.mark.parametrize("era", ERAS)
async def test_a_lone_surrogate_in_any_argument_is_refused_naming_it(root, era):
    """An in-process client can send text with a lone surrogate, which no file or reply can
    encode: every tool crashed with a bare 'Error executing tool'."""
    async with host(root, era, watch=False) as h:
        text = await h.refused("start_run", program="p.prose", inputs={"topic": "a\ud800"})
        assert "inputs.topic" in text and "surrogate" in text
        text = await h.refused("compile_program", program='output o = session "\ud800"\n')
        assert "'program'" not in text and "program holds a lone surrogate" in text
        for tool in ("get_brief", "read_memory"):
            assert "token holds a lone surrogate" in await h.refused(tool, token="\ud800")
        assert not (root / ".prose" / "runs").exists() or not any(
            (root / ".prose" / "runs").iterdir())


async def test_a_lone_surrogate_in_a_prompt_argument_is_refused(root):
    async with Client(create_server(root, home=root / "home", watch=False)) as client:
        with pytest.raises(MCPError, match="surrogate"):
            await client.get_prompt("prose-compile", {"program": "\ud800.prose"})


# ------------------------------------------------------------------ oversized values

@pytest.mark.parametrize("era", ERAS)
async def test_a_value_over_the_limit_is_refused_before_anything_is_written(root, era):
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program="p.prose", inputs={"topic": "tides"})
        vm = started["vm_token"]
        ids = {item["binds"]: item["id"] for item in started["outline"] if item.get("binds")}
        token = (await h.call("spawn_session", vm_token=vm, statement=ids["notes"],
                              prompt="Research tides"))["session_token"]
        huge = "é" * (MAX_VALUE_BYTES // 2 + 1)  # fewer characters than bytes
        text = await h.refused("write_binding", token=token, value=huge)
        assert "value is" in text and "10 MiB" in text
        # the session is still pending: its token writes a value within the limit
        written = await h.call("write_binding", token=token, value="the notes")
        assert written["binding"] == "notes"
        text = await h.refused("start_run", program="p.prose",
                               inputs={"topic": "x" * (MAX_VALUE_BYTES + 1)})
        assert "inputs.topic" in text and "10 MiB" in text


# ------------------------------------------------------------------ bindings written once

@pytest.mark.parametrize("era", ERAS)
async def test_the_vm_token_never_rewrites_an_input_the_caller_gave(root, era):
    """The VM token rewrote `topic` after start_run bound it: a host could replace the
    user's input under every later statement (a const was already written once)."""
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program="p.prose", inputs={"topic": "tides"})
        vm = started["vm_token"]
        text = await h.refused("write_binding", token=vm, name="topic", value="anything")
        assert "rule: an input is bound once" in text and "'topic' is an input" in text
        # the same value again is a resend, answered without a write
        again = await h.call("write_binding", token=vm, name="topic", value="tides")
        assert again["binding"] == "topic"
        read = await h.call("read_binding", token=vm, name="topic")
        assert read["value"] == "tides"


@pytest.mark.parametrize("era", ERAS)
async def test_an_input_nobody_gave_is_written_once_by_the_vm(root, era):
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program="p.prose")
        vm = started["vm_token"]
        await h.call("write_binding", token=vm, name="topic", value="the user's answer")
        text = await h.refused("write_binding", token=vm, name="topic", value="another")
        assert "rule: an input is bound once" in text


# ------------------------------------------------------------------ memory in hidden folders

@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("place", [".claude/agents", ".git/hooks", ".prose/runs"])
async def test_a_persist_path_never_puts_memory_in_a_hidden_folder(root, era, place):
    """With tools alone a client wrote any text to .claude/agents/memory.md (a Claude Code
    subagent), .git/hooks/ or another run's bindings/: an inline program with
    `persist: "<there>"`, then write_memory. The program now fails naming the path, and the
    refusal of its session says so (it said 'nothing yet')."""
    source = (f'agent keeper:\n  persist: "{place}"\n  prompt: "You remember."\n'
              'let kept = session: keeper\n  prompt: "Remember"\n')
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program=source)
        text = await h.refused("spawn_session", vm_token=started["vm_token"], statement="1",
                               prompt="Remember")
        assert f"persist path '{place}' is inside the hidden folder" in text
    assert not list(root.rglob("memory.md"))


@pytest.mark.parametrize("era", ERAS)
async def test_resume_run_gives_only_missing_inputs(root, era):
    """resume_run(run_id, take_over=true, inputs={topic: ...}) replaced the input the run was
    started with: a client of a shared server took a run and changed what it was about."""
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program="p.prose", inputs={"topic": "tides"})
        text = await h.refused("resume_run", run_id=started["run_id"], take_over=True,
                               inputs={"topic": "something else"})
        assert "rule: an input is bound once" in text and "'topic'" in text
        # the refused call changed nothing: the first token still drives the run
        read = await h.call("read_binding", token=started["vm_token"], name="topic")
        assert read["value"] == "tides"
        resumed = await h.call("resume_run", run_id=started["run_id"], take_over=True,
                               inputs={"topic": "tides"})
        read = await h.call("read_binding", token=resumed["vm_token"], name="topic")
        assert read["value"] == "tides"


# ------------------------------------------------------------------ refusals stay short

@pytest.mark.parametrize("era", ERAS)
async def test_a_refusal_never_echoes_a_megabyte_argument(root, era):
    """Refusals quoted what they refused whole: a 1 MB statement id came back as 1 MB of
    text (get_run's run id twice over) into the host's context and the server's log."""
    big = "x" * 1_000_000
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program="p.prose", inputs={"topic": "tides"})
        vm = started["vm_token"]
        for tool, arguments in [
                ("spawn_session", {"vm_token": vm, "statement": big, "prompt": "p"}),
                ("get_run", {"run_id": big}),
                ("start_run", {"program": "p.prose", "inputs": {big: "v"}}),
                ("write_binding", {"token": vm, "name": "topic", "value": "v", big: 1})]:
            text = await h.refused(tool, **arguments)
            assert len(text) <= MAX_ERROR_CHARS + 100, (tool, len(text))
            assert "refused (rule: " in text and "characters cut" in text, tool


# ------------------------------------------------------------------ concurrent calls

@pytest.mark.parametrize("era", ERAS)
async def test_concurrent_complete_runs_finish_the_run_once(root, era):
    """Ten complete_run calls at once on one VM token all succeeded (each passed the 'still
    running' check while the first waited for the program's follower), each finishing the
    run again with its own status and error."""
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program="p.prose", inputs={"topic": "tides"})
        answers: list[bool] = []

        async def finish(n: int) -> None:
            result = await h.client.call_tool("complete_run", {
                "vm_token": started["vm_token"], "status": "failed", "error": f"stop {n}"})
            answers.append(result.is_error)

        async with anyio.create_task_group() as group:
            for n in range(10):
                group.start_soon(finish, n)
        assert sorted(answers) == [False] + [True] * 9


# ------------------------------------------------------------------ names too long to keep

@pytest.mark.parametrize("era", ERAS)
async def test_a_name_longer_than_state_keeps_is_a_compile_error(root, era):
    """start_run of a program whose input is named with 200 characters crashed ('Error
    executing tool start_run'): the state refuses such a name only when writing it."""
    long, fits = "a" * 129, "b" * 128
    async with host(root, era, watch=False) as h:
        text = await h.refused("start_run", program=f'input {long}: "x"\n'
                               f'output o = session "x {{{long}}}"\n', inputs={long: "v"})
        assert "E005" in text and "longer than 128 characters" in text
        started = await h.call("start_run", program=f'input {fits}: "x"\n'
                               f'output o = session "x {{{fits}}}"\n', inputs={fits: "v"})
        assert started["run_id"]


# ------------------------------------------------------------------ .prose by another name

CHECK_SCRIPT = """\
import sys
from pathlib import Path
from openprose.paths import PathOutside, contained
project = Path(sys.argv[1])
try:
    contained("alias/agents/keeper/memory.md", [project], base=project, what="script",
              excluded=[project / ".prose"])
except PathOutside as err:
    print("refused:", err)
else:
    print("accepted")
"""


def test_prose_reached_by_another_name_is_still_excluded(tmp_path):
    """The state directory was excluded by spelling: on a file system that ignores case
    (macOS's default) `.PROSE/agents/keeper/memory.md` was a script a client could name.
    Here another name for the same directory (a bind mount, in a user namespace) stands in
    for the other spelling."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to bind-mount a second name of .prose")
    project = tmp_path / "project"
    (project / ".prose" / "agents" / "keeper").mkdir(parents=True)
    (project / ".prose" / "agents" / "keeper" / "memory.md").write_text("call_log: /x\n")
    (project / "alias").mkdir()
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount --bind "$1/.prose" "$1/alias" && '
         'exec "$2" -c "$3" "$1"', "sh", str(project), sys.executable, CHECK_SCRIPT],
        capture_output=True, text=True, timeout=60)
    if "mount" in done.stderr or "unshare" in done.stderr:
        pytest.skip(f"cannot bind-mount in a user namespace here: {done.stderr.strip()}")
    assert done.stdout.startswith("refused:"), done.stdout + done.stderr


# ------------------------------------------------------------------ execution ids

async def test_an_execution_id_past_what_databases_keep_is_refused_not_crashed(root):
    """prose://runs/ID/bindings/topic@99999999999999999999999 on a SQLite run crashed
    ('Error creating resource from template': the driver's OverflowError)."""
    async with Client(create_server(root, home=root / "home", watch=False)) as client:
        started = await client.call_tool("start_run", {
            "program": "p.prose", "inputs": {"topic": "tides"}, "backend": "sqlite"})
        run_id = started.structured_content["run_id"]
        for eid in ("9223372036854775808", "99999999999999999999999"):
            with pytest.raises(MCPError, match="is not an integer from 0 to "):
                await client.read_resource(f"prose://runs/{run_id}/bindings/topic@{eid}")


# ------------------------------------------------------------------ wrong types

@pytest.mark.parametrize("era", ERAS)
async def test_an_argument_of_the_wrong_type_is_refused_in_one_line_per_argument(root, era):
    """A wrong type got pydantic's report: the arguments model's name, the rejected value
    and a link to pydantic's documentation, several lines per argument."""
    async with host(root, era, watch=False) as h:
        text = await h.refused("start_run", program="p.prose", backend="mysql",
                               inputs={"topic": 5})
        assert "refused (rule: arguments have the types the tool declares)" in text
        assert "inputs.topic: Input should be a valid string" in text
        assert "backend: Input should be 'filesystem', 'sqlite' or 'postgres'" in text
        assert "pydantic" not in text and "Arguments" not in text and "\n" not in text
