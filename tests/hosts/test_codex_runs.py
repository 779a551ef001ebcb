"""End to end in a second host from another vendor: ``codex exec --json "prose run …"`` with our
server and skill installed by ``prose install-skill --codex``, against a local fake of the
OpenAI Responses API. The scripted model runs the program guided (``start_run`` with
``mode: "guided"``, then ``next_step``) and, with no subagent of ours to hand sessions to, does
each session itself as the prose-run prompt says: it reads the brief (``get_brief``) and the
context the brief names, and writes the result with the session token, a parallel block's
sessions in one turn. Codex exits
0 even when a call failed, so the proof is the server's record: the run on disk equals
``prose run`` of the program with the same answers, and every call Codex made succeeded."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.hosts.codex_cli import NAMESPACE, run_codex, tool_calls, write_config
from tests.hosts.fake_responses import FakeResponsesAPI, Item, function_call, message
from tests.hosts.host_model import REFERENCE_SCRIPT, answer, read_brief
from tests.hosts.test_plugin_manifest import SKILL, frontmatter
from tests.hosts.test_plugin_runs import INPUTS, PROGRAM
from tests.mcp_server.test_host_walk import assert_same_run
from tests.mcp_server.tool_host import engine_run

PROSE = Path(sys.executable).with_name("prose")
FILE = "examples/review.prose"


@dataclass
class Done:
    """One call of the conversation and what the model got back (the tool's JSON)."""

    name: str
    arguments: dict[str, Any]
    output: dict[str, Any]


def history(body: dict) -> list[Done]:
    """Our tools' calls in the conversation Codex resent, with their results. An output is
    a "Wall time" line, then "Output:" and the tool's structured content as JSON."""
    outputs = {item["call_id"]: item.get("output") for item in body["input"]
               if item.get("type") == "function_call_output"}
    done = []
    for item in body["input"]:
        if item.get("type") == "function_call" and item.get("namespace") == NAMESPACE:
            text = outputs.get(item["call_id"]) or ""
            _, _, payload = text.partition("Output:\n")
            try:
                output = json.loads(payload)
            except ValueError:
                output = {"unparsed": text}
            done.append(Done(item["name"], json.loads(item["arguments"]), output))
    return done


def call(tool: str, **arguments: Any) -> Item:
    return function_call(NAMESPACE, tool, arguments)


def guided_model(body: dict) -> list[Item]:
    """The scripted host model: a function of the request alone."""
    done = history(body)
    if not done:
        return [call("start_run", program=FILE, inputs=INPUTS, mode="guided")]
    started = done[0].output
    assert "vm_token" in started, f"start_run failed: {started}"
    steps = [i for i, d in enumerate(done) if d.name == "next_step"]
    if not steps:
        return [call("next_step", vm_token=started["vm_token"], wait_s=10)]
    step, since = done[steps[-1]].output, done[steps[-1] + 1:]
    if step.get("status") != "running":
        return [message(f"The program finished: {step.get('status')}.")]
    handles = [item for item in step.get("pending", []) if item["kind"] == "session"]
    briefs = {d.arguments["token"]: d.output for d in since if d.name == "get_brief"}
    asks = [call("get_brief", token=item["token"]) for item in handles
            if item["token"] not in briefs]
    if asks:  # no subagents: the model reads each session's brief itself
        return asks
    sessions = [(item, read_brief(briefs[item["token"]])) for item in handles]
    read = {(d.arguments["token"], d.arguments["name"]) for d in since if d.name == "read_binding"}
    reads = [call("read_binding", token=work.token, name=name) for _, work in sessions
             for name in work.context if (work.token, name) not in read]
    if reads:
        return reads
    answered = {d.arguments["token"] for d in since if d.name in ("write_binding",
                                                                   "submit_verdict")}
    work = [call("write_binding", token=w.token, value=answer(w.task), summary="done")
            for _, w in sessions if w.token not in answered]
    work += [call("submit_verdict", token=item["token"], value=True, reason="it holds")
             for item in step.get("pending", [])
             if item["kind"] != "session" and item["token"] not in answered]
    return work or [call("next_step", vm_token=started["vm_token"], wait_s=10)]


def test_guided_run_in_codex_cli_equals_prose_run(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "examples").mkdir(parents=True)
    (project / FILE).write_text(PROGRAM)
    with FakeResponsesAPI(guided_model) as api:
        write_config(tmp_path / "codex", api.url, PROSE, project)
        result = run_codex("prose run examples/review.prose topic=tides", tmp_path / "codex",
                           project)
    assert api.errors == [], api.errors
    # What the model saw: our tools grouped under their namespace.
    groups = {t.get("name"): t for t in api.requests[0]["tools"] if t.get("type") == "namespace"}
    assert {"start_run", "next_step", "write_binding"} <= {
        t["name"] for t in groups[NAMESPACE]["tools"]}, result.stdout + result.stderr
    # and the open-prose skill prose install-skill --codex copied, listed for "prose run".
    meta, _ = frontmatter(SKILL)
    given = "\n".join(part.get("text", "") for item in api.requests[0]["input"]
                      for part in item.get("content") or [] if isinstance(part, dict))
    assert f"{meta['name']}: {meta['description']}" in given

    made = tool_calls(result.stdout)
    assert made and all(c["status"] == "completed" and not c.get("error") for c in made), made
    # The parallel block's two sessions were written in one turn.
    writes = [[c for c in turn if c["name"] == "write_binding"]
              for turn in (guided_model_turns(api.requests))]
    assert sorted(len(w) for w in writes if w) == [1, 1, 2]

    runs = list((project / ".prose" / "runs").iterdir())
    assert len(runs) == 1, runs
    reference = tmp_path / "reference"
    (reference / "examples").mkdir(parents=True)
    (reference / FILE).write_text(PROGRAM)
    outcome = engine_run(reference, PROGRAM, FILE, dict(INPUTS), REFERENCE_SCRIPT)
    assert outcome.status == "completed", outcome.error
    assert_same_run(project, runs[0].name, reference, outcome.run_id)
    last = history(api.requests[-1])[-1]
    assert (last.name, last.output.get("status")) == ("next_step", "completed")


def guided_model_turns(requests: list[dict]) -> list[list[dict]]:
    """Each model turn's calls of our tools, from the last request's conversation."""
    turns: list[list[dict]] = []
    previous: str | None = None
    for item in requests[-1]["input"]:
        if item.get("type") == "function_call" and item.get("namespace") == NAMESPACE:
            if previous != "function_call":
                turns.append([])
            turns[-1].append(item)
        previous = item.get("type") if item.get("type") != "reasoning" else previous
    return turns
