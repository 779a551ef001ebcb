"""What the tools return: small pydantic models (their JSON schema is each tool's
outputSchema). No result carries a binding's value, except ``read_binding``'s.

Each tool answers with the model as structured content and a compact text rendering of it
for the model reading the conversation (:func:`reply`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from openprose.language import Diagnostic
from openprose.language.analysis import Analysis, Statement
from openprose.state import BindingRef, Run


class OutlineItem(BaseModel):
    id: str
    kind: str
    line: int
    end_line: int
    binds: str | None = None
    agent: str | None = None
    block: str | None = None
    parent: str | None = None
    judged: bool = False
    options: list[str] = []

    @classmethod
    def of(cls, statement: Statement) -> OutlineItem:
        return cls(id=statement.id, kind=statement.kind, line=statement.line,
                   end_line=statement.end_line, binds=statement.binds, agent=statement.agent,
                   block=statement.block, parent=statement.parent, judged=statement.judged,
                   options=list(statement.options))

    def text(self) -> str:
        parts = [self.id, self.kind, f"L{self.line}" + (f"-{self.end_line}"
                                                        if self.end_line != self.line else "")]
        if self.binds and self.kind not in ("block", "agent"):
            parts.append(f"binds {self.binds}")
        elif self.binds:
            parts.append(self.binds)
        if self.agent:
            parts.append(f"agent {self.agent}")
        if self.block:
            parts.append(f"in block {self.block}")
        if self.judged:
            parts.append("judged")
        if self.options:
            parts.append("options " + " | ".join(self.options))
        return " ".join(parts)


class BlockInfo(BaseModel):
    name: str
    params: list[str]
    max_depth: int


class StartResult(BaseModel):
    """A started run. The outline and blocks are for a host that steps the run (embodied):
    a guided host never reads them, so they are left out there; an outline entry leaves out
    its empty fields (see :func:`reply`'s ``exclude_defaults``)."""

    run_id: str
    vm_token: str
    mode: str
    backend: str
    location: str
    missing_inputs: list[str] = []
    outputs: list[str] = []
    blocks: list[BlockInfo] = []
    outline: list[OutlineItem] = []


def outline_items(outline: Analysis) -> list[OutlineItem]:
    return [OutlineItem.of(s) for s in outline.statements.values()]


def block_infos(outline: Analysis) -> list[BlockInfo]:
    return [BlockInfo(name=b.name, params=list(b.params), max_depth=b.max_depth)
            for b in outline.blocks.values()]


class SpawnResult(BaseModel):
    """The grant: a short handle the VM passes to a session subagent, which reads its brief
    with ``get_brief`` (the agent's role and the task never pass through the VM's context).
    The execution id is left out at the top level (see :func:`reply`)."""

    session_token: str
    binding: str
    execution_id: int | None = None
    agent: str | None = None
    model: str | None = None
    start: str


class BriefContext(BaseModel):
    """A binding a session may read: never its value."""

    name: str
    kind: str | None = None
    chars: int


class BriefResult(BaseModel):
    """What ``get_brief`` gives a session subagent: everything it needs to do its task."""

    token: str
    binding: str
    agent: str | None = None
    model: str | None = None
    role: str | None = None
    task: str
    context: list[BriefContext] | None = None
    read: str | None = None
    memory: str | None = None
    skills: list[str] | None = None
    permissions: dict[str, Any] | None = None
    attempt: int
    failed_before: list[str] | None = None
    finish: str


class WriteResult(BaseModel):
    binding: str
    location: str
    execution_id: int | None = None
    bytes: int
    summary: str | None = None


class ReadResult(BaseModel):
    name: str
    execution_id: int | None = None
    kind: str
    value: str
    offset: int
    total_chars: int
    next_offset: int | None = None


class StateResult(BaseModel):
    statement: str
    status: str
    line: int
    execution_id: int | None = None


class FrameResult(BaseModel):
    execution_id: int
    block: str
    depth: int
    max_depth: int
    status: str


class VerdictResult(BaseModel):
    statement: str
    execution_id: int | None
    iteration: int
    value: bool | str
    reason: str
    recorded: bool


class MemoryResult(BaseModel):
    agent: str
    location: str
    memory: str | None = None
    bytes: int


class OutputRef(BaseModel):
    name: str
    location: str


def compile_errors(errors: list[Diagnostic]) -> str:
    """Why a tool refuses a program, each error as ``prose compile`` shows it (no excerpt; an
    inline program is ``<program>``)."""
    return "the program does not compile:\n" + "\n".join(
        replace(d, file=d.file or "<program>").format() for d in errors)


def run_outputs(run: Run, analysis: Analysis) -> list[OutputRef]:
    """A run's outputs as every mode reports them: the program's outputs (the analysis says
    which) that the run wrote."""
    return [OutputRef(name=name, location=run.binding_location(BindingRef(name)))
            for name in analysis.outputs if run.resolve(name) is not None]


class CompleteResult(BaseModel):
    run_id: str
    status: str
    outputs: list[OutputRef]


class FrameInfo(BaseModel):
    execution_id: int
    block: str
    depth: int
    parent: int | None


class PendingInfo(BaseModel):
    statement: str
    binding: str
    execution_id: int | None


class BindingEntry(BaseModel):
    name: str
    execution_id: int | None
    kind: str


class StatusEntry(BaseModel):
    statement: str
    line: int
    status: str
    iteration: int | None = None
    note: str | None = None


class VerdictInfo(BaseModel):
    key: str
    value: Any
    reason: str


class CheckerFailure(BaseModel):
    """The followed program of an embodied run failed: the run stays running (resumable)
    until the host completes it with 'failed' or resumes it."""

    error: str
    statement: str | None
    line: int | None
    text: str


class StatusResult(BaseModel):
    run_id: str
    mode: str
    status: str
    backend: str
    position: list[StatusEntry]
    frames: list[FrameInfo]
    pending: list[PendingInfo]
    bindings: list[BindingEntry]
    verdicts: list[VerdictInfo]
    checker_failed: CheckerFailure | None = None


class ResumeResult(BaseModel):
    run_id: str
    vm_token: str
    mode: str
    status: str
    outline: list[OutlineItem] = []  # for a host that steps the run, as in StartResult


def reply(result: BaseModel, text: str | None = None, *, exclude_none: bool = False,
          exclude_defaults: bool = False) -> CallToolResult:
    """The tool's answer: ``result`` as structured content (without its None fields when
    ``exclude_none``, without every field left at its default — None, false, empty — when
    ``exclude_defaults``), ``text`` (default: its fields as ``name: value`` lines) for the
    model."""
    data = result.model_dump(mode="json", exclude_none=exclude_none,
                             exclude_defaults=exclude_defaults)
    if text is None:
        text = "\n".join(f"{key}: {value}" for key, value in data.items() if value is not None)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=data)
