"""The model activity and the tool activity of the durable loop.

* `model.turn` reads the transcript through a query to the workflow (so the
  transcript is never recorded as activity input: history grows linearly),
  only the items this worker has not read yet (`transcript_cache.py`),
  calls the model adapter, makes its output safe to record
  (`model_output.py`), and plans the turn's calls (`planning.py`). It
  heartbeats while it runs, so a worker lost during a slow provider request
  is noticed after the heartbeat timeout, not the model timeout; whatever it
  raises is bounded to one line (`bounded_failure`), its full text logged.
* `tool.<name>` (one dynamic activity) runs one tool call. Its activity type
  names the tool, so `temporal workflow show` reads like the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic_core import to_json
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from durable_tools import telemetry
from durable_tools.activities.activity_events import ActivityEvents
from durable_tools.activities.model_output import safe_turn
from durable_tools.activities.planning import plan_calls
from durable_tools.activities.transcript_cache import TranscriptCache
from durable_tools.agents import Agent, ResolvedAgent, check_agents, is_offline_model, resolve_agent
from durable_tools.conversation import (
    ModelRequest,
    ModelTurn,
    ModelTurnRequest,
    ToolActivityInput,
    ToolActivityResult,
    TranscriptPage,
    TranscriptSlice,
)
from durable_tools.descriptor import descriptors_digest
from durable_tools.errors import ConfigurationError
from durable_tools.events import (
    MAX_EVENT_TEXT,
    PROGRESS_INTERVAL,
    STARTED_DELAY,
    TEXT_DELTA_INTERVAL,
)
from durable_tools.executor import encode_result, prepare_call
from durable_tools.models.base import Model
from durable_tools.models.errors import bounded_failure
from durable_tools.models.registry import resolve_model
from durable_tools.models.streaming import text_sink
from durable_tools.redact import Redactor
from durable_tools.results import Failure, Ok, ToolCall, failed
from durable_tools.signals import finish_tool
from durable_tools.toolkit import Toolkit, compose
from durable_tools.tools import ToolContext, ToolFailure
from durable_tools.transcript import AssistantMessage, TranscriptItem
from durable_tools.transcript_digest import CheckedTranscript

if TYPE_CHECKING:  # the mcp SDK is imported only by workers that use it
    from durable_tools.mcp.toolset import McpToolsets

__all__ = ["MODEL_TURN_ACTIVITY", "TOOL_ACTIVITY_PREFIX", "AgentActivities"]

MODEL_TURN_ACTIVITY: Final[str] = "model.turn"
"""Activity type of the model request."""

TOOL_ACTIVITY_PREFIX: Final[str] = "tool."
"""Tool activities are named `tool.<tool name>`."""

TRANSCRIPT_QUERY: Final[str] = "transcript_slice"

# What `transcript_slice` answers: a page with digests, or a list from older workflow code.
_TRANSCRIPT_ANSWER: Any = TranscriptPage | list[TranscriptItem]

# Temporal rejects payloads over 2 MiB; stay well below for the whole turn.
_MAX_TURN_ARGUMENT_BYTES: Final[int] = 1_500_000


class AgentActivities:
    """Activities bound to the toolkits and model adapters of one worker.

    Args:
        toolkits: Toolkits by the name conversations refer to.
        models: Model adapters by name.
        mcp: The worker's MCP servers (started by the worker's run context);
            their tools join every toolkit.
        agents: The agents the worker declares (see `durable_tools.agents`);
            each model turn resolves the conversation's `AgentConfig`
            against them. Empty (default): development mode, any
            configuration runs as sent.
        allow_offline_models: Whether a conversation may name the offline
            models `test` and `scripted:FILE` when they are not registered
            (default False).
        scripts_dir: The directory `scripted:FILE` paths are read under;
            a path outside it is refused. `None` (default): the working
            directory.
        redact: Applied to every tool failure's text before it reaches
            history or the model (default: `Redactor.from_environment()`, see
            `durable_tools.redact`).
        transcripts: The transcripts this worker read, by run, so a model
            turn reads only the items it lacks (default a `TranscriptCache()`:
            256 MiB, 1024 runs; see `transcript_cache.py`).

    Attributes:
        deps: The worker's dependencies, given to every tool run as
            `ToolContext.deps`; the plugin's run context sets it when the
            worker starts (`App(deps=...)`), `None` otherwise.
    """

    def __init__(
        self,
        toolkits: Mapping[str, Toolkit],
        models: Mapping[str, Model],
        *,
        mcp: McpToolsets | None = None,
        redact: Callable[[str], str] | None = None,
        agents: Mapping[str, Agent] | None = None,
        allow_offline_models: bool = False,
        scripts_dir: str | os.PathLike[str] | None = None,
        transcripts: TranscriptCache | None = None,
    ) -> None:
        self.redact: Callable[[str], str] = redact or Redactor.from_environment()
        self.toolkits = dict(toolkits)
        self.models = dict(models)
        self.agents = dict(agents or {})
        check_agents(
            self.agents,
            toolkits=self.toolkits,
            models=self.models,
            allow_offline_models=allow_offline_models,
        )
        self.allow_offline_models = allow_offline_models
        self.scripts_dir = Path(scripts_dir if scripts_dir is not None else ".").resolve()
        self._with_output: dict[tuple[str, int], tuple[Toolkit, Toolkit]] = {}
        self.deps: Any = None
        self.mcp = mcp
        self._with_mcp: dict[str, tuple[int, Toolkit]] = {}
        self.transcripts = transcripts if transcripts is not None else TranscriptCache()

    def _toolkit(self, name: str) -> Toolkit:
        try:
            base = self.toolkits[name]
        except KeyError:
            raise ApplicationError(
                f"no toolkit named {name!r} on this worker (registered: {sorted(self.toolkits)})",
                type="ConfigurationError",
                non_retryable=True,
            ) from None
        if self.mcp is None:
            return base
        version = self.mcp.version
        cached = self._with_mcp.get(name)
        if cached is None or cached[0] != version:
            # Checked at worker start too; a refreshed list that collides fails loudly here.
            cached = (version, compose(base, self.mcp.toolkit(), label=name))
            self._with_mcp[name] = cached
        return cached[1]

    def _agent_toolkit(self, agent: ResolvedAgent) -> Toolkit:
        """The agent's view of its toolkit: its own `finish` tool for `output_type`."""
        base = self._toolkit(agent.toolkit)
        if agent.output_type is None:
            return base
        key = (agent.name, id(agent.output_type))
        cached = self._with_output.get(key)
        if cached is None or cached[0] is not base:
            finish = finish_tool(output_type=agent.output_type)
            view = Toolkit(*(t for t in base if t.name != finish.name), finish, label=base.label)
            cached = self._with_output[key] = (base, view)
        return cached[1]

    def _resolve(self, request: ModelTurnRequest) -> ResolvedAgent:
        try:
            return resolve_agent(request.agent, self.agents)
        except ConfigurationError as exc:
            raise ApplicationError(
                str(exc), type="ConfigurationError", non_retryable=True
            ) from None

    def _model(self, name: str) -> Model:
        """A registered model, else the model its spec names (built once, then kept)."""
        model = self.models.get(name)
        if model is None:
            try:
                model = resolve_model(
                    name, allow_offline=self.allow_offline_models, scripts_dir=self.scripts_dir
                )
            except ConfigurationError as exc:
                if is_offline_model(name):  # refused or unreadable: its own one line
                    raise ApplicationError(
                        str(exc), type="ConfigurationError", non_retryable=True
                    ) from None
                raise ApplicationError(
                    f"no model named {name!r} on this worker (registered: "
                    f"{sorted(self.models)}), and it is not a usable model spec: {exc}",
                    type="ConfigurationError",
                    non_retryable=True,
                ) from None
            self.models[name] = model
        return model

    async def _transcript(self, request: ModelTurnRequest) -> list[TranscriptItem]:
        """The transcript the model sees: only the items this worker has not read yet.

        See `transcript_cache.py`: items `[known, upto)` with the digest of
        the cached prefix, or the whole transcript in pages on a miss.
        """
        if request.transcript is not None:
            return request.transcript
        handle = activity.client().get_workflow_handle(request.workflow_id, run_id=request.run_id)

        async def query(arg: TranscriptSlice) -> TranscriptPage | list[TranscriptItem]:
            answer: TranscriptPage | list[TranscriptItem] = await handle.query(
                TRANSCRIPT_QUERY, arg, result_type=_TRANSCRIPT_ANSWER
            )
            return answer

        return await self.transcripts.read(query, request.workflow_id, request.run_id, request.upto)

    @activity.defn(name=MODEL_TURN_ACTIVITY)
    async def model_turn(self, request: ModelTurnRequest) -> ModelTurn:
        """Call the model for one turn and plan its tool calls.

        Heartbeats every third of the heartbeat timeout while it runs. A
        streaming adapter's text goes to the event stream as it arrives
        (`model_text_delta`, see `activity_events.py`) while someone follows
        the conversation (the workflow's `followed` query); the result is
        still the whole turn. A model
        output that cannot be recorded as it is (an unpaired surrogate, a
        control character or a 10 KB name in a call) is made safe and the call
        answered `input_validation_error` (see `model_output.py`).

        Raises:
            ApplicationError: Whatever failed, bounded by `bounded_failure`
                (one line, no cause chain; the full text is logged).
                Non-retryable when the toolkit named by the agent configuration
                is not registered on this worker, or its model is neither
                registered nor a model spec `resolve_model` builds, or the
                model adapter raised a non-retryable error.
        """
        info = activity.info()
        fields = {"turn": request.turn, "attempt": info.attempt}

        async def followed() -> bool:
            client = activity.client()
            handle = client.get_workflow_handle(request.workflow_id, run_id=request.run_id)
            answer: bool = await handle.query("followed", result_type=bool)
            return answer

        async with ActivityEvents(interval=TEXT_DELTA_INTERVAL, gate=followed) as events:
            try:
                async with _heartbeating():
                    with text_sink(lambda piece: events.text(piece, **fields)):
                        try:
                            return await self._model_turn(request)
                        finally:
                            await events.flush()  # every delta lands before `turn_finished`
            except Exception as exc:
                activity.logger.warning("model turn %d failed", request.turn, exc_info=True)
                failure = bounded_failure(exc, self.redact)
                policy = info.retry_policy
                limit = policy.maximum_attempts if policy is not None else 0
                never = policy.non_retryable_error_types or () if policy is not None else ()
                retried = not failure.non_retryable and failure.type not in never
                if retried and (not limit or info.attempt < limit):
                    # Only when a retry follows: otherwise the workflow's `model_failed` says it.
                    events.publish(
                        "model_attempt_failed",
                        **fields,
                        max_attempts=limit,
                        reason=failure.message[:MAX_EVENT_TEXT],
                    )
                    await events.flush()
                raise failure from None

    async def _model_turn(self, request: ModelTurnRequest) -> ModelTurn:
        if self.mcp is not None:
            await self.mcp.refresh()  # between turns only: a turn sees one tool list
        agent = self._resolve(request)  # never trusted from history: checked every turn
        toolkit = self._agent_toolkit(agent)
        model = self._model(agent.model)
        transcript = await self._transcript(request)
        descriptors = toolkit.descriptors()
        digest = descriptors_digest(descriptors)
        message = await _traced_model_call(
            model,
            ModelRequest(
                model=agent.model,
                instructions=agent.instructions,
                transcript=transcript,
                tools=descriptors,
                turn=request.turn,
                workflow_id=request.workflow_id,
                settings=agent.settings,
            ),
        )
        message, problems = safe_turn(message)
        message = _unique_call_ids(message, transcript)
        message = _bound_arguments(message)
        plans = plan_calls(toolkit, message.tool_calls, [*transcript, message])
        for index, problem in enumerate(problems):
            if problem is not None:
                plan = plans[index]
                failure = failed(plan.call, "input_validation_error", problem)
                plans[index] = plan.model_copy(update={"kind": "unknown", "failure": failure})
        turn = ModelTurn(
            message=message,
            plans=plans,
            descriptors=None if digest == request.known_digest else descriptors,
            digest=digest,
            model=agent.model,
            toolkit=agent.toolkit,
        )
        try:
            to_json(turn)
        except ValueError as exc:  # a model turn that cannot be recorded must not retry forever
            raise ApplicationError(
                f"the model's turn cannot be recorded: {exc}",
                type="ModelOutputInvalid",
                non_retryable=True,
            ) from None
        return turn

    @activity.defn(dynamic=True)
    async def tool_call(self, args: Sequence[RawValue]) -> ToolActivityResult:
        """Run one tool call (activity type `tool.<name>`).

        Exceptions raised by the run propagate so Temporal retries them with
        the tool's retry policy; the workflow turns exhausted retries into a
        Failure. Input validation failures, `ToolFailure`s and oversized
        results are returned as Failures and never retried.
        """
        info = activity.info()
        if not info.activity_type.startswith(TOOL_ACTIVITY_PREFIX):
            raise ApplicationError(
                f"unknown activity type {info.activity_type!r}",
                type="ConfigurationError",
                non_retryable=True,
            )
        request = activity.payload_converter().from_payload(args[0].payload, ToolActivityInput)
        call = request.call
        started = time.monotonic()
        policy = info.retry_policy
        identity: dict[str, Any] = {
            "call_id": call.call_id,
            "tool": call.name,
            "attempt": info.attempt,
        }
        # A quick first attempt publishes nothing (see activity_events.py).
        hold = 0.0 if info.attempt > 1 else STARTED_DELAY
        with telemetry.tool_span(
            call.name, call.call_id, info.attempt, request.workflow_id
        ) as span:
            async with ActivityEvents(hold=hold, interval=PROGRESS_INTERVAL) as events:
                events.publish(
                    "tool_attempt_started",
                    **identity,
                    max_attempts=policy.maximum_attempts if policy is not None else None,
                )
                try:
                    out = await self._tool_call(request, info.attempt, events, identity)
                except Exception as exc:
                    error = exc.type if isinstance(exc, ApplicationError) and exc.type else None
                    telemetry.finish_tool_span(
                        span,
                        call.name,
                        "attempt_failed",
                        time.monotonic() - started,
                        error or type(exc).__name__,
                    )
                    reason = f"{error}: {exc}" if error else f"{type(exc).__name__}: {exc}"
                    events.drop()
                    events.publish(
                        "tool_attempt_failed",
                        **identity,
                        max_attempts=policy.maximum_attempts if policy is not None else None,
                        reason=reason[:MAX_EVENT_TEXT],
                    )
                    await events.flush()
                    raise
                events.drop()  # the call's output, published by the workflow, says more
            result = out.result
            outcome = "ok" if isinstance(result, Ok) else result.kind
            telemetry.finish_tool_span(
                span,
                call.name,
                outcome,
                time.monotonic() - started,
                None if isinstance(result, Ok) else result.kind,
            )
            return out

    async def _tool_call(
        self,
        request: ToolActivityInput,
        attempt: int,
        events: ActivityEvents,
        identity: dict[str, Any],
    ) -> ToolActivityResult:
        call = request.call
        prepared = prepare_call(self._toolkit(request.toolkit), call)
        if isinstance(prepared, Failure):
            return ToolActivityResult(
                result=prepared.model_copy(update={"reason": self.redact(prepared.reason)})
            )
        context = ToolContext(
            call_id=call.call_id,
            tool=call.name,
            idempotency_key=request.idempotency_key,
            attempt=attempt,
            deps=self.deps,
        )
        try:
            emit = _progress_emitter(events, identity)
            value = await prepared.tool.run(prepared.input, emit, context)
        except ToolFailure as exc:
            reason = self.redact(exc.reason)
            if exc.retryable:
                raise ApplicationError(reason, type=exc.kind) from None
            return ToolActivityResult(result=failed(call, exc.kind, reason))
        except Exception as exc:
            # Retried per the tool's policy under the exception's type name; the
            # text Temporal records (and the model may see) is scrubbed, and
            # `from None` keeps the raw message out of the failure's cause.
            activity.logger.warning("tool %s raised", call.name, exc_info=True)
            raise ApplicationError(self.redact(str(exc)), type=type(exc).__name__) from None
        result = encode_result(prepared, value)
        size = len(to_json(result.model_dump(mode="json")))
        if size > request.max_result_bytes:
            result = failed(
                call,
                "output_too_large",
                f"the result is {size} bytes, over the limit of {request.max_result_bytes} bytes "
                "(Temporal's payload limit is 2 MiB); ask for less data, e.g. a page or a summary",
            )
        return ToolActivityResult(result=result, attempt=attempt)


async def _traced_model_call(model: Model, request: ModelRequest) -> AssistantMessage:
    """Call the model inside its `chat {model}` span; record tokens, duration, failures."""
    started = time.monotonic()
    with telemetry.chat_span(request.model, request.workflow_id) as span:
        try:
            message = await model(request)
        except Exception as exc:
            error = exc.type if isinstance(exc, ApplicationError) and exc.type else None
            error = error or type(exc).__name__
            span.set_attribute("error.type", error)
            telemetry.record_model_failure(request.model, error)
            telemetry.record_model_duration(request.model, time.monotonic() - started, error)
            raise
        usage = message.usage
        if usage is not None:
            telemetry.record_usage(span, request.model, usage.input_tokens, usage.output_tokens)
        telemetry.record_model_duration(request.model, time.monotonic() - started, None)
        return message


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncGenerator[None]:
    """Heartbeat every third of the activity's heartbeat timeout until the block ends.

    Without heartbeats, a worker lost during a provider request is noticed
    only when the start-to-close timeout (`model_timeout`, 300 s) passes.
    """
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return
    interval = max(timeout.total_seconds() / 3, 0.05)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _progress_emitter(events: ActivityEvents, identity: dict[str, Any]) -> Any:
    """Progress becomes an activity heartbeat and a throttled `tool_progress` event.

    Tools may emit from another thread (a sync tool runs in one): both go
    through the activity's event loop then.
    """
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()

    def record(value: Any) -> None:
        activity.heartbeat(value)
        events.replace("progress", "tool_progress", **identity, text=_progress_text(value))

    def emit(value: Any) -> None:
        if threading.get_ident() == loop_thread:
            record(value)
        else:
            loop.call_soon_threadsafe(record, value)

    return emit


def _progress_text(value: Any) -> str:
    """A progress value as JSON (anything else as its `str`), bounded by `MAX_EVENT_TEXT`."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # circular, NaN-strict...: show something rather than fail the tool
        text = str(value)
    return text[:MAX_EVENT_TEXT]


def _unique_call_ids(
    message: AssistantMessage, transcript: Sequence[TranscriptItem]
) -> AssistantMessage:
    """Rename call ids the conversation already used, so each id has one output."""
    if isinstance(transcript, CheckedTranscript):  # kept by the cache as the transcript grew
        seen = set(transcript.call_ids)
    else:
        seen = {
            c.call_id
            for item in transcript
            if isinstance(item, AssistantMessage)
            for c in item.tool_calls
        }
    calls: list[ToolCall] = []
    changed = False
    for c in message.tool_calls:
        call_id, n = c.call_id or "call", 1
        while call_id in seen:
            n += 1
            call_id = f"{c.call_id}~{n}"
        seen.add(call_id)
        changed |= call_id != c.call_id
        calls.append(c if call_id == c.call_id else c.model_copy(update={"call_id": call_id}))
    return message.model_copy(update={"tool_calls": tuple(calls)}) if changed else message


def _bound_arguments(message: AssistantMessage) -> AssistantMessage:
    """Keep a turn under Temporal's payload limit by blanking the largest arguments.

    A blanked call keeps its id and name; its arguments become a JSON string
    the executor rejects as `input_validation_error` with the original size.
    """
    sizes = sorted(
        ((len(c.arguments.encode()), i) for i, c in enumerate(message.tool_calls)), reverse=True
    )
    total = sum(s for s, _ in sizes)
    if total <= _MAX_TURN_ARGUMENT_BYTES:
        return message
    calls = list(message.tool_calls)
    for size, i in sizes:
        if total <= _MAX_TURN_ARGUMENT_BYTES:
            break
        marker = json.dumps(f"arguments of {size} bytes dropped: over the turn limit")
        calls[i] = calls[i].model_copy(update={"arguments": marker})
        total -= size
    return message.model_copy(update={"tool_calls": tuple(calls)})
