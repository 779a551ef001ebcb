"""Copy a run, with its import runs, from one backend to another, losslessly."""

from __future__ import annotations

from openprose.state.errors import StateError
from openprose.state.models import AgentRef, StateSnapshot
from openprose.state.store import StateStore


def export_run(source: StateStore, run_id: str, target: StateStore) -> list[str]:
    """Copy ``run_id`` (and its imports) into ``target``; returns the ids copied."""
    src, dst = source.backend, target.backend
    record = src.load_run(run_id)
    try:
        dst.load_run(run_id)
    except StateError:
        pass
    else:
        raise StateError(f"run {run_id} already exists in the {dst.name} store")
    dst.create_run(record)
    for entry in src.read_journal(run_id):  # before the bindings: a binding the VM rewrote
        dst.append_journal(run_id, entry, durable=False)  # after its result stays rewritten
    for binding in src.list_bindings(run_id):
        dst.put_binding(run_id, binding, durable=False)
    for frame in src.list_frames(run_id):
        dst.put_frame(run_id, frame)
    for grant in src.list_capabilities(run_id):
        dst.put_capability(run_id, grant)
    for registered in src.list_imports(run_id):
        dst.put_import(run_id, registered)
    for name in src.list_agents(run_id):
        agent = AgentRef(name, "execution")
        memory = src.read_memory(run_id, agent)
        if memory is not None:
            dst.write_memory(run_id, agent, memory)
        for _, text in src.list_segments(run_id, agent):
            dst.append_segment(run_id, agent, text)
    state = src.read_state(run_id)
    if state:
        dst.write_state(run_id, state, StateSnapshot())
    if record.status != "running":
        dst.update_run(run_id, status=record.status, error=record.error)
    copied = [run_id]
    for child in src.list_children(run_id):
        copied += export_run(source, child, target)
    return copied
