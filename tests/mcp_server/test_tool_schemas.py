"""The ``tools/list`` every host keeps in context: within its size budget, and each listed
outputSchema still admits what the tool really returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client

from openprose.mcp_server.server import create_server

pytestmark = pytest.mark.anyio

# The target: 10 KB (10,240 B).
TOOLS_LIST_BUDGET = 10_240

PROGRAM = """\
input topic: "What to research"
block review(draft) (max_depth: 2):
  let notes = session "Review {draft}"
let a = session "Angle on {topic}"
do review(a)
output final = session "Finish"
  context: a
"""


async def test_tools_list_stays_within_budget(tmp_path: Path) -> None:
    async with Client(create_server(tmp_path, watch=False)) as client:
        listed = await client.list_tools()
    size = len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())
    assert size <= TOOLS_LIST_BUDGET
    assert all(tool.output_schema for tool in listed.tools)


async def test_structured_content_validates_against_listed_output_schemas(
        tmp_path: Path) -> None:
    (tmp_path / "study.prose").write_text(PROGRAM)
    async with Client(create_server(tmp_path, watch=False)) as client:
        schemas = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}
        checked: list[str] = []

        async def call(tool: str, **arguments: Any) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content
            jsonschema.validate(result.structured_content, schemas[tool])
            checked.append(tool)
            return result.structured_content or {}

        started = await call("start_run", program="study.prose", inputs={"topic": "tides"})
        vm = started["vm_token"]
        spawned = await call("spawn_session", vm_token=vm, statement="2",
                             prompt="Angle on tides")
        await call("write_binding", token=spawned["session_token"], value="an angle")
        await call("read_binding", token=vm, name=spawned["binding"])
        frame = await call("push_frame", vm_token=vm, block="review",
                           args={"draft": "an angle"})
        review = await call("spawn_session", vm_token=vm, statement="review.0",
                            execution_id=frame["execution_id"])
        await call("write_binding", token=review["session_token"], value="fine")
        await call("pop_frame", vm_token=vm, execution_id=frame["execution_id"])
        await call("run_status", vm_token=vm)
        await call("compile_program", program="study.prose")
        await call("list_runs")
    assert len(checked) == 11
