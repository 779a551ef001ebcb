"""Filesystem backend: the ``.prose/`` layout of the filesystem state contract.

Durability: each run keeps ``journal.jsonl``, an append-only record that is fsync'd for every
durable step (a finished session's result carries its value). Binding files, ``state.md`` and
the other files are written atomically (temp file + rename) without their own fsync; after a
crash, :meth:`repair` rewrites any binding file the journal knows better.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import json
import os
import shutil
import stat
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from openprose.state.backends.base import (
    Backend,
    CommitStep,
    entry_to_json,
    grant_to_json,
    segment_name,
)
from openprose.state.driver import DriverHolder, RunLocked
from openprose.state.errors import (
    DamagedState,
    PathEscapeError,
    RunNotFound,
    StateError,
)
from openprose.state.files import (
    atomic_write,
    disk_errors,
    fsync_dir,
    open_nofollow,
    process_alive,
    read_bytes,
    read_exact,
    sweep_temps,
)
from openprose.state.models import (
    AgentRef,
    Binding,
    BindingRef,
    Frame,
    ImportRecord,
    JournalEntry,
    StateSnapshot,
    utc_now,
)
from openprose.state.names import check_name, contained_path
from openprose.state.records import (
    RunRecord,
    block_from_data,
    damaged_record,
    entry_from_data,
    frame_from_data,
    grant_from_data,
    joined_grant,
    parse_json,
    run_from_data,
    split_grants,
)

SEPARATOR = "\n```\n\n---\n\n"
# A journal line noting that a binding file was rewritten outside a session's result (by the
# VM, or by a session before it finished): repair leaves such a file alone.
WRITE_NOTE = '{"kind":"write",'
LOGS = ("journal.jsonl", "frames.jsonl", "capabilities.jsonl")
#: An ended run's digest (state.view.digest), in its directory on every backend.
DIGEST = "digest.json"
LOCKS = "locks"  # .prose/locks/{run id}.lock: flock'd by the run's driver, who it is as JSON
# A run directory is built under .creating/ beside its final place, then renamed into place.
CREATING = ".creating"
#: The temp files of a run's bindings, state.md and digest are made here, outside runs/, and
#: renamed into place: a watcher of runs/ (the MCP server's) then wakes once per file written,
#: not four times (temp created, closed, moved out, moved in).
WRITING = ".writing"
_STAGING_NUMBERS = itertools.count()  # staged run directories: {id}.{pid}-{number}


class AppendLog:
    """An append-only file of JSON lines with group commit: a durable append returns once an
    fsync that covers it has finished, and one fsync covers every line written before it."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        self.path = path
        with disk_errors(path):
            self._fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            if created:
                fsync_dir(path.parent)
        self._write_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._written = 0
        self._synced = 0
        self._torn = False  # a failed write may have left part of a line

    def append(self, line: str, *, durable: bool) -> bool:
        """Append ``line``; False (nothing written) once the log was closed (the backend
        released the run meanwhile: the caller opens it again)."""
        with self._write_lock, disk_errors(self.path):
            if self._fd < 0:
                return False
            data = memoryview((("\n" if self._torn else "") + line + "\n").encode("utf-8"))
            self._torn = True
            while data:
                data = data[os.write(self._fd, data):]
            self._torn = False
            self._written += 1
            mine = self._written
        if not durable:
            return True
        with self._sync_lock, disk_errors(self.path):
            if self._synced >= mine:
                return True
            covered = self._written
            if self._fd >= 0:
                os.fsync(self._fd)
            else:  # closed since the write: the file's data is synced through another fd
                fd = open_nofollow(self.path, os.O_WRONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._synced = covered
        return True

    def close(self) -> None:
        with self._write_lock, self._sync_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _owned(key: str, run_id: str) -> bool:
    """Whether a cache key (``RUN`` or ``RUN/...``) belongs to ``run_id`` or its imports."""
    return key == run_id or key.startswith(f"{run_id}/")


def format_binding(binding: Binding) -> str:
    scope = f"execution_id: {binding.execution_id}\n" if binding.execution_id else ""
    return (f"# {binding.name}\n\nkind: {binding.kind}\n{scope}\nsource:\n```prose\n"
            f"{binding.source.rstrip()}{SEPARATOR}{binding.value}")


def parse_binding(text: str, location: str) -> Binding:
    head, separator, value = text.partition(SEPARATOR)
    lines = head.split("\n")
    if not separator or not lines[0].startswith("# "):
        raise DamagedState(f"{location}: not a binding file (no '# name' heading and value "
                           "separator)")
    name = lines[0].removeprefix("# ").strip()
    kind, execution_id, source_at = "let", None, len(lines)
    for i, line in enumerate(lines[1:], start=1):
        if line.startswith("kind: "):
            kind = line[6:].strip()
        elif line.startswith("execution_id: "):
            execution_id = int(line[14:]) if line[14:].strip().isdigit() else None
        elif line.startswith("```prose"):
            source_at = i + 1
            break
    return Binding(name, execution_id, kind, "\n".join(lines[source_at:]), value, location)


class FilesystemBackend(Backend):
    name = "filesystem"
    writes_wait = False

    def __init__(self, project_root: Path, home: Path) -> None:
        self.root = project_root
        self.home = home
        self.prose = project_root / ".prose"
        self.runs = self.prose / "runs"
        self._lock = threading.Lock()
        self._logs: dict[str, AppendLog] = {}
        self._segment_next: dict[Path, int] = {}
        self._binding_dirs: dict[str, str] = {}
        self._capability_offsets: dict[str, tuple[int, int]] = {}
        self._capability_lock = threading.Lock()
        self._capabilities: dict[str, tuple[str, dict[str, Any]]] = {}
        #: Per run, the permissions blocks its capabilities.jsonl holds (key -> block).
        self._blocks: dict[str, dict[str, dict[str, Any]]] = {}
        self._contained_dirs: set[Path] = set()

    # ------------------------------------------------------------------ paths
    def run_dir(self, run_id: str) -> Path:
        return self.runs / run_id

    def contained(self, directory: Path) -> Path:
        """``directory``, once it is known that following its links keeps it inside the
        project's or the user's ``.prose`` (a cloned repository can carry links that lead
        elsewhere: nothing is read or written through them)."""
        if directory in self._contained_dirs:
            return directory
        resolved = directory.resolve()
        roots = (self.prose.resolve(), (self.home / ".prose").resolve())
        if not any(resolved.is_relative_to(root) for root in roots):
            raise PathEscapeError(f"{self._relative(directory)} is a link to {resolved}, "
                                  f"outside {roots[0]}: state is never read or written "
                                  "through a link that leaves .prose")
        self._contained_dirs.add(directory)
        return directory

    def _run_file(self, run_id: str, name: str) -> Path:
        return self.contained(self.run_dir(run_id)) / name

    @property
    def writing(self) -> Path:
        """Where run files' temp files are made (see :data:`WRITING`)."""
        return self.contained(self.prose / WRITING)

    def binding_dir(self, run_id: str) -> Path:
        return self.contained(self.run_dir(run_id) / "bindings")

    def run_location(self, run_id: str) -> str:
        return str(self.run_dir(run_id))

    def _relative(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def binding_path(self, run_id: str, ref: BindingRef) -> Path:
        return self.binding_dir(run_id) / ref.file_name

    def binding_location(self, run_id: str, ref: BindingRef) -> str:
        directory = self._binding_dirs.get(run_id)
        if directory is None:
            directory = self._binding_dirs[run_id] = self._relative(
                self.run_dir(run_id) / "bindings")
        return f"{directory}/{ref.file_name}"

    def agent_dir(self, run_id: str, agent: AgentRef) -> Path:
        check_name(agent.name, "agent name")
        if agent.scope == "execution":
            return self.contained(self.run_dir(run_id.split("/imports/")[0]) / "agents" /
                                  agent.name)
        if agent.scope == "project":
            return self.contained(self.prose / "agents" / agent.name)
        if agent.scope == "user":
            return self.contained(self.home / ".prose" / "agents" / agent.name)
        return contained_path(agent.path or "", [self.root, self.home / ".prose"], self.root,
                              home=self.home)

    def memory_location(self, run_id: str, agent: AgentRef) -> str:
        return self._relative(self.agent_dir(run_id, agent) / "memory.md")

    def segment_location(self, run_id: str, agent: AgentRef, number: int) -> str:
        return self._relative(self.agent_dir(run_id, agent) / segment_name(agent.name, number))

    # ------------------------------------------------------------------ runs
    def create_run(self, record: RunRecord) -> None:
        def build(directory: Path) -> None:
            for inner in ("bindings", "agents", "imports"):  # made now, not when first used:
                (directory / inner).mkdir()  # an agent's or import's directory is one mkdir
            atomic_write(directory / "program.prose", record.program_source)
            atomic_write(directory / "run.json", json.dumps(asdict(record), indent=2),
                         durable=True)

        self.build_run_dir(record.id, build, "run.json")

    def build_run_dir(self, run_id: str, build: Callable[[Path], None], marker: str) -> None:
        """Create the run's directory whole or not at all: ``build`` fills a directory under
        ``.prose/.creating/`` that is then renamed into place (what a killed creation left
        there is removed by the next one). When the directory exists already (the same run on
        another backend), the new entries move in one by one, ``marker`` — the file that makes
        it a run of this backend — last.

        The staging directory is outside ``runs/``: a recursive watcher of ``runs/`` (the MCP
        server's) then sees each run arrive as one directory renamed in, not directories
        created inside one another faster than it can add its watches (watchdog registered
        such a directory twice, warning each time)."""
        final = self.run_dir(run_id)
        staging = self.prose / CREATING
        if staging.is_dir():
            _sweep_abandoned(staging)
        temp = staging / f"{final.name}.{os.getpid()}-{next(_STAGING_NUMBERS)}"
        temp.mkdir(parents=True)
        final.parent.mkdir(parents=True, exist_ok=True)  # runs/, or a run's imports/
        try:
            build(temp)
            fsync_dir(temp)
            if not final.exists():
                try:
                    os.rename(temp, final)
                except OSError:
                    if not final.exists():
                        raise
                else:
                    fsync_dir(final.parent)
                    return
            for entry in temp.iterdir():
                if entry.name != marker and not (final / entry.name).exists():
                    os.rename(entry, final / entry.name)
            if (final / marker).exists():
                raise StateError(f"run {run_id} already exists at {final}")
            os.rename(temp / marker, final / marker)
            fsync_dir(final)
        finally:
            shutil.rmtree(temp, ignore_errors=True)
            with contextlib.suppress(OSError):  # only when no other creation is under way
                staging.rmdir()

    def lock_driver(self, run_id: str, holder: DriverHolder) -> Callable[[], None]:
        """``flock`` on ``.prose/locks/{run id}.lock`` (beside the runs, not in one: a run's
        own files are the same whoever drove it): the kernel drops it when the process
        ends, however it ends. The holder's record is written into the file once the lock
        is held; a refused driver reads it from there.

        Taking the lock and writing the record, like finding the lock taken and reading the
        record, happen under a second ``flock``, on the locks directory (held for those few
        system calls): a refused driver never reads a record half written, nor the one a
        previous holder left."""
        directory = self.prose / LOCKS
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{run_id}.lock"
        gate = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            return self._lock_under_gate(run_id, path, holder)
        except OSError as err:
            raise StateError(f"cannot lock {path}: {err.strerror}") from err
        finally:
            os.close(gate)  # lets the next driver in

    @staticmethod
    def _lock_under_gate(run_id: str, path: Path, holder: DriverHolder) -> Callable[[], None]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            os.close(fd)
            raise RunLocked(run_id, DriverHolder.from_json(text)) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.to_json().encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return lambda: os.close(fd)

    def load_run(self, run_id: str) -> RunRecord:
        path = self._run_file(run_id, "run.json")
        try:
            data = read_bytes(path)
        except FileNotFoundError:
            raise RunNotFound(f"no run {run_id} under {self.runs}") from None
        where = self._relative(path)
        return RunRecord(**run_from_data(parse_json(data, where, "run record"), where))

    def list_runs(self) -> list[RunRecord]:
        if not self.runs.is_dir():
            return []
        found = []
        for path in sorted(self.runs.glob("*/run.json")):
            try:
                found.append(self.load_run(path.parent.name))
            except (DamagedState, PathEscapeError) as err:  # listed with its problem: one
                found.append(damaged_record(path.parent.name, err))  # never hides the rest
        return found

    def rebuild_run(self, run_id: str, damage: DamagedState) -> RunRecord:
        """A damaged ``run.json`` rebuilt from the run's ``program.prose`` (status
        interrupted, the damage as its error); the damaged file is kept beside it."""
        try:
            source = read_exact(self._run_file(run_id, "program.prose"))
        except (OSError, StateError):
            raise damage from None
        record = RunRecord(run_id, None, source, "interrupted", utc_now(), utc_now(), "",
                           f"run.json was rebuilt from program.prose: {damage}")
        path = self._run_file(run_id, "run.json")
        set_aside(path)
        atomic_write(path, json.dumps(asdict(record), indent=2), durable=True)
        return record

    def delete_run(self, run_id: str, *, keep_shared: bool = False) -> None:
        directory = self.run_dir(run_id)
        if not (directory / "run.json").is_file():
            raise RunNotFound(f"no run {run_id} under {self.runs}")
        self.forget(run_id)
        if keep_shared or (directory / "state.db").exists():
            # run.json first: the run leaves listings with that one unlink.
            self.remove_parts(run_id, ["run.json", *LOGS, "imports.json", "state.md",
                                       "bindings", "agents"])
        else:
            self.remove_run_dir(run_id)

    def release(self, run_id: str) -> None:
        with self._lock:
            for key in [k for k in self._logs if _owned(k, run_id)]:
                self._logs.pop(key).close()

    def forget(self, run_id: str) -> None:
        """Drop what this backend caches about a run that is being removed."""
        owned = functools.partial(_owned, run_id=run_id)
        self.release(run_id)
        with self._lock:
            for key in [k for k in self._binding_dirs if owned(k)]:
                del self._binding_dirs[key]
        with self._capability_lock:
            for key in [k for k in self._capability_offsets if owned(k)]:
                del self._capability_offsets[key]
            for key in [k for k, (owner, _) in self._capabilities.items() if owned(owner)]:
                del self._capabilities[key]
            for key in [k for k in self._blocks if owned(k)]:
                del self._blocks[key]

    def remove_parts(self, run_id: str, names: list[str]) -> None:
        """Remove these files or folders of a run's directory, in order."""
        directory = self.run_dir(run_id)
        if directory.is_symlink():
            raise PathEscapeError(f"{directory} is a symbolic link; not removing it")
        for name in names:
            path = directory / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def remove_run_dir(self, run_id: str) -> None:
        """Move the run's directory out of ``runs/`` in one rename (listings stop showing it
        at once), then delete it with its driver lock file. A delete cut short leaves only
        ``.prose/.trash/``, which the next delete empties."""
        directory = self.run_dir(run_id)
        if directory.is_symlink():
            raise PathEscapeError(f"{directory} is a symbolic link; not removing it")
        trash = self.prose / ".trash"
        trash.mkdir(exist_ok=True)
        target = trash / f"{run_id}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(directory, target)
        # The driver lock's file goes too (its holder, the remover, keeps its descriptor).
        (self.prose / LOCKS / f"{run_id}.lock").unlink(missing_ok=True)
        for leftover in trash.iterdir():
            shutil.rmtree(leftover, ignore_errors=leftover != target)

    def list_children(self, run_id: str) -> list[str]:
        imports = self.run_dir(run_id) / "imports"
        if not imports.is_dir():
            return []
        return [f"{run_id}/imports/{p.parent.name}" for p in sorted(imports.glob("*/run.json"))]

    def list_agents(self, run_id: str) -> list[str]:
        agents = self.run_dir(run_id) / "agents"
        return sorted(p.name for p in agents.iterdir() if p.is_dir()) if agents.is_dir() else []

    def update_run(self, run_id: str, *, status: str, error: str | None) -> None:
        record = self.load_run(run_id)
        data = asdict(record) | {"status": status, "error": error, "updated": utc_now()}
        atomic_write(self._run_file(run_id, "run.json"), json.dumps(data, indent=2),
                     durable=True)

    def sweep_temps(self, run_id: str) -> None:
        """Remove the temp files a killed write left in the run's directory and in
        :data:`WRITING` (see :func:`openprose.state.files.sweep_temps`)."""
        for directory in (self.run_dir(run_id), self.prose / WRITING):
            if directory.is_dir() and not directory.is_symlink():
                sweep_temps(self.contained(directory))

    def repair(self, run_id: str) -> None:
        """After a crash: end torn log lines, sweep orphaned temp files, and make every
        binding file agree with the last journal record about it. A file last written by a
        session's result is rewritten from the result if it is missing, torn or different; a
        file rewritten since (a write note) is kept unless it is missing or torn."""
        self._end_torn_lines(run_id)
        self.sweep_temps(run_id)
        state = self._run_file(run_id, "state.md")
        if state.is_dir():  # derived: rewritten at the next update
            set_aside(state)
        results: dict[BindingRef, JournalEntry] = {}
        rewritten: set[BindingRef] = set()
        for entry in self.read_journal(run_id, notes=True):
            if entry.kind == "write" and entry.binding is not None:
                rewritten.add(entry.binding)
                continue
            if entry.kind == "result" and entry.binding is not None and entry.value is not None:
                results[entry.binding] = entry
                rewritten.discard(entry.binding)
        for ref, entry in results.items():
            current = self._intact_binding(run_id, ref)
            value = str(entry.value)
            if current is not None and (ref in rewritten or current.value == value):
                continue
            kind = entry.meta.get("kind") or (current.kind if current else "let")
            source = entry.meta.get("source", current.source if current else "")
            path = self.binding_path(run_id, ref)
            if path.is_dir() and not path.is_symlink():
                set_aside(path)
            atomic_write(path,
                         format_binding(Binding(ref.name, ref.execution_id, kind, source, value)))

    def _intact_binding(self, run_id: str, ref: BindingRef) -> Binding | None:
        """The binding file if it is there and whole (it reads back to exactly its text)."""
        try:
            text = read_exact(self.binding_path(run_id, ref))
            binding = parse_binding(text, "")
        except (FileNotFoundError, DamagedState):
            return None
        if (binding.name, binding.execution_id) != (ref.name, ref.execution_id) or \
                format_binding(binding) != text:
            return None
        return binding

    def _end_torn_lines(self, run_id: str) -> None:
        """A crash can cut a log's last line short; end it, so the next record appended
        starts on a line of its own (the torn fragment is then skipped as non-JSON)."""
        for file in LOGS:
            path = self._run_file(run_id, file)
            try:
                fd = open_nofollow(path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                continue
            try:
                size = os.fstat(fd).st_size
                if stat.S_ISREG(os.fstat(fd).st_mode) and size and \
                        os.pread(fd, 1, size - 1) != b"\n":
                    os.write(fd, b"\n")
            finally:
                os.close(fd)

    # ------------------------------------------------------------------ imports
    def put_import(self, run_id: str, record: ImportRecord) -> None:
        """The run's import registry, ``imports.json``: one entry per alias."""
        with self._lock:  # read, change, write: one writer at a time
            registry = {r.alias: r for r in self.list_imports(run_id)}
            registry[record.alias] = record
            atomic_write(self.run_dir(run_id) / "imports.json",
                         json.dumps([asdict(r) for r in registry.values()], indent=2))

    def list_imports(self, run_id: str) -> list[ImportRecord]:
        path = self._run_file(run_id, "imports.json")
        try:
            raw = parse_json(read_bytes(path), self._relative(path), "import registry")
            return [ImportRecord(**{**r, "outputs": tuple(r["outputs"])}) for r in raw]
        except FileNotFoundError:
            return []
        except (TypeError, KeyError):
            raise DamagedState(f"{self._relative(path)}: not an import registry") from None

    # ------------------------------------------------------------------ bindings
    def put_binding(self, run_id: str, binding: Binding, *, durable: bool) -> None:
        atomic_write(self.binding_path(run_id, binding.ref), format_binding(binding),
                     durable=durable, staging=self.writing)
        ref = json.dumps([binding.name, binding.execution_id])
        self._append(run_id, "journal.jsonl", f'{WRITE_NOTE}"binding":{ref}}}', durable=False)

    def get_binding(self, run_id: str, ref: BindingRef) -> Binding | None:
        path = self.binding_path(run_id, ref)
        try:
            text = read_exact(path)
        except FileNotFoundError:
            return None
        return parse_binding(text, self._relative(path))

    def list_bindings(self, run_id: str) -> list[Binding]:
        directory = self.binding_dir(run_id)
        if not directory.is_dir():
            return []
        return [parse_binding(read_exact(p), self._relative(p))
                for p in sorted(directory.glob("*.md"))]

    # ------------------------------------------------------------------ journal
    def _append(self, run_id: str, file: str, line: str, *, durable: bool) -> None:
        key = f"{run_id}/{file}"
        while True:  # again when the run was released between lookup and append
            log = self._logs.get(key)
            if log is None:
                with self._lock:
                    log = self._logs.get(key)
                    if log is None:
                        log = self._logs[key] = AppendLog(self._run_file(run_id, file))
            if log.append(line, durable=durable):
                return

    def append_journal(self, run_id: str, entry: JournalEntry, *, durable: bool) -> None:
        self._append(run_id, "journal.jsonl", entry_to_json(entry), durable=durable)

    def start_sessions(self, run_id: str, intents: list[JournalEntry],
                       grants: list[dict[str, Any]]) -> None:
        """One append to the journal and one to capabilities.jsonl for the lot."""
        if intents:
            self._append(run_id, "journal.jsonl", "\n".join(map(entry_to_json, intents)),
                         durable=False)
        self._put_capabilities(run_id, grants)

    def commit(self, run_id: str, steps: list[CommitStep]) -> None:
        """Binding files first, then the result records with one fsync for the batch (the
        records carry the values, so :meth:`repair` can redo a binding file)."""
        lines = []
        for step in steps:
            if not step.stored:  # the result record below stands for this write
                atomic_write(self.binding_path(run_id, step.binding.ref),
                             format_binding(step.binding), staging=self.writing)
            meta = {**step.entry.meta, "kind": step.binding.kind, "source": step.binding.source}
            lines.append(entry_to_json(JournalEntry(**{**_fields(step.entry), "meta": meta})))
        self._append(run_id, "journal.jsonl", "\n".join(lines), durable=True)
        self._put_capabilities(run_id, [step.ended_grant for step in steps])

    def read_journal(self, run_id: str, *, notes: bool = False) -> list[JournalEntry]:
        """The journal's records (``notes``: with the write notes, as kind "write")."""
        entries = []
        for where, data in self._records(run_id, "journal.jsonl"):
            if isinstance(data, dict) and data.get("kind") == "write" and "key" not in data:
                if notes:
                    entries.append(entry_from_data({**data, "key": ""}, where))
                continue
            entries.append(entry_from_data(data, where))
        return entries

    def _records(self, run_id: str, file: str) -> list[tuple[str, Any]]:
        """The JSON values of a log's lines, each with its ``file:line`` for errors. A line
        that is not JSON is a torn one a crash left (ended by :meth:`repair`) and skipped;
        one that is JSON but not UTF-8 was damaged otherwise."""
        path = self._run_file(run_id, file)
        try:
            data = read_bytes(path)
        except FileNotFoundError:
            return []
        where = self._relative(path)
        records = []
        for number, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            value = _json_line(line, f"{where}:{number}")
            if value is not _TORN:
                records.append((f"{where}:{number}", value))
        return records

    # ------------------------------------------------------------------ frames, capabilities
    def put_frame(self, run_id: str, frame: Frame) -> None:
        self._append(run_id, "frames.jsonl", json.dumps(asdict(frame)), durable=False)

    def list_frames(self, run_id: str) -> list[Frame]:
        frames: dict[int, Frame] = {}
        for where, data in self._records(run_id, "frames.jsonl"):
            frame = frame_from_data(data, where)
            frames[frame.execution_id] = frame
        return list(frames.values())

    def put_capability(self, run_id: str, grant: dict[str, Any]) -> None:
        self._put_capabilities(run_id, [grant])

    def _put_capabilities(self, run_id: str, grants: list[dict[str, Any]]) -> None:
        """Cache the grants and append them to capabilities.jsonl in one write, each
        permissions block the file lacks on a line before the first grant naming it. The
        end of a grant the file holds is the line ``{"hash": ..., "alive": false}``."""
        if not grants:
            return
        ending = [self._ends(run_id, grant) for grant in grants]
        ends = [json.dumps({"hash": grant["hash"], "alive": False}, separators=(",", ":"))
                for grant, end in zip(grants, ending, strict=True) if end]
        full = [grant for grant, end in zip(grants, ending, strict=True) if not end]
        for grant in grants:
            self._capabilities[grant["hash"]] = (run_id, grant)
        known = self._blocks.setdefault(run_id, {})
        stored, new = split_grants(full, known)
        lines = [*(json.dumps({"key": key, "permissions": block}, separators=(",", ":"))
                   for key, block in new.items()), *map(grant_to_json, stored), *ends]
        self._append(run_id, "capabilities.jsonl", "\n".join(lines), durable=False)
        known.update(new)  # only once written: a grant never names a block not yet there

    def _ends(self, run_id: str, grant: dict[str, Any]) -> bool:
        """Whether ``grant`` only ends one this backend wrote or read for ``run_id``."""
        found = self._capabilities.get(grant["hash"])
        return not grant["alive"] and found is not None and found[0] == run_id and \
            {**found[1], "alive": False} == grant

    def find_capability(self, token_hash: str, run_id: str | None = None
                        ) -> tuple[str, dict[str, Any]] | None:
        """The grant as stored now: another process may have ended it since it was read."""
        found = self._capabilities.get(token_hash)
        if found is not None or run_id is not None:
            self._read_capabilities(found[0] if found is not None else run_id or "")
        elif self.runs.is_dir():
            for path in self.runs.rglob("capabilities.jsonl"):
                self._read_capabilities(str(path.parent.relative_to(self.runs)))
        return self._capabilities.get(token_hash)

    def _read_capabilities(self, run_id: str) -> None:
        """Fold the whole lines appended to the run's capabilities.jsonl since the last read
        into the cache (the file only grows; the last line about a token wins)."""
        path = self._run_file(run_id, "capabilities.jsonl")
        where = self._relative(path)
        with self._capability_lock:
            offset, number = self._capability_offsets.get(run_id, (0, 0))
            try:
                fd = open_nofollow(path, os.O_RDONLY)
            except FileNotFoundError:
                return
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise DamagedState(f"{where} is not a regular file")
            with open(fd, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
            whole = data.rfind(b"\n") + 1
            blocks = self._blocks.setdefault(run_id, {})
            for line in data[:whole].split(b"\n")[:-1]:
                number += 1
                record = _json_line(line, f"{where}:{number}")
                if record is _TORN:  # blank, or a torn line that repair has ended
                    continue
                if isinstance(record, dict) and "hash" not in record:
                    key, block = block_from_data(record, f"{where}:{number}")
                    blocks[key] = block
                    continue
                if isinstance(record, dict) and record.keys() == {"hash", "alive"} and \
                        record["alive"] is False:
                    found = self._capabilities.get(record["hash"])
                    if found is None or found[0] != run_id:
                        raise DamagedState(f"{where}:{number}: ends a session grant recorded "
                                           "nowhere before it")
                    self._capabilities[record["hash"]] = (run_id, {**found[1], "alive": False})
                    continue
                grant = joined_grant(grant_from_data(record, f"{where}:{number}"), blocks,
                                     f"{where}:{number}")
                self._capabilities[grant["hash"]] = (run_id, grant)
            self._capability_offsets[run_id] = (offset + whole, number)

    def list_capabilities(self, run_id: str) -> list[dict[str, Any]]:
        self._read_capabilities(run_id)
        return [grant for owner, grant in list(self._capabilities.values()) if owner == run_id]

    # ------------------------------------------------------------------ agents
    def read_memory(self, run_id: str, agent: AgentRef) -> str | None:
        try:
            return read_exact(self.agent_dir(run_id, agent) / "memory.md")
        except FileNotFoundError:
            return None

    def write_memory(self, run_id: str, agent: AgentRef, text: str) -> None:
        atomic_write(self.agent_dir(run_id, agent) / "memory.md", text, durable=True)

    def append_segment(self, run_id: str, agent: AgentRef, text: str) -> int:
        """Write the agent's next segment. Numbers are claimed with an exclusive link, so two
        writers (threads or processes) never take the same number or overwrite a segment."""
        directory = self.agent_dir(run_id, agent)
        directory.mkdir(parents=True, exist_ok=True)
        temp = directory / f".segment.{uuid.uuid4().hex[:8]}.tmp"
        with disk_errors(temp), open(temp, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            with self._lock:
                number = self.next_segment(run_id, agent)
                while True:
                    try:
                        os.link(temp, directory / segment_name(agent.name, number))
                        break
                    except FileExistsError:
                        number += 1
                self._segment_next[directory] = number + 1
        finally:
            temp.unlink()
        fsync_dir(directory)
        return number

    def next_segment(self, run_id: str, agent: AgentRef) -> int:
        directory = self.agent_dir(run_id, agent)
        cached = self._segment_next.get(directory)
        if cached is not None:
            return cached
        return max(self._segment_numbers(directory, agent.name), default=0) + 1

    @staticmethod
    def _segment_numbers(directory: Path, name: str) -> list[int]:
        if not directory.is_dir():
            return []
        prefix, found = f"{name}-", []
        for entry in os.scandir(directory):
            stem = entry.name.removesuffix(".md")
            if entry.name.endswith(".md") and stem.startswith(prefix):
                number = stem[len(prefix):]
                if number.isdigit():
                    found.append(int(number))
        return found

    def list_segments(self, run_id: str, agent: AgentRef) -> list[tuple[int, str]]:
        directory = self.agent_dir(run_id, agent)
        return sorted((number, read_exact(directory / segment_name(agent.name, number)))
                      for number in self._segment_numbers(directory, agent.name))

    # ------------------------------------------------------------------ state.md
    def write_state(self, run_id: str, text: str, snapshot: StateSnapshot) -> None:
        atomic_write(self._run_file(run_id, "state.md"), text, staging=self.writing)

    def read_state(self, run_id: str) -> str:
        try:
            return read_exact(self._run_file(run_id, "state.md"))
        except FileNotFoundError:
            return ""

    def write_digest(self, run_id: str, text: str) -> None:
        atomic_write(self._run_file(run_id, DIGEST), text, staging=self.writing)

    def read_digest(self, run_id: str, start: int = 0, end: int | None = None
                    ) -> bytes | None:
        try:
            return read_bytes(self._run_file(run_id, DIGEST), start, end)
        except FileNotFoundError:
            return None

    def close(self) -> None:
        with self._lock:
            for log in self._logs.values():
                log.close()
            self._logs.clear()


def set_aside(path: Path) -> Path:
    """Move a damaged file or directory out of the way, to ``{name}.damaged`` (numbered if
    that is taken), so it is kept for inspection but no longer read."""
    number = 1
    while True:
        target = path.with_name(f"{path.name}.damaged" + (f"-{number}" if number > 1 else ""))
        if not target.exists() and not target.is_symlink():
            os.rename(path, target)
            return target
        number += 1


def _sweep_abandoned(staging: Path) -> None:
    """Remove run directories whose creating process is gone (named ``{id}.{pid}-{n}``)."""
    for entry in staging.iterdir():
        pid = entry.name.rpartition(".")[2].partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _fields(entry: JournalEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in entry.__dataclass_fields__}


_TORN = object()


def _json_line(line: bytes, where: str) -> Any:
    """A log line's JSON value; ``_TORN`` for a blank line or one that is not JSON (a crash
    cut it short). JSON that is not UTF-8 did not come from a crash: DamagedState."""
    if not line.strip():
        return _TORN
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        try:
            json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            return _TORN
        raise DamagedState(f"{where}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except ValueError:
        return _TORN
