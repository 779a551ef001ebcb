"""Stored records read back with their shape checked: a journal record, a frame, a session
grant or a run record that is not what this program writes is a :class:`DamagedState`
naming where it was found, never a ``TypeError`` or ``KeyError`` from deep inside."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from openprose.state.errors import DamagedState
from openprose.state.models import BindingRef, Frame, JournalEntry, Usage

_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
_NUMBER = (int, float)
ENTRY_FIELDS: dict[str, tuple[type, ...]] = {
    "key": (str,), "kind": (str,), "input_hash": (str,), "status": (str,),
    "value": (object,), "reason": (str,), "error": _OPT_STR, "meta": (dict,),
    "binding": (list,), "usage": (dict,),
}
FRAME_FIELDS: dict[str, tuple[type, ...]] = {
    "execution_id": (int,), "block": (str,), "depth": (int,), "parent": _OPT_INT,
    "args": (dict,), "status": (str,), "key": _OPT_STR,
}
GRANT_FIELDS: dict[str, tuple[type, ...]] = {
    "hash": (str,), "name": (str,), "execution_id": _OPT_INT, "kind": (str,),
    "source": (str,), "alive": (bool,), "context": (list,), "agent": (list, type(None)),
}
RUN_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,), "program_path": _OPT_STR, "program_source": (str,), "status": (str,),
    "started": (str,), "updated": (str,), "vm_token_hash": (str,), "error": _OPT_STR,
}
#: "queued": waiting in the worker queue for a driver (PostgreSQL, ``prose run --detach``).
RUN_STATUSES = ("queued", "running", "completed", "failed", "interrupted")


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: str
    program_path: str | None
    program_source: str
    status: str
    started: str
    updated: str
    vm_token_hash: str
    error: str | None = None


def parse_json(text: str | bytes, where: str, what: str) -> Any:
    try:
        return json.loads(text)
    except UnicodeDecodeError:
        raise DamagedState(f"{where}: {what} is not UTF-8 text") from None
    except ValueError as err:
        raise DamagedState(f"{where}: {what} is not JSON ({err})") from None


def checked(data: Any, fields: dict[str, tuple[type, ...]], required: tuple[str, ...],
            where: str, what: str, allowed: set[str] | None = None) -> dict[str, Any]:
    """``data`` as a dict with the ``required`` fields and the known ones of the right
    types, else :class:`DamagedState`. Other fields are refused unless in ``allowed``
    (``None``: any other field is let through, for records that grow)."""
    if not isinstance(data, dict):
        raise DamagedState(f"{where}: not a {what} (a JSON {type(data).__name__}, "
                           "expected an object)")
    for name in required:
        if name not in data:
            raise DamagedState(f"{where}: not a {what} (no '{name}')")
    for name, value in data.items():
        types = fields.get(name)
        if types is None:
            if allowed is not None and name not in allowed:
                raise DamagedState(f"{where}: not a {what} (unknown field '{name}')")
            continue
        if object not in types and (not isinstance(value, types) or
                                    (isinstance(value, bool) and bool not in types)):
            raise DamagedState(f"{where}: not a {what} ('{name}' is "
                               f"{json.dumps(value)[:40]})")
    return data


def _ref(value: Any, where: str, what: str) -> BindingRef:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], _OPT_INT) and not isinstance(value[1], bool)):
        raise DamagedState(f"{where}: not a {what} (binding {json.dumps(value)[:40]})")
    return BindingRef(value[0], value[1])


def entry_from_data(data: Any, where: str) -> JournalEntry:
    fields = dict(checked(data, ENTRY_FIELDS, ("key", "kind"), where, "journal record",
                          set(ENTRY_FIELDS)))
    binding = fields.pop("binding", None)
    usage = fields.pop("usage", {})
    if not all(k in ("input_tokens", "output_tokens", "cost_usd", "sessions") and
               isinstance(v, _NUMBER) for k, v in usage.items()):
        raise DamagedState(f"{where}: not a journal record (usage {json.dumps(usage)[:40]})")
    return JournalEntry(binding=None if binding is None else _ref(binding, where,
                                                                   "journal record"),
                        usage=Usage(**usage), **fields)


def frame_from_data(data: Any, where: str) -> Frame:
    return Frame(**checked(data, FRAME_FIELDS, ("execution_id", "block", "depth"), where,
                           "frame record", set(FRAME_FIELDS)))


def grant_from_data(data: Any, where: str) -> dict[str, Any]:
    grant = checked(data, GRANT_FIELDS, ("hash", "name", "execution_id", "kind", "source",
                                         "alive", "context"), where, "session grant")
    for item in grant["context"]:
        _ref(item, where, "session grant")
    agent = grant.get("agent")
    if agent is not None and not (len(agent) == 3 and all(isinstance(a, _OPT_STR)
                                                          for a in agent)):
        raise DamagedState(f"{where}: not a session grant (agent {json.dumps(agent)[:40]})")
    return grant


def permissions_key(block: dict[str, Any]) -> str:
    """The key a grant names its permissions block by: a digest of the block's content, so
    any process writing the run's grants arrives at the same key without asking another."""
    text = json.dumps(block, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def split_grant(grant: dict[str, Any]) -> tuple[dict[str, Any], str | None,
                                                dict[str, Any] | None]:
    """A grant as stored: its permissions block (the ``work`` field's, which every session
    of an agent shares) replaced by the block's key. Returns the stored grant, the key and
    the block (both ``None`` when the grant carries no block)."""
    work = grant.get("work")
    block = work.get("permissions") if isinstance(work, dict) else None
    if not isinstance(block, dict):
        return grant, None, None
    key = permissions_key(block)
    return {**grant, "work": {**work, "permissions": key}}, key, block


def split_grants(grants: list[dict[str, Any]], known: Mapping[str, dict[str, Any]]
                 ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """``grants`` as stored (see :func:`split_grant`), and the blocks they name that are not
    ``known`` to be stored already (key -> block): to be stored with them, first."""
    stored, new = [], {}
    for grant in grants:
        compact, key, block = split_grant(grant)
        stored.append(compact)
        if key is not None and block is not None and key not in known:
            new[key] = block
    return stored, new


def block_from_data(data: Any, where: str) -> tuple[str, dict[str, Any]]:
    """A stored permissions block (``{"key": ..., "permissions": {...}}``), checked against
    its key: a block whose content is not what its key says is damage, never used."""
    block = data.get("permissions") if isinstance(data, dict) else None
    key = data.get("key") if isinstance(data, dict) else None
    if not isinstance(block, dict) or not isinstance(key, str) or set(data) != {"key",
                                                                               "permissions"}:
        raise DamagedState(f"{where}: not a permissions block ({json.dumps(data)[:40]})")
    if permissions_key(block) != key:
        raise DamagedState(f"{where}: permissions block {key} does not match its content")
    return key, block


def block_key(grant: dict[str, Any]) -> str | None:
    """The key of the permissions block a stored grant names (``None``: it names none, or
    carries the whole block, as grants written before blocks were kept apart do)."""
    work = grant.get("work")
    key = work.get("permissions") if isinstance(work, dict) else None
    return key if isinstance(key, str) else None


def joined_grant(grant: dict[str, Any], blocks: Mapping[str, dict[str, Any]],
                 where: str) -> dict[str, Any]:
    """A stored grant with its permissions block back in place of the key."""
    key = block_key(grant)
    if key is None:
        return grant
    block = blocks.get(key)
    if block is None:
        raise DamagedState(f"{where}: session grant names permissions block {key}, "
                           "which is recorded nowhere")
    return {**grant, "work": {**grant["work"], "permissions": block}}


def run_from_data(data: Any, where: str) -> dict[str, Any]:
    """The fields of a :class:`RunRecord` (whichever it has now) from ``run.json``."""
    every = fields(RunRecord)
    required = tuple(f.name for f in every
                     if f.default is MISSING and f.default_factory is MISSING)
    record = checked(data, RUN_FIELDS, required, where, "run record",
                     {f.name for f in every})
    if record["status"] not in RUN_STATUSES:
        raise DamagedState(f"{where}: not a run record (status {record['status']!r})")
    return record


def damaged_record(run_id: str, damage: Exception) -> RunRecord:
    """How a run whose record cannot be read is listed: status "damaged", the reason."""
    return RunRecord(run_id, None, "", "damaged", "", "", "", str(damage))
