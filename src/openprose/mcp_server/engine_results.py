"""Results of the engine-run tools (guided and delegated runs): small pydantic models, sent
as structured content without empty fields, plus a compact text for the model."""

from __future__ import annotations

from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from openprose.mcp_server.engine_runs import RunProgress
from openprose.mcp_server.results import OutputRef


class ContextRef(BaseModel):
    """A binding a judgment may weigh: its size and a preview; read_binding with the
    judgment's token gives the whole value."""

    name: str
    kind: str | None = None
    chars: int
    preview: str | None = None


class PendingItem(BaseModel):
    """A session (a handle: ``start`` says what to do with it) or a judgment waiting for
    the host."""

    kind: str
    token: str
    binding: str | None = None
    agent: str | None = None
    model: str | None = None
    attempt: int | None = None
    start: str | None = None
    condition: str | None = None
    options: list[str] | None = None
    context: list[ContextRef] | None = None
    program: str | None = None
    round: int | None = None

    def text(self) -> str:
        if self.kind == "session":
            agent = f", agent {self.agent}" if self.agent else ""
            model = f", model {self.model}" if self.model else ""
            attempt = f", attempt {self.attempt}" if self.attempt else ""
            return (f"## session -> {self.binding}{agent}{model}{attempt}: token {self.token}\n"
                    f"{self.start}")
        lines = [f"## judgment {self.token}: {self.condition}"]
        if self.options:
            lines.append("options: " + " | ".join(self.options))
        else:
            lines.append("answer: true or false")
        if self.program:
            lines.append(f"in the program ('>' marks the line):\n{self.program}")
        if self.context:
            lines.append("in scope:")
        for item in self.context or ():
            kind = f"{item.kind}, " if item.kind else ""
            preview = f": {item.preview}" if item.preview else ""
            lines.append(f"- {item.name} ({kind}{item.chars} chars){preview}")
        lines.append(f"{self.start}")
        return "\n".join(lines)


class ProgressInfo(BaseModel):
    line: int
    statement: str
    sessions_done: int
    sessions_in_flight: int
    sessions_reused: int
    verdicts: int

    @classmethod
    def of(cls, progress: RunProgress) -> ProgressInfo:
        return cls(line=progress.line, statement=progress.statement,
                   sessions_done=progress.done, sessions_in_flight=progress.in_flight,
                   sessions_reused=progress.reused, verdicts=progress.verdicts)


class NextStep(BaseModel):
    run_id: str
    status: str
    pending: list[PendingItem] = []
    outputs: list[OutputRef] | None = None
    error: str | None = None
    missing_inputs: list[str] | None = None


class VerdictAck(BaseModel):
    token: str
    value: bool | str
    recorded: bool


class FailAck(BaseModel):
    token: str
    next: str


class RunReport(BaseModel):
    """A run the engine drives (or drove): where it is and what it cost."""

    run_id: str
    mode: str
    status: str
    backend: str
    provider: str | None = None
    progress: ProgressInfo | None = None
    outputs: list[OutputRef] | None = None
    sessions: int | None = None
    reused: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    error: str | None = None
    missing_inputs: list[dict[str, str]] | None = None
    hint: str | None = None


class CancelResult(BaseModel):
    run_id: str
    status: str


class RunEntry(BaseModel):
    run_id: str
    status: str
    program: str | None = None
    backend: str
    started: str | None = None


class RunList(BaseModel):
    runs: list[RunEntry]


class DiagnosticInfo(BaseModel):
    file: str | None
    code: str
    severity: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str


class CompileReport(BaseModel):
    ok: bool
    diagnostics: list[DiagnosticInfo]


def compact(result: BaseModel, text: str) -> CallToolResult:
    """``result`` as structured content (empty fields left out) and ``text`` for the model."""
    data: dict[str, Any] = result.model_dump(mode="json", exclude_none=True)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=data)
