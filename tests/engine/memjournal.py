"""An in-memory Journal for interpreter unit tests (no state layer involved)."""

from __future__ import annotations

from dataclasses import dataclass, field

from openprose.engine.journal import Recorded, SessionSpec
from openprose.engine.provider import Usage


@dataclass
class MemIO:
    journal: MemJournal
    spec: SessionSpec
    written: str | None = None

    def read_context(self, name: str) -> str:
        return str(self.journal.bindings[(name, None)][0])

    def write_output(self, text: str) -> None:
        self.written = text

    def output_location(self) -> str:
        return self.journal.location(self.spec.binding or "anonymous", self.spec.execution_id)

    def read_memory(self) -> str | None:
        return self.journal.memory.get(self.spec.agent or "")

    def write_memory(self, text: str) -> None:
        self.journal.memory[self.spec.agent or ""] = text


@dataclass
class MemSession:
    journal: MemJournal
    spec: SessionSpec
    io: MemIO

    def binding_location(self, name: str, execution_id: int | None) -> str:
        return self.journal.location(name, execution_id)

    def finish(self, output: str | None, usage: Usage) -> str:
        text = output if output is not None else self.io.written or ""
        if self.spec.binding:
            self.journal.bindings[(self.spec.binding, self.spec.execution_id)] = (text, self.spec.kind)
        self.journal.results[self.spec.key] = Recorded(self.spec.input_hash, text)
        return text

    async def finish_batched(self, output: str | None, usage: Usage) -> str:
        return self.finish(output, usage)

    def abort(self, error: str) -> None:
        self.journal.aborted.append((self.spec.key, error))


@dataclass
class MemJournal:
    writes_wait = False
    bindings: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    tools: list = field(default_factory=list)
    verdicts: dict = field(default_factory=dict)
    decisions: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    aborted: list = field(default_factory=list)
    frames: list = field(default_factory=list)
    next_id: int = 1

    def session_result(self, key):
        return self.results.get(key)

    def open_session(self, spec):
        return MemSession(self, spec, MemIO(self, spec))

    def verdict(self, key):
        return self.verdicts.get(key)

    def decision(self, key, branches):
        return self.decisions.get(key)

    def record_decision(self, key, decision):
        self.decisions[key] = decision

    def record_verdict(self, key, input_hash, value, reason, source, line):
        self.verdicts[key] = Recorded(input_hash, value, reason)

    def bind(self, name, value, kind, execution_id, source):
        self.bindings[(name, execution_id)] = (value, kind)

    def reuse(self, name, value, kind, execution_id, source):
        self.bindings[(name, execution_id)] = (value, kind)

    def location(self, name, execution_id):
        return f"mem:{name}" + (f"__{execution_id}" if execution_id else "")

    def has_memory(self, agent, persist):
        return agent in self.memory

    def push_frame(self, block, args, parent, max_depth, key):
        eid = self.next_id
        self.next_id += 1
        depth = 1 + next((d for e, _, d in self.frames if e == parent), 0)
        self.frames.append((eid, block, depth))
        return eid

    def pop_frame(self, execution_id):
        pass

    def note(self, key, status, source, line):
        self.notes.append((key, status))

    def record_tool(self, key, call):
        self.tools.append((key, call))

    def child(self, handle, program_text):
        return self

    async def open_session_batched(self, spec):
        return self.open_session(spec)

    def record_imports(self, imports):
        self.imports = dict(imports)

    def finish(self, status, error):
        self.status = (status, error)
