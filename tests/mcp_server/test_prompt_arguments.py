"""Every tool call a text for a model spells out — the prompts, the run-mode specs, the
skill, the server's instructions and tool descriptions, the messages tools answer with —
names only arguments the tool's schema has (``start_run(..., state=...)`` sent models to a
parameter that does not exist)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from openprose import prompts
from openprose.engine.briefs import HOST_MODELS
from openprose.language.validator import MODELS
from openprose.mcp_server import server as server_module
from openprose.mcp_server.briefing import HOST_TOOLS
from openprose.mcp_server.server import create_server

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]
SOURCES = [*(REPO / "src" / "openprose" / "mcp_server").glob("*.py"),
           REPO / "src" / "openprose" / "engine" / "briefs.py"]
SKILL_TEXTS = sorted((REPO / "skill").rglob("*.md"))
CALL = re.compile(r"\b([a-z_]+)\(([^()]*)\)")
# "call `start_run` with program `q.prose` and state `sqlite`": arguments named in words
ARTICLES = frozenset({"the", "a", "an", "its", "their", "your"})
WITH = re.compile(r"`([a-z_]+)` with ((?:[a-z_]+ `[^`]*`(?:,? and |, )?)+)")
#: ``name="value"`` in a spelled-out call.
VALUE = re.compile(r"\b([a-z_]+)=\"([^\"]*)\"")
#: A mode a text names: ``mode="guided"``, ``mode: "embodied"``.
MODE = re.compile(r"\bmode(?:=|: )\"([a-z-]+)\"")
#: First words of the server's tool names: a call ``verb_thing(...)`` in a text is a tool.
TOOL_VERBS = frozenset({"start", "get", "run", "resume", "complete", "spawn", "write", "read",
                        "fail", "update", "push", "pop", "record", "next", "submit", "cancel",
                        "list", "compile"})
#: What Claude Code 2.1.328 offers a subagent besides MCP tools (PLATFORM.md).
CLAUDE_CODE_TOOLS = frozenset({"Read", "Write", "Edit", "Bash", "WebFetch", "WebSearch",
                               "NotebookEdit"})
#: Claims the server no longer keeps: the server follows loop rounds itself; one reply.
STALE = ("status `iteration`", "a loop's iteration n", "confirmation only",
         "RecursionLimitExceeded: block", "(no mode)", "'guided' (the default", "(default)")
DEEP = """block inner(x) (max_depth: 1):
  do inner(x)
do inner("a")
"""


def literals(path: Path) -> list[str]:
    """The string literals of a module a model may read: every one but docstrings, with an
    f-string's replacement fields as ``X``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.append("".join(part.value if isinstance(part, ast.Constant) else "X"
                                 for part in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            found.append(node.value)
    return found


def worded(words: str) -> list[str]:
    """The arguments "`tool` with ..." names: ``program `q.prose``` names program; ``the
    `vm_token``` names vm_token."""
    return [quoted if word in ARTICLES else word
            for word, quoted in re.findall(r"([a-z_]+) `([^`]*)`", words)]


def named_arguments(arguments: str) -> list[str]:
    """The argument names of a spelled-out call: ``name=value`` and bare names."""
    names = []
    for piece in arguments.split(","):
        name = piece.split("=", 1)[0].strip()
        if name.isidentifier():
            names.append(name)
    return names


async def model_texts(tmp_path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The server's tools, and every text a model reads (the source literals aside)."""
    (tmp_path / "q.prose").write_text('input topic: "a topic"\nsession "About {topic}"\n')
    async with Client(create_server(tmp_path, watch=False)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        texts = {f"{name} description": t.description or "" for name, t in tools.items()}
        for mode in ("guided", "embodied", "in-context"):
            got = await client.call_tool("get_instructions", {"mode": mode})
            texts[f"get_instructions {mode}"] = got.content[0].text
        for state in ("filesystem", "in-context"):
            got = await client.get_prompt("prose-run", {"program": "q.prose topic=tides",
                                                        "state": state})
            texts[f"prose-run {state}"] = got.messages[0].content.text
    texts["instructions"] = server_module.INSTRUCTIONS
    texts |= {f"prompts/{p.name}": prompts.load(p.stem)
              for p in (REPO / "src" / "openprose" / "prompts").glob("*.md")}
    texts |= {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in SKILL_TEXTS}
    return tools, texts


async def test_every_call_a_text_spells_out_matches_the_tools_schema(tmp_path: Path) -> None:
    tools, texts = await model_texts(tmp_path)
    for path in SOURCES:
        texts |= {f"{path.name}: {text[:40]!r}": text for text in literals(path)}

    checked, wrong = 0, []
    for where, text in texts.items():
        calls = [(tool, named_arguments(arguments)) for tool, arguments in CALL.findall(text)]
        calls += [(tool, worded(words)) for tool, words in WITH.findall(text)]
        for tool, names in calls:
            if tool not in tools:
                continue
            known = set(tools[tool].input_schema.get("properties", {}))
            checked += 1
            wrong += [f"{where}: {tool} names '{name}'" for name in names if name not in known]
        for tool, arguments in CALL.findall(text):  # a value given is one the schema takes
            properties = tools[tool].input_schema.get("properties", {}) if tool in tools else {}
            for name, value in VALUE.findall(arguments):
                allowed = properties.get(name, {}).get("enum")
                if allowed is not None and value not in allowed:
                    wrong.append(f"{where}: {tool}({name}={value!r}) not in {allowed}")
    assert wrong == []
    assert checked >= 20  # the texts do spell calls out


async def test_every_claim_of_the_model_facing_texts_holds_in_the_server(tmp_path: Path) -> None:
    """What the texts claim about tools, modes, arguments and messages, each checked against
    the server: a tool a text calls exists; a mode it names is one start_run or
    get_instructions takes; the session agent's tools are Claude Code's and ours; a session
    subagent is told one way to reply; every host that launches sessions is told to wait for
    them, to pass the session's model, and what to do without subagents; a refusal a spec
    quotes is the server's."""
    tools, texts = await model_texts(tmp_path)
    wrong = []
    modes = {*tools["start_run"].input_schema["properties"]["mode"]["enum"],
             *tools["get_instructions"].input_schema["properties"]["mode"]["enum"]}
    assert set(tools["start_run"].input_schema["properties"]["mode"]["enum"]) == \
        {"embodied", "guided"}
    for where, text in texts.items():
        wrong += [f"{where}: no tool {name}" for name, _ in CALL.findall(text)
                  if name.split("_")[0] in TOOL_VERBS and "_" in name and name not in tools]
        wrong += [f"{where}: no mode {mode!r}" for mode in MODE.findall(text)
                  if mode not in modes]
        for stale in STALE if "in-context" not in where else ():  # no server there
            if stale in text:
                wrong.append(f"{where}: says {stale!r}")
    agent = (REPO / "skill" / "agents" / "session.md").read_text(encoding="utf-8")
    listed = re.search(r"^tools: (.*)$", agent, re.M)
    assert listed is not None
    for name in (n.strip() for n in listed.group(1).split(",")):
        ours = name.removeprefix("mcp__plugin_openprose_openprose__")
        if ours != name:
            wrong += [] if ours in tools else [f"session.md: no tool {ours}"]
        elif name not in CLAUDE_CODE_TOOLS:
            wrong.append(f"session.md: Claude Code has no tool {name}")
    reply = "reply with that summary line only"
    assert reply in agent and reply in HOST_TOOLS.finish
    for where in ("skill/skills/open-prose/SKILL.md", "prompts/run-guided.md",
                  "prompts/run-tools.md"):
        text = " ".join(texts[where].split())
        for claim in ("run_in_background: false", "`model`", "Without subagents",
                      "Claude Desktop", "fail_session"):
            if claim.lower() not in text.lower():
                wrong.append(f"{where}: does not say {claim!r}")
    assert set(HOST_MODELS) == MODELS  # the models a handle names are the program's
    assert wrong == []
    # The recursion limit, as the embodied spec quotes it, is the server's refusal.
    quoted = re.search(r"`(the program failed: block 'NAME' exceeded max_depth N)`",
                       " ".join(texts["prompts/run-tools.md"].split()))
    assert quoted is not None
    (tmp_path / "deep.prose").write_text(DEEP)
    async with Client(create_server(tmp_path, watch=False)) as client:
        vm = (await client.call_tool("start_run", {"program": "deep.prose"})
              ).structured_content["vm_token"]
        frame = await client.call_tool("push_frame", {"vm_token": vm, "block": "inner",
                                                      "args": {"x": "a"}, "statement": "1"})
        deeper = await client.call_tool("push_frame", {
            "vm_token": vm, "block": "inner", "args": {"x": "a"},
            "parent": frame.structured_content["execution_id"]})
    said = quoted.group(1).replace("NAME", "inner").replace("N", "1")
    assert deeper.is_error and said in deeper.content[0].text, deeper.content[0].text


async def test_a_model_reaches_every_run_modes_spec(tmp_path: Path) -> None:
    async with Client(create_server(tmp_path, watch=False)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        modes = listed["get_instructions"].input_schema["properties"]["mode"]["enum"]
        assert sorted(modes) == ["embodied", "guided", "in-context"]
        embodied = await client.call_tool("get_instructions", {"mode": "embodied"})
        guided = await client.call_tool("get_instructions", {"mode": "guided"})
        refused = await client.call_tool("get_instructions", {"mode": "improvised"})
    assert embodied.content[0].text == prompts.load("run-tools")
    assert "next_step(vm_token=" in guided.content[0].text
    assert refused.is_error
    assert "get_instructions" in server_module.INSTRUCTIONS
    assert "prompt" not in server_module.INSTRUCTIONS  # a model cannot get a prompt
