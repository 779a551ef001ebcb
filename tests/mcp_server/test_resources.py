"""Run resources read by a real in-process MCP client, in both protocol eras, on every backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.shared.exceptions import MCPError

from openprose.mcp_server.resources import RunCatalog, parse_binding_name, register
from openprose.state import BindingRef, StatementStatus, StateSnapshot, open_store

pytestmark = pytest.mark.anyio

PROGRAM = 'let draft = session "Write a draft"\noutput final = draft\n'
ERAS = [pytest.param({"mode": "legacy"}, id="handshake"), pytest.param({}, id="2026-07-28")]


@pytest.fixture
def project(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "project"
    (root / ".prose").mkdir(parents=True)
    if backend == "postgres":
        url, schema = request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
        (root / ".prose" / ".env").write_text(
            f"OPENPROSE_POSTGRES_URL={url}\nOPENPROSE_POSTGRES_SCHEMA={schema}\n")
    return root, backend


def _seed(root: Path, backend: str, tmp_path: Path) -> str:
    """A run with a root binding, a binding inside a block execution and a rendered state."""
    store = open_store(root, backend, home=tmp_path / "home")
    run = store.create_run(PROGRAM, "draft.prose")
    run.write_binding(BindingRef("draft"), "the root draft", "let", 'session "Write a draft"')
    frame = run.push_frame("review", {})
    run.write_binding(BindingRef("draft", frame.execution_id), "the inner draft", "let", "x")
    run.update_state(StateSnapshot(statuses=(StatementStatus(1, 1, "complete", "draft"),)))
    store.close()
    return run.id


def _server(root: Path, tmp_path: Path) -> tuple[MCPServer, RunCatalog]:
    server = MCPServer("resources-test")
    catalog = RunCatalog(root, home=tmp_path / "home")
    register(server, catalog)
    return server, catalog


def _text(result: object) -> str:
    return result.contents[0].text  # type: ignore[attr-defined]


@pytest.mark.parametrize("era", ERAS)
async def test_runs_state_program_and_bindings_are_readable(
        era: dict, project: tuple[Path, str], tmp_path: Path) -> None:
    root, backend = project
    run_id = _seed(root, backend, tmp_path)
    server, catalog = _server(root, tmp_path)
    async with Client(server, **era) as client:
        listed = await client.list_resources()
        assert [r.uri for r in listed.resources] == ["prose://runs"]
        templates = {t.uri_template for t in (await client.list_resource_templates())
                     .resource_templates}
        assert templates == {"prose://runs/{run_id}/state", "prose://runs/{run_id}/program",
                             "prose://runs/{run_id}/bindings/{name}"}

        runs = json.loads(_text(await client.read_resource("prose://runs")))["runs"]
        assert [(r["id"], r["backend"], r["program"]) for r in runs] == [
            (run_id, backend, "draft.prose")]
        assert runs[0]["state"] == f"prose://runs/{run_id}/state"

        state = _text(await client.read_resource(f"prose://runs/{run_id}/state"))
        assert state.startswith("# Execution State") and f"run: {run_id}" in state
        assert "bindings/draft (complete)" in state
        assert _text(await client.read_resource(f"prose://runs/{run_id}/program")) == PROGRAM
        base = f"prose://runs/{run_id}/bindings/"
        assert _text(await client.read_resource(base + "draft")) == "the root draft"
        assert _text(await client.read_resource(base + "draft@1")) == "the inner draft"
    catalog.close()


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("suffix", "reason"), [
    ("bindings/missing", "binding 'missing' does not exist in run {run}"),
    ("bindings/draft@7", "binding 'draft' in execution 7 does not exist in run {run}"),
    ("bindings/draft@x", "the part after '@' must be an execution id"),
])
async def test_unknown_bindings_are_refused_with_the_run_and_name(
        era: dict, suffix: str, reason: str, tmp_path: Path) -> None:
    root = tmp_path / "project"
    run_id = _seed(root, "filesystem", tmp_path)
    server, catalog = _server(root, tmp_path)
    async with Client(server, **era) as client:
        with pytest.raises(MCPError) as caught:
            await client.read_resource(f"prose://runs/{run_id}/{suffix}")
    assert reason.format(run=run_id) in str(caught.value)
    catalog.close()


@pytest.mark.parametrize("era", ERAS)
async def test_unknown_and_malformed_run_ids_are_refused(era: dict, tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    server, catalog = _server(root, tmp_path)
    async with Client(server, **era) as client:
        with pytest.raises(MCPError, match="run 20250101-000000-abcdef does not exist"):
            await client.read_resource("prose://runs/20250101-000000-abcdef/state")
        with pytest.raises(MCPError, match="not of the form"):
            await client.read_resource("prose://runs/not-a-run/program")
        assert json.loads(_text(await client.read_resource("prose://runs"))) == {"runs": []}
    catalog.close()


def test_binding_names_with_an_execution_id(tmp_path: Path) -> None:
    assert parse_binding_name("draft") == BindingRef("draft")
    assert parse_binding_name("draft@12") == BindingRef("draft", 12)
    with pytest.raises(ResourceNotFoundError, match="execution id"):
        parse_binding_name("draft@0")
    root = tmp_path / "project"
    run_id = _seed(root, "filesystem", tmp_path)
    catalog = RunCatalog(root, home=tmp_path / "home")
    with pytest.raises(ResourceNotFoundError, match="must not contain path separators"):
        catalog.binding(run_id, "../etc")
    catalog.close()
