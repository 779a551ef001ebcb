"""Every tool call a text for a model spells out — the prompts, the run-mode specs, the
skill, the server's instructions and tool descriptions, the messages tools answer with —
names only arguments the tool's schema has (``start_run(..., state=...)`` sent models to a
parameter that does not exist)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from mcp import Client

from openprose import prompts
from openprose.mcp_server import server as server_module
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


async def test_every_call_a_text_spells_out_matches_the_tools_schema(tmp_path: Path) -> None:
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
    assert wrong == []
    assert checked >= 20  # the texts do spell calls out


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
