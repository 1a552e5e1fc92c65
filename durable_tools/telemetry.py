"""Spans and metrics of a conversation, named by the OpenTelemetry GenAI conventions.

Only the OpenTelemetry *API* is used here: with no SDK configured every call
is a no-op. `durable_tools.worker.telemetry.configure_telemetry` installs the
SDK (a replay-safe tracer provider, `temporalio.contrib.opentelemetry`) and
`DurableToolsPlugin` then propagates the trace context through Temporal
headers, so the spans below form one trace per conversation:

```
invoke_agent {agent}         workflow, one per model turn (its tool calls included)
├── chat {model}             model activity, one per model request (attempt)
└── execute_tool {tool}      tool activity, one per attempt
```

Approval waits are events on the `invoke_agent` span (`approval.requested`,
`approval.decided` with `durable_tools.approval.decided_by`, `approval.expired`,
`approval.cancelled`). Spans started in workflow code are replay-safe: their
ids come from the workflow's deterministic random and the SDK ends them only
outside replay, so a worker restart exports each span once. Metrics recorded
in workflow code are skipped while the workflow replays history.

An exception a span records (`exception.message`, `exception.stacktrace`)
and the status it sets (`Type: message`) are scrubbed by the worker's
redactor (`durable_tools.redact.worker_redactor`) here, as history is; the
worker's span processor (`durable_tools.worker.telemetry.RedactingSpanProcessor`)
scrubs every span again when it ends, those of other libraries included.

Everything here is importable inside the workflow sandbox (no I/O at import).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import traceback
from collections.abc import Generator
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from temporalio import workflow

from durable_tools.redact import worker_redactor

__all__ = [
    "ATTR_APPROVAL_DECIDED_BY",
    "ATTR_ATTEMPT",
    "ATTR_OUTCOME",
    "INSTRUMENTATION",
    "approval_event",
    "chat_span",
    "conversation_context",
    "finish_tool_span",
    "model_attributes",
    "record_approval_wait",
    "record_budget_exceeded",
    "record_cost",
    "record_failure",
    "record_model_duration",
    "record_model_failure",
    "record_policy_disagreement",
    "record_tool_call",
    "record_usage",
    "tool_span",
    "turn_span",
]

INSTRUMENTATION: Final[str] = "durable_tools"
"""The tracer's and meter's instrumentation scope name."""

ATTR_OUTCOME: Final[str] = "durable_tools.tool.outcome"
"""`ok` or the `Failure` kind of a tool call (or attempt: `attempt_failed`)."""

ATTR_ATTEMPT: Final[str] = "durable_tools.tool.attempt"
"""The activity attempt (1 on the first run, 2 on the first retry...)."""

ATTR_APPROVAL_DECIDED_BY: Final[str] = "durable_tools.approval.decided_by"
"""Who decided an approval (`Decision.decided_by`)."""

_PROVIDERS: Final[frozenset[str]] = frozenset(
    {"openai", "openai-responses", "anthropic", "gemini", "scripted"}
)


@functools.cache
def _tracer() -> trace.Tracer:
    # Once: before a provider is set this is OpenTelemetry's proxy tracer, which
    # follows the provider set later (the global provider is set at most once).
    return trace.get_tracer(INSTRUMENTATION)


def _recording() -> bool:
    """Whether a tracer provider is set that may record (not OpenTelemetry's proxy or no-op).

    Without one, a span OpenTelemetry starts records nothing and has no
    parent to carry (Temporal's interceptor is on only with one, see
    `DurableToolsPlugin`'s `tracing`): the activities' spans are then not
    started at all, which spared each turn several context switches.
    """
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider | NoOpTracerProvider)


class _Instruments:
    """Metric instruments, made on first use from the global meter provider."""

    def __init__(self) -> None:
        meter = metrics.get_meter(INSTRUMENTATION)
        self.tool_calls = meter.create_counter(
            "durable_tools.tool.calls",
            unit="{call}",
            description="Tool calls answered, by tool and outcome kind (ok or the Failure kind).",
        )
        self.tool_duration = meter.create_histogram(
            "durable_tools.tool.duration",
            unit="s",
            description="Duration of one tool activity attempt.",
        )
        self.approval_wait = meter.create_histogram(
            "durable_tools.approval.wait",
            unit="s",
            description="Time a gated call waited for its decision (or deadline).",
        )
        self.model_failures = meter.create_counter(
            "durable_tools.model.failures",
            unit="{failure}",
            description="Model requests that raised, by model and error type.",
        )
        self.cost = meter.create_counter(
            "durable_tools.model.cost",
            unit="USD",
            description="Cost of model requests by the worker's price table, by model.",
        )
        self.policy_disagreements = meter.create_counter(
            "durable_tools.policy.disagreements",
            unit="{call}",
            description="Calls a candidate (shadow) policy would have decided otherwise "
            "than the active one, by tool and the two rules.",
        )
        self.budget_exceeded = meter.create_counter(
            "durable_tools.budget.exceeded",
            unit="{wait}",
            description="Model calls stopped by a budget (state budget_exceeded), by scope.",
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens per model request (gen_ai.token.type input or output).",
        )
        self.operation_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of one model request.",
        )


_instruments: _Instruments | None = None


def _metrics() -> _Instruments:
    global _instruments
    if _instruments is None:
        _instruments = _Instruments()
    return _instruments


def _replaying() -> bool:
    return workflow.in_workflow() and workflow.unsafe.is_replaying_history_events()


def model_attributes(model: str) -> dict[str, str]:
    """`gen_ai.provider.name` and `gen_ai.request.model` of a model spec or registered name.

    `"openai:gpt-4o"` gives provider `openai`, model `gpt-4o`; a name the
    worker registered (`"gpt"`) is the model, with no provider.
    """
    provider, sep, name = model.partition(":")
    if sep and provider in _PROVIDERS and name:
        return {"gen_ai.provider.name": provider, "gen_ai.request.model": name}
    return {"gen_ai.request.model": model}


# ----------------------------------------------------------------- workflow


@contextlib.contextmanager
def conversation_context() -> Generator[None]:
    """Make the conversation's trace current for the workflow run.

    A run started inside a span (a client with the tracing interceptor and a
    current span, or a previous run continuing as new) keeps that context.
    Otherwise the parent is a remote span context derived from the workflow
    id and the first run id, so every run of one conversation (continue-as-new
    included) shares one trace id and a new conversation reusing the workflow
    id gets another. Workflow code only.
    """
    if trace.get_current_span().get_span_context().is_valid:
        yield
        return
    info = workflow.info()
    seed = f"{info.workflow_id}\n{info.first_execution_run_id}".encode()
    digest = hashlib.sha256(seed).digest()
    parent = SpanContext(
        trace_id=int.from_bytes(digest[:16], "big") or 1,
        span_id=int.from_bytes(digest[16:24], "big") or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    with _attached(trace.set_span_in_context(NonRecordingSpan(parent))):
        yield


@contextlib.contextmanager
def _attached(context: otel_context.Context) -> Generator[None]:
    """Attach `context` for the block; detach only where the token is valid.

    A workflow coroutine abandoned by a dropped instance is finalized wherever
    garbage collection runs, in another `contextvars.Context`: detaching there
    would log "Failed to detach context" (as `temporalio.contrib.opentelemetry`
    handles it too).
    """
    token = otel_context.attach(context)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            token.var.reset(token)  # pyright: ignore[reportUnknownMemberType]


@contextlib.contextmanager
def turn_span(agent: str, model: str, turn: int) -> Generator[Span]:
    """The `invoke_agent {agent}` span of one turn (workflow code)."""
    info = workflow.info()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.conversation.id": info.workflow_id,
        "durable_tools.turn": turn,
        **model_attributes(model),
    }
    span = _tracer().start_span(
        f"invoke_agent {agent}", kind=SpanKind.INTERNAL, attributes=attributes
    )
    with _attached(trace.set_span_in_context(span)):
        try:
            yield span
        except GeneratorExit:
            raise  # abandoned by a dropped instance: the span did not end here
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError) and not _replaying():
                record_failure(span, exc)
            span.end()
            raise
        span.end()


def record_failure(span: Span, exc: BaseException) -> None:
    """Record `exc` on `span` and set its status to ERROR, both scrubbed of secrets.

    What `span.record_exception(exc)` and the SDK's `set_status_on_exception`
    write, with `exception.message`, `exception.stacktrace` and the status
    description (`Type: message`) passed through `worker_redactor().scrub`.

    Workflow code calls it only outside replay: a replayed span never ends
    (the replay-safe provider's rule), and an evicted run counts as replaying
    while its coroutines unwind, so recording there would only format a
    traceback. Formatting one reads every frame's source file into
    `linecache` for good; done during a burst of evictions, those lines sit
    among the burst's short-lived objects and keep their pages after it
    (docs/operations.md, "Memory after a burst").
    """
    redact = worker_redactor().scrub
    message = redact(str(exc))
    stacktrace = redact("".join(traceback.format_exception(exc)))
    span.record_exception(
        exc, attributes={"exception.message": message, "exception.stacktrace": stacktrace}
    )
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"))


@contextlib.contextmanager
def _recorded(span: Span) -> Generator[Span]:
    """Yield `span`; record what the block raised on it (scrubbed), as the SDK would."""
    try:
        yield span
    except GeneratorExit:
        raise
    except BaseException as exc:
        if not _replaying():
            record_failure(span, exc)
        raise


def approval_event(name: str, call_id: str, tool: str, **attributes: Any) -> None:
    """Add an `approval.*` event to the current span (the turn's), timed by the workflow clock."""
    event: dict[str, Any] = {"gen_ai.tool.call.id": call_id, "gen_ai.tool.name": tool}
    event.update({k: v for k, v in attributes.items() if v is not None})
    trace.get_current_span().add_event(name, event, timestamp=workflow.time_ns())


def record_tool_call(tool: str, outcome: str) -> None:
    """Count one answered tool call (workflow code; skipped during replay)."""
    if not _replaying():
        _metrics().tool_calls.add(1, {"gen_ai.tool.name": tool, ATTR_OUTCOME: outcome})


def record_approval_wait(tool: str, decision: str, seconds: float) -> None:
    """Record how long an approval waited (workflow code; skipped during replay)."""
    if not _replaying():
        _metrics().approval_wait.record(
            seconds, {"gen_ai.tool.name": tool, "durable_tools.approval.decision": decision}
        )


def record_budget_exceeded(scope: str, agent: str) -> None:
    """Count a model call a budget stopped (workflow code; skipped during replay)."""
    if not _replaying():
        _metrics().budget_exceeded.add(
            1, {"durable_tools.budget.scope": scope, "gen_ai.agent.name": agent}
        )


# --------------------------------------------------------------- activities


@contextlib.contextmanager
def chat_span(model: str, conversation_id: str) -> Generator[Span]:
    """The `chat {model}` span of one model request (model activity)."""
    if not _recording():
        yield INVALID_SPAN
        return
    attributes = model_attributes(model)
    span_name = f"chat {attributes['gen_ai.request.model']}"
    with (
        _tracer().start_as_current_span(
            span_name,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": conversation_id,
                **attributes,
            },
            # Recorded by `_recorded`, scrubbed: a provider's error names its key.
            record_exception=False,
            set_status_on_exception=False,
        ) as span,
        _recorded(span),
    ):
        yield span


def record_usage(span: Span, model: str, input_tokens: int, output_tokens: int) -> None:
    """Put a request's token counts on its `chat` span and the token histogram."""
    span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    base = {"gen_ai.operation.name": "chat", **model_attributes(model)}
    _metrics().tokens.record(input_tokens, {**base, "gen_ai.token.type": "input"})
    _metrics().tokens.record(output_tokens, {**base, "gen_ai.token.type": "output"})


def record_model_duration(model: str, seconds: float, error: str | None) -> None:
    """Record the duration of one model request (`gen_ai.client.operation.duration`)."""
    attributes: dict[str, str] = {"gen_ai.operation.name": "chat", **model_attributes(model)}
    if error is not None:
        attributes["error.type"] = error
    _metrics().operation_duration.record(seconds, attributes)


def record_cost(model: str, usd: float) -> None:
    """Add a model request's cost (USD, by the price table) to `durable_tools.model.cost`."""
    _metrics().cost.add(usd, model_attributes(model))


def record_policy_disagreement(tool: str, active: str, candidate: str) -> None:
    """Count a call the candidate policy would have decided otherwise (shadow mode).

    Args:
        tool: The tool's name.
        active: `policy/rule` of the active verdict (`(tool)`: none decided).
        candidate: `policy/rule` of the candidate's verdict.
    """
    _metrics().policy_disagreements.add(
        1,
        {
            "gen_ai.tool.name": tool,
            "durable_tools.policy.rule": active,
            "durable_tools.policy.candidate_rule": candidate,
        },
    )


def record_model_failure(model: str, error: str) -> None:
    """Count a model request that raised."""
    _metrics().model_failures.add(1, {**model_attributes(model), "error.type": error})


@contextlib.contextmanager
def tool_span(tool: str, call_id: str, attempt: int, conversation_id: str) -> Generator[Span]:
    """The `execute_tool {tool}` span of one tool activity attempt."""
    if not _recording():
        yield INVALID_SPAN
        return
    with (
        _tracer().start_as_current_span(
            f"execute_tool {tool}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
                "gen_ai.conversation.id": conversation_id,
                ATTR_ATTEMPT: attempt,
            },
            # The outcome is set explicitly below; a raised error is an attempt
            # failure, recorded by `_recorded`, scrubbed.
            record_exception=False,
            set_status_on_exception=False,
        ) as span,
        _recorded(span),
    ):
        yield span


def finish_tool_span(
    span: Span, tool: str, outcome: str, seconds: float, error: str | None = None
) -> None:
    """Set a tool attempt's outcome on its span and record its duration."""
    span.set_attribute(ATTR_OUTCOME, outcome)
    if error is not None:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    _metrics().tool_duration.record(seconds, {"gen_ai.tool.name": tool, ATTR_OUTCOME: outcome})
