"""The server's promise tried from outside: a careless or prompt-injected host reaches only
what the program allows. Each test is an attempt that once succeeded."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation
from tests.mcp_server.attack_project import PROGRAM, make_project
from tests.mcp_server.host import ERAS, Host, Refused, host

from openprose.mcp_server.server import create_server

pytestmark = pytest.mark.anyio

@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_project(tmp_path)


async def _started(h: Host) -> tuple[str, dict[str, str]]:
    started = await h.call("start_run", program="p.prose", inputs={"topic": "tides"})
    ids = {item["binds"]: item["id"] for item in started["outline"] if item.get("binds")}
    return started["vm_token"], ids


# ------------------------------------------------------------------ unknown arguments

@pytest.mark.parametrize("era", ERAS)
async def test_unknown_arguments_are_refused_naming_them_and_the_accepted_ones(root, era):
    async with host(root, era, watch=False) as h:
        vm, ids = await _started(h)
        spawned = await h.call("spawn_session", vm_token=vm, statement=ids["notes"],
                               prompt="Research tides")
        token = spawned["session_token"]
        text = await h.refused("write_binding", token=token, value="notes",
                               target_binding="merged")
        assert "'target_binding'" in text and "copy_of" in text and "value" in text
        text = await h.refused("spawn_session", vm_token=vm, statement=ids["summary"],
                               prompt="Summarize", contexts=["notes"])
        assert "'contexts'" in text and "context" in text.split("takes:")[1]
        # nothing happened: the session is still pending, the second never started
        status = await h.call("run_status", vm_token=vm)
        assert [p["binding"] for p in status["pending"]] == ["notes"]
        assert not status["bindings"] or all(b["name"] == "topic" for b in status["bindings"])


async def test_every_listed_input_schema_admits_only_its_properties(root):
    async with Client(create_server(root, watch=False)) as client:
        tools = (await client.list_tools()).tools
    assert tools and all(tool.input_schema.get("additionalProperties") is False
                         for tool in tools)


async def test_a_tool_registered_later_is_closed_too(root):
    mcp = create_server(root, watch=False)

    @mcp.tool()
    async def echo(text: str) -> str:
        """Echo."""
        return text

    async with Client(mcp) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["echo"].input_schema["additionalProperties"] is False
        result = await client.call_tool("echo", {"text": "a", "txt": "b"})
        assert result.is_error and "'txt'" in result.content[0].text


# ------------------------------------------------------------------ spent session tokens

@pytest.mark.parametrize("era", ERAS)
async def test_a_spent_session_token_repeats_only_its_own_write(root, era):
    async with host(root, era, watch=False) as h:
        vm, ids = await _started(h)
        spawned = await h.call("spawn_session", vm_token=vm, statement=ids["notes"],
                               prompt="Research tides")
        token = spawned["session_token"]
        first = await h.call("write_binding", token=token, value="the notes")
        again = await h.call("write_binding", token=token, value="the notes", name="notes")
        assert again["location"] == first["location"]
        for attempt in ({"name": "summary"}, {"execution_id": 3}, {"copy_of": "topic"}):
            with pytest.raises(Refused, match="rule: a session"):
                await h.call("write_binding", token=token, value="the notes", **attempt)
        with pytest.raises(Refused, match="resend must carry the same value"):
            await h.call("write_binding", token=token, value="other notes")
        status = await h.call("run_status", vm_token=vm)
        assert {b["name"] for b in status["bindings"]} == {"topic", "notes"}


@pytest.mark.parametrize("era", ERAS)
async def test_a_guided_session_token_writes_only_its_own_binding(root, era):
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program="p.prose", inputs={"topic": "t"},
                               mode="guided")
        step = await h.call("next_step", vm_token=started["vm_token"], wait_s=30)
        (item,) = step["pending"]
        token = item["token"]
        for attempt in ({"name": "summary"}, {"copy_of": "topic"}):
            with pytest.raises(Refused, match="rule: a session"):
                await h.call("write_binding", token=token, value="notes", **attempt)
        await h.call("write_binding", token=token, value="notes", name=item["binding"])
        with pytest.raises(Refused, match="rule: a session"):
            await h.call("write_binding", token=token, value="notes", name="summary")


# ------------------------------------------------------------------ paths derived from data

KEEPER = """\
agent keeper:
  persist: true
  prompt: "You remember."
let kept = session: keeper
  prompt: "Remember the tides"
"""


@pytest.mark.parametrize("era", ERAS)
async def test_a_memory_file_is_no_script_and_a_call_log_stays_in_the_project(
        root, tmp_path, era):
    """The issue's attack: write_memory puts `call_log: /elsewhere` into a memory file, then
    run_program runs it as a script, appending the prompt to any file."""
    target = tmp_path / "outside" / "appended.jsonl"
    target.parent.mkdir()
    (root / "keep.prose").write_text(KEEPER)
    async with host(root, era, watch=False) as h:
        started = await h.call("start_run", program="keep.prose")
        kept = next(item["id"] for item in started["outline"] if item.get("binds") == "kept")
        session = await h.call("spawn_session", vm_token=started["vm_token"], statement=kept,
                               prompt="Remember the tides")
        written = await h.call("write_memory", token=session["session_token"],
                               memory=f"call_log: {target}\ndefault_output: ok\n")
        memory = written["location"]
        assert memory.startswith(".prose/")
        text = await h.refused("run_program", program=PROGRAM, inputs={"topic": "t"},
                               provider="scripted", script=memory)
        assert "script" in text and ".prose" in text
        # a script the user placed in the project names where its log goes: inside it,
        # outside .prose/, nowhere else
        for log in (str(target), "../outside/appended.jsonl", ".prose/calls.jsonl",
                    "nul\x00byte"):
            (root / "s.json").write_text(json.dumps({"default_output": "ok",
                                                     "call_log": log}))
            text = await h.refused("run_program", program=PROGRAM, inputs={"topic": "t"},
                                   provider="scripted", script="s.json")
            assert "call_log" in text and "Error executing tool run_program:" in text
        for script in ("../outside/s.yaml", str(tmp_path / "s.yaml"), ".prose/s.yaml"):
            text = await h.refused("run_program", program=PROGRAM, inputs={"topic": "t"},
                                   provider="scripted", script=script)
            assert "script" in text
        (root / "s.json").write_text(json.dumps({"default_output": "ok",
                                                 "call_log": "logs/../calls.jsonl"}))
        done = await h.call("run_program", program=PROGRAM, inputs={"topic": "t"},
                            provider="scripted", script="s.json")
        assert done["status"] == "completed"
    assert not target.exists()
    assert (root / "calls.jsonl").read_text().count("\n") >= 2


def test_the_command_lines_script_keeps_its_call_log_in_the_project(root, tmp_path):
    from click.testing import CliRunner

    from openprose.cli import cli

    target = tmp_path / "appended.jsonl"
    (root / "s.yaml").write_text(f"default_output: ok\ncall_log: {target}\n")
    result = CliRunner().invoke(cli, ["run", str(root / "p.prose"), "--provider", "scripted",
                                      "--script", str(root / "s.yaml"), "--input", "topic=t",
                                      "--project", str(root)])
    assert result.exit_code == 2 and "call_log" in result.output
    assert not target.exists()


# ------------------------------------------------------------------ use imports

CHILD = 'input topic: "t"\noutput findings = session "Find {topic}"\n'
USES = 'use "{target}" as c\noutput x = c(topic: "a").findings\n'


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server's working directory, outside the project, holding programs of its own."""
    place = tmp_path / "elsewhere"
    place.mkdir()
    (place / "lib.prose").write_text('input other: "o"\noutput y = session "Other"\n')
    (tmp_path / "outside.prose").write_text(CHILD)
    monkeypatch.chdir(place)
    return place


@pytest.mark.parametrize("era", ERAS)
async def test_use_reaches_no_prose_file_outside_the_project(root, elsewhere, tmp_path, era):
    (root / "sub").mkdir()
    absolute = str(tmp_path / "outside.prose")
    (root / "sub" / "up.prose").write_text(USES.format(target="../../outside.prose"))
    (root / "sub" / "abs.prose").write_text(USES.format(target=absolute))
    programs = ["sub/up.prose", "sub/abs.prose", USES.format(target=absolute),
                USES.format(target="../outside.prose")]  # inline: at the project's top
    (root / "s.yaml").write_text("default_output: ok\n")
    async with host(root, era, watch=False) as h:
        for program in programs:
            report = await h.call("compile_program", program=program)
            assert not report["ok"] and "E034" in report["_text"], program
            for tool, extra in (("start_run", {}),
                                ("run_program", {"provider": "scripted", "script": "s.yaml"})):
                text = await h.refused(tool, program=program, **extra)
                assert "E034" in text and "findings" not in text
        with pytest.raises(MCPError, match="E034"):
            await h.client.get_prompt("prose-run", {"program": "sub/up.prose"})
        got = await h.client.get_prompt("prose-compile", {"program": "sub/abs.prose"})
        assert "E034" in got.messages[0].content.text and "1 error" in \
            got.messages[0].content.text
    assert not (root / ".prose" / "runs").exists() or not any((root / ".prose" / "runs")
                                                              .iterdir())


@pytest.mark.parametrize("era", ERAS)
async def test_imports_resolve_from_the_program_in_the_project_not_the_servers_cwd(
        root, elsewhere, era):
    (root / "lib.prose").write_text(CHILD)
    (root / "s.yaml").write_text("default_output: found\n")
    source = USES.format(target="./lib.prose")
    (root / "main.prose").write_text(source)
    async with host(root, era, watch=False) as h:
        for program in ("main.prose", source):
            report = await h.call("compile_program", program=program)
            assert report["ok"], report["_text"]
            done = await h.call("run_program", program=program, provider="scripted",
                                script="s.yaml")
            assert done["status"] == "completed", done["_text"]
            started = await h.call("start_run", program=program)
            assert started["run_id"]
        prompt = await h.client.get_prompt("prose-run", {"program": "main.prose"})
        assert "lib.prose" in prompt.messages[0].content.text


# ------------------------------------------------------------------ size and kind of files

@pytest.mark.parametrize("era", ERAS)
async def test_programs_are_capped_at_the_import_limit(root, era):
    from openprose.language.files import MAX_PROGRAM_BYTES

    big = "# " + "x" * MAX_PROGRAM_BYTES + "\noutput x = \"y\"\n"
    (root / "big.prose").write_text(big)
    async with host(root, era, watch=False) as h:
        for program in (big, "big.prose"):
            for tool in ("compile_program", "start_run", "run_program"):
                text = await h.refused(tool, program=program)
                assert "larger than 1 MiB" in text, (tool, text[:200])


@pytest.mark.parametrize("era", ERAS)
async def test_a_fifo_as_program_or_script_is_refused_unread(root, era):
    os.mkfifo(root / "pipe.prose")
    os.mkfifo(root / "pipe.yaml")
    # The test holds both ends of each FIFO, so an open would not block, and puts a marker in
    # it: a server that reads the FIFO takes the marker out.
    held = [os.open(root / name, os.O_RDWR | os.O_NONBLOCK) for name in ("pipe.prose",
                                                                           "pipe.yaml")]
    try:
        for fd in held:
            os.write(fd, b"marker")
        async with host(root, era, watch=False) as h:
            for tool in ("compile_program", "start_run", "run_program"):
                text = await h.refused(tool, program="pipe.prose")
                assert "FIFO" in text
            text = await h.refused("run_program", program=PROGRAM, inputs={"topic": "t"},
                                   provider="scripted", script="pipe.yaml")
            assert "FIFO" in text
        assert [os.read(fd, 100) for fd in held] == [b"marker", b"marker"]
    finally:
        for fd in held:
            os.close(fd)


async def test_compiling_runs_off_the_event_loop(root, monkeypatch):
    """A large program's compile holds up no other client: it runs on a worker thread."""
    import threading

    from openprose.mcp_server import prompts

    threads: list[threading.Thread] = []
    real = prompts.compile_program

    def compile_program(*args, **kwargs):
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(prompts, "compile_program", compile_program)
    async with host(root, {}, watch=False) as h:
        await h.call("compile_program", program="p.prose")
        await h.call("start_run", program="p.prose")
        await h.client.get_prompt("prose-compile", {"program": "p.prose"})
    assert len(threads) == 3
    assert threading.main_thread() not in threads


# ------------------------------------------------------------------ run hand-over

def _client(mcp, name: str) -> Client:
    return Client(mcp, mode="legacy", client_info=Implementation(name=name, version="1"))


async def test_taking_over_a_run_another_client_drives_is_explicit(root):
    mcp = create_server(root, home=root / "home", watch=False)
    async with _client(mcp, "owner") as owner, _client(mcp, "intruder") as intruder:
        started = await owner.call_tool("start_run", {"program": "p.prose",
                                                      "inputs": {"topic": "t"}})
        run_id, vm = started.structured_content["run_id"], started.structured_content["vm_token"]
        refused = await intruder.call_tool("resume_run", {"run_id": run_id})
        assert refused.is_error
        text = refused.content[0].text
        assert "client 'owner'" in text and "take_over=true" in text
        # the refusal changed nothing: the owner still drives the run
        assert not (await owner.call_tool("run_status", {"vm_token": vm})).is_error
        taken = await intruder.call_tool("resume_run", {"run_id": run_id, "take_over": True})
        assert not taken.is_error, taken.content[0].text
        late = await owner.call_tool("run_status", {"vm_token": vm})
        assert late.is_error
        assert "taken over by client 'intruder' at 20" in late.content[0].text
        new_vm = taken.structured_content["vm_token"]
        assert not (await intruder.call_tool("run_status", {"vm_token": new_vm})).is_error


# ------------------------------------------------------------------ file descriptors

def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


#: Descriptors background threads may hold while a count is taken (never one per run).
TRANSIENT_DESCRIPTORS = 2


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
async def test_descriptors_stay_flat_however_many_runs_the_server_serves(root, backend):
    (root / "s.yaml").write_text("default_output: ok\n")
    arguments = {"program": "p.prose", "inputs": {"topic": "t"}}
    async with host(root, {"mode": "legacy"}) as h:

        async def serve(times: int) -> None:
            for _ in range(times):
                done = await h.call("run_program", **arguments, state=backend,
                                    provider="scripted", script="s.yaml")
                assert done["status"] == "completed"
                started = await h.call("start_run", **arguments, backend=backend)
                await h.call("complete_run", vm_token=started["vm_token"], status="failed")
                for run_id in (done["run_id"], started["run_id"]):
                    await h.call("get_run", run_id=run_id)
                    await h.client.read_resource(f"prose://runs/{run_id}/state")
                    await h.refused("resume_run", run_id=run_id)

        await serve(2)  # the stores, the watcher and the worker threads are open now
        before = _descriptors()
        await serve(15)
        # A leak grows with the 30 runs served; a background thread (the watcher reading a
        # journal) may hold one file for a moment whenever the count is taken.
        assert _descriptors() <= before + TRANSIENT_DESCRIPTORS


# ------------------------------------------------------------------ paths Path rejects

BAD_TEXTS = ["a\x00b.prose", "x" * 5000 + ".prose", "../" * 40 + "y" * 300 + ".prose"]


def _filler(schema: dict) -> object:
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    return {"integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}.get(
        kind or "", "x")


async def test_no_tool_answers_a_bad_path_or_name_with_a_bare_error(root):
    """A NUL byte, an overlong path or an overlong part in any text argument of any tool
    gets a refusal saying what is wrong, never the SDK's bare 'Error executing tool X' of
    an exception nobody handled."""
    async with Client(create_server(root, watch=False)) as client:
        tools = (await client.list_tools()).tools
        bare: list[tuple[str, str, str]] = []
        for tool in tools:
            properties = tool.input_schema.get("properties", {})
            required = {name: _filler(properties[name])
                        for name in tool.input_schema.get("required", [])}
            for name, schema in properties.items():
                if _filler(schema) != "x" or "enum" in schema:
                    continue
                for bad in BAD_TEXTS:
                    arguments = {**required, name: bad}
                    if tool.name == "next_step":
                        arguments["wait_s"] = 0
                    result = await client.call_tool(tool.name, arguments)
                    text = result.content[0].text if result.content else ""
                    if text.strip() == f"Error executing tool {tool.name}":
                        bare.append((tool.name, name, bad[:12]))
    assert bare == []


# ------------------------------------------------------------------ the watcher

async def test_serving_runs_puts_no_watchdog_warning_on_stderr(root):
    """Each new run used to make watchdog register a directory twice under its recursive
    watch ("Callback with id ... already exists", several KB each); runs now arrive whole
    (tests/state/test_creation.py shows the cause is gone deterministically)."""
    (root / "keep.prose").write_text(KEEPER)
    (root / "s.yaml").write_text("default_output: ok\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        async with host(root, {"mode": "legacy"}) as h:
            for backend in ("filesystem", "sqlite"):
                for program in ("p.prose", "keep.prose"):
                    for _ in range(3):
                        done = await h.call("run_program", program=program,
                                            inputs={"topic": "t"} if program == "p.prose"
                                            else {}, state=backend, provider="scripted",
                                            script="s.yaml")
                        assert done["status"] == "completed", done["_text"]
    assert [str(w.message)[:80] for w in seen if "already exists" in str(w.message)] == []
