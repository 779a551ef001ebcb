"""OpenTelemetry traces of runs, built from the engine's event stream.

Off unless asked for (``prose run --trace``, or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` in the environment), and free when off: nothing of
OpenTelemetry is imported until :func:`start` is called. A run is one trace: a span for the
run, one per statement (nested as the statements are; parallel branches are siblings because
each branch's task inherits the context of the statement that forked it), one per session and
one per judgment, the last two with the GenAI semantic conventions. Retries and cancellations
are span events; a failure sets the span's status to ERROR with an ``exception`` event.
Prompts and outputs go into spans only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
=true``; nothing read from ``.prose/.env`` or a key ever does (spans carry what the program
and the model wrote, and the run's own names).

The run's span context is recorded in the run (journal key :data:`TRACE_KEY`), so the trace of
a resumed run links to the one it continues.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from openprose.engine.events import Event

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span

#: The GenAI conventions' opt-in for prompt and completion text in spans.
CAPTURE_SETTING = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Journal key of the run's last trace context (``run:`` keys are not program steps).
TRACE_KEY = "run:trace"
#: How long the end of a run waits for its spans to be exported.
FLUSH_MILLIS = 10_000

#: Statements that only declare (their node classes): they get no span.
_DECLARATIONS = frozenset({"AgentDef", "BlockDef", "Use", "ImportSkill"})

_lock = threading.Lock()
_provider: TracerProvider | None = None


def _tracer_provider() -> TracerProvider:
    """This process's provider, exporting over OTLP/HTTP in batches (the exporter reads the
    standard ``OTEL_EXPORTER_OTLP_*`` settings; without an endpoint, localhost:4318)."""
    global _provider
    with _lock:
        if _provider is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            named = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "openprose"}
            _provider = TracerProvider(resource=Resource.create(named))
            _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return _provider


def start(run_id: str, program: str, provider_name: str, default_model: str | None,
          previous: Mapping[str, Any] | None, mode: str = "run") -> RunTrace:
    """Begin the trace of one drive of run ``run_id`` (``previous``: the trace context an
    earlier drive recorded, which this trace links to)."""
    return RunTrace(_tracer_provider(), run_id, program, provider_name, default_model,
                    previous, mode)


class _Step:
    """A statement's place in the context: its key, its span (shared by a statement and the
    expression statement inside it that has the same key) and the token to leave it by."""

    __slots__ = ("key", "nested", "span", "token")

    def __init__(self, key: str, span: Span, nested: bool) -> None:
        self.key, self.span, self.nested = key, span, nested
        self.token: object = None


class RunTrace:
    """An engine listener turning a run's events into spans (see the module docstring)."""

    def __init__(self, provider: TracerProvider, run_id: str, program: str,
                 provider_name: str, default_model: str | None,
                 previous: Mapping[str, Any] | None, mode: str) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Link, SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._context, self._trace = context, trace
        self._propagator = TraceContextTextMapPropagator()
        self._provider = provider
        self.tracer = provider.get_tracer("openprose")
        self.provider_name = provider_name
        self.default_model = default_model
        self.capture = os.environ.get(CAPTURE_SETTING, "").strip().lower() == "true"
        self._step_key = context.create_key("openprose.step")
        self.open: dict[tuple[str, str], Span] = {}
        links = []
        if previous:
            linked = trace.get_current_span(self._propagator.extract(dict(previous)))
            if linked.get_span_context().is_valid:
                links.append(Link(linked.get_span_context(), {"openprose.link": "resumes"}))
        self.run_span = self.tracer.start_span(
            f"prose {mode} {program}", kind=SpanKind.INTERNAL, links=links, attributes={
                "openprose.run.id": run_id, "openprose.program": program,
                "openprose.mode": mode, "openprose.resumed": previous is not None})
        self._token: object = None

    def carrier(self) -> dict[str, str]:
        """The run span's context as W3C ``traceparent`` (what a resume links to)."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, self._trace.set_span_in_context(self.run_span))
        return carrier

    @contextmanager
    def active(self) -> Iterator[None]:
        """The run span is the current span while the program runs (tasks the interpreter
        starts inherit it)."""
        token = self._context.attach(self._trace.set_span_in_context(self.run_span))
        try:
            yield
        finally:
            self._context.detach(token)

    # ------------------------------------------------------------------ events
    def __call__(self, event: Event) -> None:
        handler = getattr(self, f"_on_{event.kind}", None)
        if handler is not None:
            handler(event)

    def _on_statement(self, event: Event) -> None:
        current = self._context.get_value(self._step_key)
        if isinstance(current, _Step) and current.key == event.key:
            step = _Step(event.key, current.span, nested=True)
        elif event.text in _DECLARATIONS:  # nothing runs: no span of its own
            step = _Step(event.key, self._trace.get_current_span(), nested=True)
        else:
            span = self.tracer.start_span(
                f"{event.text.lower()} line {event.line}", attributes={
                    "openprose.key": event.key, "openprose.statement": event.text,
                    "code.line.number": event.line})
            step = _Step(event.key, span, nested=False)
        ctx = self._context.set_value(self._step_key, step,
                                      self._trace.set_span_in_context(step.span))
        step.token = self._context.attach(ctx)

    def _on_statement_end(self, event: Event) -> None:
        step = self._context.get_value(self._step_key)
        if not isinstance(step, _Step) or step.key != event.key:
            return
        self._context.detach(step.token)  # type: ignore[arg-type]
        if not step.nested:
            if event.text:
                self._stop(step.span, event.text, "ProgramError")
            else:
                step.span.end()

    def _genai(self, event: Event, operation: str) -> Span:
        model = event.model or self.default_model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation, "gen_ai.provider.name": self.provider_name,
            "openprose.key": event.key, "code.line.number": event.line}
        if model:
            attributes["gen_ai.request.model"] = model
        name = f"{operation} {model}" if model else operation
        span = self.tracer.start_span(name, attributes=attributes)
        self.open[(operation, event.key)] = span
        return span

    def _end_genai(self, event: Event, operation: str) -> Span | None:
        span = self.open.pop((operation, event.key), None)
        if span is not None and event.usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", event.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", event.usage.output_tokens)
        return span

    def _on_session_start(self, event: Event) -> None:
        span = self._genai(event, "invoke_agent")
        if self.capture:
            span.set_attribute("gen_ai.input.messages", _messages("user", event.content))

    def _on_session_retry(self, event: Event) -> None:
        span = self.open.get(("invoke_agent", event.key))
        if span is not None:
            span.add_event("retry", {"openprose.attempt": int(event.text.split()[-1]),
                                     "error.message": event.content})

    def _on_session_end(self, event: Event) -> None:
        span = self._end_genai(event, "invoke_agent")
        if span is not None:
            if self.capture:
                span.set_attribute("gen_ai.output.messages",
                                   _messages("assistant", event.content))
            span.end()

    def _on_session_failed(self, event: Event) -> None:
        self._stop(self._end_genai(event, "invoke_agent"), event.text)

    def _on_judging(self, event: Event) -> None:
        span = self._genai(event, "chat")
        if self.capture:
            span.set_attribute("gen_ai.input.messages", _messages("user", event.text))

    def _on_verdict(self, event: Event) -> None:
        span = self._end_genai(event, "chat")
        if span is not None:
            if self.capture:
                span.set_attribute("gen_ai.output.messages", _messages("assistant", event.text))
            span.end()

    def _on_verdict_failed(self, event: Event) -> None:
        self._stop(self._end_genai(event, "chat"), event.text)

    def _on_session_reused(self, event: Event) -> None:
        self._trace.get_current_span().add_event("reused", {"openprose.key": event.key})

    _on_verdict_reused = _on_session_reused

    def _on_cancelled(self, event: Event) -> None:
        self._trace.get_current_span().add_event("cancelled", {"openprose.key": event.key})

    @staticmethod
    def _stop(span: Span | None, why: str, kind: str = "ProviderError") -> None:
        if span is None:
            return
        if why == "cancelled":
            span.add_event("cancelled")
        else:
            _failed(span, kind, why)
        span.end()

    # ------------------------------------------------------------------ the end
    def end(self, status: str, error: str | None, sessions: int = 0, tokens: int = 0) -> None:
        """End the run's span (and any span a cancellation left open)."""
        for span in self.open.values():
            span.add_event("cancelled")
            span.end()
        self.open.clear()
        self.run_span.set_attributes({"openprose.run.status": status,
                                      "openprose.run.sessions": sessions,
                                      "openprose.run.tokens": tokens})
        if error and status != "completed":
            _failed(self.run_span, "RunFailed", error)
        self.run_span.end()

    def flush(self) -> bool:
        """Export every ended span now (blocking; run it off the event loop)."""
        return self._provider.force_flush(FLUSH_MILLIS)


def _failed(span: Span, kind: str, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, message))
    span.add_event("exception", {"exception.type": kind, "exception.message": message})


def _messages(role: str, text: str) -> str:
    """One message in the GenAI conventions' JSON form."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}],
                      ensure_ascii=False)
