"""A delegated run on the client's model (sampling) whose client declares tools in sampling:
its sessions get the work tools, each call checked by the session's permissions and
recorded; a client without tools in sampling gets the plain text sessions."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp_types import (
    CreateMessageResult,
    CreateMessageResultWithTools,
    SamplingCapability,
    SamplingToolsCapability,
    TextContent,
    ToolUseContent,
)

from openprose.mcp_server.server import create_server
from openprose.state import open_store

pytestmark = pytest.mark.anyio

PROGRAM = '''\
agent fixer:
  prompt: "You fix code."
  permissions:
    write: ["src/**"]

output r = session: fixer
  prompt: "Fix add in src/calc.py"
'''


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "p.prose").write_text(PROGRAM)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "README.md").write_text("readme\n")
    return tmp_path


async def test_sampled_sessions_use_the_work_tools_under_their_permissions(root):
    steps = [ToolUseContent(type="tool_use", id="u1", name="edit", input={
                 "file_path": "src/calc.py", "old_string": "a - b", "new_string": "a + b"}),
             ToolUseContent(type="tool_use", id="u2", name="write", input={
                 "file_path": "README.md", "content": "gone"})]
    seen = []

    async def sample(context, params):
        seen.append(params)
        if len(seen) <= len(steps):
            return CreateMessageResultWithTools(role="assistant", model="client-model",
                                                content=[steps[len(seen) - 1]],
                                                stop_reason="toolUse")
        return CreateMessageResult(role="assistant", model="client-model",
                                   content=TextContent(type="text", text="fixed add"))

    async with Client(create_server(root, watch=False), mode="legacy", sampling_callback=sample,
                      sampling_capabilities=SamplingCapability(
                          tools=SamplingToolsCapability())) as client:
        result = await client.call_tool("run_program", {"program": "p.prose",
                                                        "provider": "sampling"})
    report = result.structured_content
    assert report["status"] == "completed", result.content[0].text
    assert {t.name for t in seen[0].tools} >= {"read", "write", "edit", "glob", "grep"}
    assert (root / "src" / "calc.py").read_text().endswith("return a + b\n")
    assert (root / "README.md").read_text() == "readme\n"
    refusal = seen[2].messages[-1].content[0]
    assert refusal.is_error and "may not write README.md" in refusal.content[0].text
    with open_store(root, "filesystem") as store:
        run = store.open_run(report["run_id"])
        calls = [(c.meta["tool"], c.status) for c in run.tool_calls()]
        [value] = [b.value for b in run.bindings() if b.name == "r"]
    assert calls == [("edit", "allowed"), ("write", "refused")]
    assert value == "fixed add"
