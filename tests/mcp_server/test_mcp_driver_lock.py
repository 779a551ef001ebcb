"""One driver per run: a run a host drives through VM tokens holds the run-driver lock from
start_run/resume_run until complete_run or the server's last connection ends; resume_run of a
run another driver holds is refused, naming the holder, and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.mcp_server.host import ERAS, host
from tests.mcp_server.test_rules import fingerprint

from openprose.state import RunLocked, open_store

pytestmark = pytest.mark.anyio

PROGRAM = """\
input topic: "What to look into"
output result = session "Look into {topic}"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "look.prose").write_text(PROGRAM)
    return project


def is_locked(root: Path, run_id: str, backend: str = "filesystem") -> bool:
    with open_store(root, backend, home=root / "home") as store:
        try:
            lock = store.driver_lock(run_id)
        except RunLocked:
            return True
        lock.release()
        return False


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])
async def test_start_run_holds_the_lock_until_complete_run(root: Path, backend: str) -> None:
    async with host(root, {"mode": "legacy"}, watch=False) as h:
        run = await h.call("start_run", program="look.prose", inputs={"topic": "moss"},
                           backend=backend)
        assert is_locked(root, run["run_id"], backend)
        spawned = await h.call("spawn_session", vm_token=run["vm_token"], statement="1",
                               prompt="Look into moss")
        await h.call("write_binding", token=spawned["session_token"], value="green")
        await h.call("complete_run", vm_token=run["vm_token"])
        assert not is_locked(root, run["run_id"], backend)


@pytest.mark.parametrize("era", ERAS)
async def test_resume_run_is_refused_while_another_driver_holds_the_run(
        root: Path, era: dict) -> None:
    async with host(root, era, watch=False) as h:
        run = await h.call("start_run", program="look.prose", inputs={"topic": "moss"})
    run_id = run["run_id"]
    assert not is_locked(root, run_id)  # the server's last connection released it

    with open_store(root, home=root / "home") as store, store.driver_lock(run_id) as other:
        before = fingerprint(root, run_id)
        async with host(root, era, watch=False) as h:
            text = await h.refused("resume_run", run_id=run_id)
            assert "rule: one driver per run" in text
            assert f"pid {other.holder.pid}" in text and other.holder.host in text
            # the old VM token, presented to a new server, meets the same lock
            refused = await h.refused("run_status", vm_token=run["vm_token"])
            assert "rule: one driver per run" in refused
        assert fingerprint(root, run_id) == before

    async with host(root, era, watch=False) as h:
        resumed = await h.call("resume_run", run_id=run_id)
        assert is_locked(root, run_id)
        await h.refused("run_status", vm_token=run["vm_token"])  # replaced
        await h.call("run_status", vm_token=resumed["vm_token"])
    assert not is_locked(root, run_id)


async def test_a_refused_resume_leaves_no_lock_behind(root: Path) -> None:
    async with host(root, {"mode": "legacy"}, watch=False) as h:
        run = await h.call("start_run", program="look.prose", inputs={"topic": "moss"})
    async with host(root, {"mode": "legacy"}, watch=False) as h:
        text = await h.refused("resume_run", run_id=run["run_id"], inputs={"nope": "x"})
        assert "unknown input(s) nope" in text
        assert not is_locked(root, run["run_id"])
