"""`prose export`: a run copied filesystem → sqlite → postgres → filesystem is unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from openprose.state import AgentRef, BindingRef, ImportRecord, Usage, open_store
from openprose.state.export import export_run

PROSE = str(Path(sys.executable).with_name("prose"))


def populate(root: Path) -> str:
    store = open_store(root, "filesystem", home=root / "home")
    run = store.create_run('let a = session "x"\n', "main.prose")
    run.write_binding(BindingRef("topic"), "tides\nand moons", "input", 'input topic: "t"')
    grant = run.grant_session(BindingRef("a"), "let", 'let a = session "x"',
                              [BindingRef("topic")], AgentRef("captain", "execution"))
    handle = store.session(grant.token)
    handle.write_output("a value with --- a separator\n---\nand more")
    handle.write_memory("# memory\nremembered")
    handle.append_segment("first segment")
    handle.append_segment("second segment")
    run.complete_session(grant.token, "0:a", input_hash="h1", usage=Usage(7, 11, 0.5))
    run.record_verdict("1:cond", "h2", True, "because")
    frame = run.push_frame("process", {"chunk": "c"})
    run.write_binding(BindingRef("part", frame.execution_id), "scoped", "let", "let part = 1")
    run.record_import(ImportRecord("research", "https://example.com/alice/research.prose",
                                   "sha256:abc", {"topic": "what to study"}, ("findings",)))
    child = run.child("alice", "research", 'output findings = session "f"\n')
    child.write_binding(BindingRef("findings"), "child output", "output", "output findings")
    run.finish("completed")
    store.close()
    return run.id


def snapshot(root: Path, backend: str, run_id: str, **kw: str) -> dict[str, object]:
    with open_store(root, backend, home=root / "home", **kw) as store:
        run = store.open_run(run_id)
        child = run.child("alice", "research", "")
        agent = AgentRef("captain", "execution")
        return {
            "status": run.status,
            "program": run.program_source,
            "bindings": sorted((b.name, b.execution_id, b.kind, b.source, b.value)
                               for b in run.bindings()),
            "child": sorted((b.name, b.value) for b in child.bindings()),
            "memory": run.memory(agent),
            "segments": run.segments(agent),
            "result": run.journal("0:a").value,
            "usage": run.usage_totals(),
            "verdict": (run.verdict("1:cond").value, run.verdict("1:cond").reason),
            "frames": [(f.execution_id, f.block, f.depth) for f in run.frames()],
            "imports": run.imports(),
        }


def test_round_trip_through_every_backend_keeps_everything(tmp_path: Path,
                                                           pg_schema: str, pg_url: str) -> None:
    run_id = populate(tmp_path)
    original = snapshot(tmp_path, "filesystem", run_id)
    assert original["segments"] == [(1, "first segment"), (2, "second segment")]
    assert original["usage"] == Usage(7, 11, 0.5, 1)
    [registered] = original["imports"]
    assert (registered.alias, registered.inputs, registered.outputs) == (
        "research", {"topic": "what to study"}, ("findings",))
    assert registered.fetched_at  # stamped when recorded

    pg = {"postgres_url": pg_url, "schema": pg_schema}
    fs = open_store(tmp_path, "filesystem", home=tmp_path / "home")
    sq = open_store(tmp_path, "sqlite", home=tmp_path / "home")
    assert export_run(fs, run_id, sq) == [run_id, f"{run_id}/imports/alice--research"]
    assert snapshot(tmp_path, "sqlite", run_id) == original

    pgs = open_store(tmp_path, "postgres", home=tmp_path / "home", **pg)
    export_run(sq, run_id, pgs)
    assert snapshot(tmp_path, "postgres", run_id, **pg) == original

    # Remove the filesystem copy entirely, then bring the run back from PostgreSQL.
    fs.close()
    for path in sorted((tmp_path / ".prose" / "runs" / run_id).rglob("*"), reverse=True):
        if path.name != "state.db" and path.is_file():
            path.unlink()
    fs = open_store(tmp_path, "filesystem", home=tmp_path / "home")
    export_run(pgs, run_id, fs)
    assert snapshot(tmp_path, "filesystem", run_id) == original
    for store in (fs, sq, pgs):
        store.close()


def test_export_refuses_to_overwrite_and_names_the_run(tmp_path: Path) -> None:
    run_id = populate(tmp_path)
    first = subprocess.run([PROSE, "export", run_id, "--to", "sqlite", "--project",
                            str(tmp_path)], capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    assert f"exported 2 run(s) from filesystem to sqlite: {run_id}" in first.stdout
    again = subprocess.run([PROSE, "export", run_id, "--from", "filesystem", "--to", "sqlite",
                            "--project", str(tmp_path)], capture_output=True, text=True,
                           check=False)
    assert again.returncode == 1
    assert f"run {run_id} already exists in the sqlite store" in again.stderr


@pytest.mark.parametrize("bad", ["../etc", "20260101-000000-abcdef/../../x", "nope"])
def test_export_rejects_malformed_run_ids(tmp_path: Path, bad: str) -> None:
    result = subprocess.run([PROSE, "export", bad, "--to", "sqlite", "--project",
                             str(tmp_path)], capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "is not of the form YYYYMMDD-HHMMSS-xxxxxx" in result.stderr
    assert not (tmp_path / ".prose").exists()
