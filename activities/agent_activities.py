"""The model activity and the tool activity of the durable loop.

* `model.turn` reads the transcript through a query to the workflow (so the
  transcript is never recorded as activity input: history grows linearly),
  only the items this worker has not read yet (`transcript_cache.py`),
  builds the model's view of it under the agent's context policy
  (`context_window.py`; on a context-length error it summarizes and tries
  once more), calls the model adapter, makes its output safe to record
  (`model_output.py`), and plans the turn's calls (`planning.py`). It
  heartbeats while it runs, so a worker lost during a slow provider request
  is noticed after the heartbeat timeout, not the model timeout; whatever it
  raises is bounded to one line (`bounded_failure`), its full text logged.
* `tool.<name>` (one dynamic activity) runs one tool call. Its activity type
  names the tool, so `temporal workflow show` reads like the conversation.
  The attempt heartbeats, delivers progress and is stopped on cancellation
  or timeout as `tool_run.py` describes; sync tools run in the worker's
  bounded `ToolThreads`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pydantic_core import to_json
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_tools import telemetry
from durable_tools._wire import (
    PAYLOAD_BUDGET_BYTES,
    CallReference,
    DeltaEntry,
    ModelTurn,
    ModelTurnRequest,
    ToolActivityInput,
    ToolActivityResult,
)
from durable_tools.activities.activity_events import ActivityEvents
from durable_tools.activities.context_window import ContextWindow, SummaryCheckpoint
from durable_tools.activities.model_output import safe_turn
from durable_tools.activities.planning import plan_calls
from durable_tools.activities.tool_run import AttemptTimedOut, run_attempt
from durable_tools.activities.transcript_cache import ProducedItems, TranscriptCache
from durable_tools.agents import Agent, ResolvedAgent, check_agents, is_offline_model, resolve_agent
from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES
from durable_tools.context import ContextStrategyFunction, Summarize
from durable_tools.conversation import AgentConfig, TranscriptPage, TranscriptSlice
from durable_tools.descriptor import ToolDescriptor, descriptors_digest
from durable_tools.errors import ConfigurationError
from durable_tools.events import (
    MAX_EVENT_TEXT,
    PROGRESS_INTERVAL,
    STARTED_DELAY,
    TEXT_DELTA_INTERVAL,
)
from durable_tools.executor import encode_result, prepare_call
from durable_tools.models.base import Model, ModelRequest
from durable_tools.models.errors import CONTEXT_LENGTH_EXCEEDED, bounded_failure
from durable_tools.models.registry import resolve_model
from durable_tools.models.streaming import text_sink
from durable_tools.redact import Redactor
from durable_tools.results import Failure, Ok, ToolCall, failed
from durable_tools.signals import finish_tool
from durable_tools.tool_threads import ToolThreads
from durable_tools.toolkit import Toolkit, compose
from durable_tools.tools import ToolContext, ToolFailure
from durable_tools.transcript import (
    AssistantMessage,
    ContextSummary,
    TranscriptItem,
    UserMessage,
    to_tool_call_output,
)
from durable_tools.transcript_digest import CheckedTranscript

if TYPE_CHECKING:  # the mcp SDK is imported only by workers that use it
    from durable_tools.mcp.toolset import McpToolsets

__all__ = ["MODEL_TURN_ACTIVITY", "TOOL_ACTIVITY_PREFIX", "AgentActivities"]

MODEL_TURN_ACTIVITY: Final[str] = "model.turn"
"""Activity type of the model request."""

TOOL_ACTIVITY_PREFIX: Final[str] = "tool."
"""Tool activities are named `tool.<tool name>`."""

TRANSCRIPT_QUERY: Final[str] = "transcript_slice"
AGENT_CONFIG_QUERY: Final[str] = "agent_config"
TOOL_CALL_QUERY: Final[str] = "tool_call"

_K = TypeVar("_K")
_V = TypeVar("_V")

# Bounds of the per-worker memories of recorded-by-reference inputs (entries).
_MAX_AGENT_CONFIGS: Final[int] = 1024
_MAX_PLANNED: Final[int] = 16_384
_MAX_TOOLKITS: Final[int] = 256

# What `transcript_slice` answers: a page with digests, or a list from older workflow code.
_TRANSCRIPT_ANSWER: Any = TranscriptPage | list[TranscriptItem]
_AGENT_CONFIG_ANSWER: Any = AgentConfig | None
_TOOL_CALL_ANSWER: Any = ToolCall | None

# Settings that only make sense with tools or an output format: not sent to the summarizer.
_NOT_FOR_SUMMARIES: Final = frozenset({"tool_choice", "parallel_tool_calls", "response_format"})


_TRANSIENT_QUERY_STATUS: Final = frozenset(
    {
        RPCStatusCode.CANCELLED,  # the bridge's "Timeout expired"
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.RESOURCE_EXHAUSTED,
    }
)
_QUERY_TRIES: Final = 6
"""Tries of the `tool_call` query before its error fails the attempt (backoff 0.2 s, doubling)."""


async def _read_open_call(workflow_id: str, call_id: str) -> ToolCall | None:
    """The workflow's open call `call_id`, by the `tool_call` query, retried while transient.

    The query runs before the tool does, so a query that timed out (a busy
    worker replaying a long history to answer it) or found the server
    unavailable is tried again here rather than failing the attempt: for a
    call that runs at most once (an approved call), a failed attempt is the
    call's end, though the tool never started.

    Raises:
        RPCError: A non-transient status, or a transient one `_QUERY_TRIES` times.
        WorkflowQueryFailedError: The workflow failed the query.
    """
    handle = activity.client().get_workflow_handle(workflow_id)
    delay, tries = 0.2, 1
    while True:
        try:
            found: ToolCall | None = await handle.query(
                TOOL_CALL_QUERY, call_id, result_type=_TOOL_CALL_ANSWER
            )
            return found
        except RPCError as exc:
            if exc.status not in _TRANSIENT_QUERY_STATUS or tries >= _QUERY_TRIES:
                raise
        if activity.info().heartbeat_timeout:
            # Alive while it waits, with the details this attempt started with
            # (a tool's last progress stays what a later attempt reads).
            activity.heartbeat(*activity.info().heartbeat_details)
        await asyncio.sleep(delay)
        delay, tries = delay * 2, tries + 1


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
        transcripts: The transcripts this worker read, by conversation, so a
            model turn reads only the items it lacks, across continue-as-new
            too (default a `TranscriptCache()`: 256 MiB, 1024 conversations;
            see `transcript_cache.py`).
        max_payload_bytes: The largest tool result (JSON bytes) and tool-call
            argument text (UTF-8 bytes, per turn) when the worker stores large
            payloads externally (`PayloadStorage.max_payload_bytes`, e.g.
            64 MiB). `None` (default): no external storage, so Temporal's
            2 MiB payload limit applies: results over
            `ToolActivityInput.max_result_bytes` (1.5 MB), arguments over
            1 MiB per call or 1.5 MB per turn are refused.
        context_strategies: Custom context strategies by the name a
            `CustomStrategy` in a context policy gives (default none; see
            `durable_tools.context`).
        tool_threads: Most sync tool calls running at once, each in a thread
            of the worker's pool (`durable_tools.tool_threads`); `None`
            (default): the worker's `max_concurrent_activities` (the plugin
            sets it when the worker is built), else 100.

    Raises:
        ConfigurationError: A declared agent is one the worker cannot serve
            (see `check_agents`), or its context policies name a custom
            strategy not in `context_strategies`.

    Attributes:
        deps: The worker's dependencies, given to every tool run as
            `ToolContext.deps`; the plugin's run context sets it when the
            worker starts (`App(deps=...)`), `None` otherwise.
        tool_threads: The pool sync tools run in (`ToolThreads`).
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
        max_payload_bytes: int | None = None,
        context_strategies: Mapping[str, ContextStrategyFunction] | None = None,
        tool_threads: int | None = None,
    ) -> None:
        self.tool_threads = ToolThreads(tool_threads)
        self.max_payload_bytes = max_payload_bytes
        self.redact: Callable[[str], str] = redact or Redactor.from_environment()
        self.toolkits = dict(toolkits)
        self.models = dict(models)
        self.agents = dict(agents or {})
        self.context = ContextWindow(context_strategies)
        check_agents(
            self.agents,
            toolkits=self.toolkits,
            models=self.models,
            allow_offline_models=allow_offline_models,
            context_strategies=self.context.functions,
        )
        self.allow_offline_models = allow_offline_models
        self.scripts_dir = Path(scripts_dir if scripts_dir is not None else ".").resolve()
        self._with_output: dict[tuple[str, int], tuple[Toolkit, Toolkit]] = {}
        # By toolkit identity (a toolkit and its tools never change; MCP
        # refreshes make new toolkits): rendering and hashing the descriptors
        # every turn cost about 0.07 ms. See `_descriptors_of`.
        self._descriptors: OrderedDict[int, tuple[Toolkit, list[ToolDescriptor], str]] = (
            OrderedDict()
        )
        self.deps: Any = None
        self.mcp = mcp
        self._with_mcp: dict[str, tuple[int, Toolkit]] = {}
        self.transcripts = transcripts if transcripts is not None else TranscriptCache()
        # What recorded inputs name instead of holding (issue 12, slim records):
        # agent configurations by run and name, and the calls this worker planned.
        self._agent_configs: OrderedDict[tuple[str, str, str], AgentConfig] = OrderedDict()
        self._planned: OrderedDict[tuple[str, str], tuple[ToolCall, str]] = OrderedDict()
        self.produced = ProducedItems()

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

    def _descriptors_of(self, toolkit: Toolkit) -> tuple[list[ToolDescriptor], str]:
        """The toolkit's descriptors (a new list of the same frozen descriptors) and digest.

        Kept per toolkit object, unless its class overrides `descriptors`
        (which may then offer different tools from turn to turn).
        """
        if type(toolkit).descriptors is not Toolkit.descriptors:
            descriptors = toolkit.descriptors()
            return descriptors, descriptors_digest(descriptors)
        cached = self._descriptors.get(id(toolkit))
        if cached is None or cached[0] is not toolkit:
            descriptors = toolkit.descriptors()
            cached = (toolkit, descriptors, descriptors_digest(descriptors))
            _remember(self._descriptors, id(toolkit), cached, _MAX_TOOLKITS)
        return list(cached[1]), cached[2]

    async def _agent_config(self, request: ModelTurnRequest) -> AgentConfig:
        """The turn's agent configuration: in the request (kept), or kept, or read by name."""
        key = (request.workflow_id, request.run_id, request.agent_name)
        if request.agent is not None:
            if request.agent_name:
                _remember(self._agent_configs, key, request.agent, _MAX_AGENT_CONFIGS)
            return request.agent
        config = self._agent_configs.get(key)
        if config is None:
            handle = activity.client().get_workflow_handle(
                request.workflow_id, run_id=request.run_id
            )
            found: AgentConfig | None = await handle.query(
                AGENT_CONFIG_QUERY, request.agent_name, result_type=_AGENT_CONFIG_ANSWER
            )
            if found is None:
                raise ApplicationError(
                    f"the conversation has no agent named {request.agent_name[:200]!r}",
                    type="ConfigurationError",
                    non_retryable=True,
                )
            config = found
            _remember(self._agent_configs, key, config, _MAX_AGENT_CONFIGS)
        return config

    async def _call(self, request: ToolActivityInput) -> ToolCall:
        """The call to run: in the request, else planned on this worker or read by query.

        Arguments this worker planned are used only when they have the
        reference's digest (the `arguments_hash` the workflow recorded: the
        plan may come from an attempt whose result was not recorded); else
        the workflow's open call is read with the `tool_call` query.

        Raises:
            ApplicationError: Non-retryable, when the request names neither a
                call nor a reference, or the conversation has no such open call
                with that digest.
        """
        if request.call is not None:
            return request.call
        reference = request.reference
        if reference is None:
            raise ApplicationError(
                "the tool activity's input names no call",
                type="ConfigurationError",
                non_retryable=True,
            )
        planned = self._planned.get((request.workflow_id, reference.call_id))
        if planned is not None and _matches(planned, reference):
            return planned[0]
        found = await _read_open_call(request.workflow_id, reference.call_id)
        # The workflow's own open call is the record (histories planned before
        # `call_digest` hold another hash): its id and name must match.
        if found is None or (found.call_id, found.name) != (reference.call_id, reference.name):
            raise ApplicationError(
                f"the conversation has no open call {reference.call_id[:200]!r} "
                f"of {reference.name[:200]!r}",
                type="ConfigurationError",
                non_retryable=True,
            )
        return found

    def _resolve(self, agent_config: AgentConfig) -> ResolvedAgent:
        try:
            return resolve_agent(agent_config, self.agents)
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
        the cached prefix, or the whole transcript in pages on a miss (the
        items before the run's `base` from the earlier runs).
        """
        if request.transcript is not None:
            return request.transcript
        if request.delta is not None:
            produced, workflow_id = self.produced, request.workflow_id
            found = self.transcripts.extend_by_delta(
                workflow_id, request.delta, lambda entry: produced.find(workflow_id, entry)
            )
            if found is not None:
                return found
        client = activity.client()

        async def query(
            run_id: str | None, arg: TranscriptSlice
        ) -> TranscriptPage | list[TranscriptItem]:
            handle = client.get_workflow_handle(
                request.workflow_id, run_id=run_id or request.run_id
            )
            answer: TranscriptPage | list[TranscriptItem] = await handle.query(
                TRANSCRIPT_QUERY, arg, result_type=_TRANSCRIPT_ANSWER
            )
            return answer

        return await self.transcripts.read(query, request.workflow_id, request.upto)

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
                details: list[Any] = []  # what each heartbeat records (a summary made)
                async with _heartbeating(details):
                    with text_sink(lambda piece: events.text(piece, **fields)):
                        try:
                            return await self._model_turn(request, details)
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

    async def _model_turn(self, request: ModelTurnRequest, details: list[Any]) -> ModelTurn:
        if self.mcp is not None:
            await self.mcp.refresh()  # between turns only: a turn sees one tool list
        # Never trusted from history: checked against the worker's agents every turn.
        agent = self._resolve(await self._agent_config(request))
        toolkit = self._agent_toolkit(agent)
        model = self._model(agent.model)
        transcript = await self._transcript(request)
        descriptors, digest = self._descriptors_of(toolkit)

        async def summarize(strategy: Summarize, text: str) -> AssistantMessage:
            name = strategy.model or agent.model
            settings = agent.settings if name == agent.model else {}
            return await _traced_model_call(
                self._model(name),
                ModelRequest(
                    model=name,
                    instructions=strategy.instructions,
                    transcript=[UserMessage(text=text)],
                    tools=[],
                    turn=request.turn,
                    workflow_id=request.workflow_id,
                    settings={k: v for k, v in settings.items() if k not in _NOT_FOR_SUMMARIES},
                    purpose="summary",
                ),
            )

        window = await self.context.prepare(
            agent.context,
            transcript,
            instructions=agent.instructions,
            tools=descriptors,
            summarize=summarize,
            agent=agent.name,
            model=agent.model,
            turn=request.turn,
            # Conversation-wide, as the cache's transcripts are: keyed by run, a
            # new run's first turn looked at all 20,000 items of a long one again.
            run=(request.workflow_id, ""),
            reuse=SummaryCheckpoint.read(activity.info().heartbeat_details, request.upto),
        )

        def checkpoint(summary: ContextSummary | None) -> None:
            # A later attempt of this activity (a rate limit, a lost worker) reuses it.
            if summary is not None:
                details[:] = [SummaryCheckpoint(upto=request.upto, summary=summary)]
                activity.heartbeat(*details)

        checkpoint(window.summary)

        async def call_model(items: list[TranscriptItem]) -> AssistantMessage:
            return await _traced_model_call(
                model,
                ModelRequest(
                    model=agent.model,
                    instructions=agent.instructions,
                    # Items read or made here were validated already: not again per turn.
                    transcript=items
                    if isinstance(items, CheckedTranscript)
                    else CheckedTranscript(items, frozenset()),
                    tools=descriptors,
                    turn=request.turn,
                    workflow_id=request.workflow_id,
                    settings=agent.settings,
                ),
            )

        try:
            message = await call_model(window.items)
        except ApplicationError as exc:
            if exc.type != CONTEXT_LENGTH_EXCEEDED:
                raise
            reduced = await self.context.after_context_error(agent.context, window, summarize)
            if reduced is None:
                raise
            activity.logger.info(
                "model turn %d: over the context window; summarized items 0-%d, trying once more",
                request.turn,
                reduced.summary.covers_upto if reduced.summary is not None else 0,
            )
            window = reduced
            checkpoint(window.summary)
            message = await call_model(window.items)
        message, problems = safe_turn(message)
        message = _unique_call_ids(message, transcript)
        message = _bound_arguments(message, self.max_payload_bytes or PAYLOAD_BUDGET_BYTES)
        plans = plan_calls(
            toolkit,
            message.tool_calls,
            transcript,
            message=message,
            max_argument_bytes=self.max_payload_bytes or DEFAULT_MAX_ARGUMENT_BYTES,
        )
        for index, problem in enumerate(problems):
            if problem is not None:
                plan = plans[index]
                failure = failed(plan.call, "input_validation_error", problem)
                plans[index] = plan.model_copy(update={"kind": "unknown", "failure": failure})
        for plan in plans:
            _remember(
                self._planned,
                (request.workflow_id, plan.call.call_id),
                (plan.call, plan.arguments_hash),
                _MAX_PLANNED,
            )
        self.produced.remember(request.workflow_id, DeltaEntry(turn=request.turn), message)
        turn = ModelTurn(
            message=message,
            plans=plans,
            descriptors=None if digest == request.known_digest else descriptors,
            digest=digest,
            model=agent.model,
            toolkit=agent.toolkit,
            summary=window.summary,
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
        # Reading the call may wait on the `tool_call` query (a worker that
        # replays to answer it): heartbeat meanwhile, with the details this
        # attempt started with, or a slow query outlives the heartbeat timeout
        # and the attempt (the call's only one, when approved) is cancelled.
        async with _heartbeating(list(info.heartbeat_details)):
            call = await self._call(request)
        if request.call is None:
            request = request.model_copy(update={"call": call})
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
            # The output the workflow appends: the next model turn on this
            # worker reads it from here (`TranscriptDelta`), not by query.
            self.produced.remember(
                request.workflow_id, DeltaEntry(call_id=call.call_id), to_tool_call_output(result)
            )
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
        assert call is not None  # resolved by `tool_call`
        prepared = prepare_call(
            self._toolkit(request.toolkit),
            call,
            max_argument_bytes=self.max_payload_bytes or DEFAULT_MAX_ARGUMENT_BYTES,
        )
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
        tool, parsed = prepared.tool, prepared.input
        try:
            value = await run_attempt(
                lambda emit: tool.run(parsed, emit, context),
                context=context,
                events=events,
                identity=identity,
                threads=self.tool_threads,
            )
        except AttemptTimedOut as exc:
            # Retried like Temporal's own start-to-close timeout, which has
            # usually been recorded already (then this failure is dropped).
            raise ApplicationError(str(exc), type="StartToCloseTimeout") from None
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
        size = len(to_json(result))
        limit = self.max_payload_bytes or request.max_result_bytes
        if size > limit:
            why = (
                "the worker's maximum payload size"
                if self.max_payload_bytes
                else "Temporal's payload limit is 2 MiB"
            )
            result = failed(
                call,
                "output_too_large",
                f"the result is {size} bytes, over the limit of {limit} bytes ({why}); "
                "ask for less data, e.g. a page or a summary",
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
async def _heartbeating(details: list[Any] | None = None) -> AsyncGenerator[None]:
    """Heartbeat every third of the activity's heartbeat timeout until the block ends.

    The first heartbeat is sent a third of the timeout after the start.

    Without heartbeats, a worker lost during a provider request is noticed
    only when the start-to-close timeout (`model_timeout`, 300 s) passes.
    Each heartbeat records `details` as they are then (a heartbeat without
    them would replace what an earlier one recorded).
    """
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return
    interval = max(timeout.total_seconds() / 3, 0.05)
    loop = asyncio.get_running_loop()

    def beat() -> None:
        # A timer, not a task: a turn shorter than `interval` (most) costs
        # neither the server a heartbeat nor the loop a task. The callback
        # runs in the activity's context (`call_later` copies it).
        nonlocal timer
        activity.heartbeat(*(details or ()))
        timer = loop.call_later(interval, beat)

    timer = loop.call_later(interval, beat)
    try:
        yield
    finally:
        timer.cancel()


def _unique_call_ids(
    message: AssistantMessage, transcript: Sequence[TranscriptItem]
) -> AssistantMessage:
    """Rename call ids the conversation already used, so each id has one output."""
    used: AbstractSet[str]
    if isinstance(transcript, CheckedTranscript):  # kept by the cache as the transcript grew
        used = transcript.call_ids
    else:
        used = {
            c.call_id
            for item in transcript
            if isinstance(item, AssistantMessage)
            for c in item.tool_calls
        }
    taken = set[str]()  # this turn's, beside `used` (not copied: it may be the cache's)
    calls: list[ToolCall] = []
    changed = False
    for c in message.tool_calls:
        call_id, n = c.call_id or "call", 1
        while call_id in used or call_id in taken:
            n += 1
            call_id = f"{c.call_id}~{n}"
        taken.add(call_id)
        changed |= call_id != c.call_id
        calls.append(c if call_id == c.call_id else c.model_copy(update={"call_id": call_id}))
    return message.model_copy(update={"tool_calls": tuple(calls)}) if changed else message


def _bound_arguments(message: AssistantMessage, limit: int) -> AssistantMessage:
    """Keep a turn's argument text under `limit` bytes by blanking the largest arguments.

    The limit is Temporal's payload limit (`PAYLOAD_BUDGET_BYTES`), or the
    worker's maximum payload size with external storage.

    A blanked call keeps its id and name; its arguments become a JSON string
    the executor rejects as `input_validation_error` with the original size.
    """
    sizes = sorted(
        ((len(c.arguments.encode()), i) for i, c in enumerate(message.tool_calls)), reverse=True
    )
    total = sum(s for s, _ in sizes)
    if total <= limit:
        return message
    calls = list(message.tool_calls)
    for size, i in sizes:
        if total <= limit:
            break
        marker = json.dumps(f"arguments of {size} bytes dropped: over the turn limit")
        calls[i] = calls[i].model_copy(update={"arguments": marker})
        total -= size
    return message.model_copy(update={"tool_calls": tuple(calls)})


def _remember(memory: OrderedDict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """Keep `value` under `key`, dropping the least recently kept past `limit` entries."""
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > limit:
        memory.popitem(last=False)


def _matches(planned: tuple[ToolCall, str], reference: CallReference) -> bool:
    """Whether a planned call (and its `call_digest`) is the referenced call."""
    call, digest = planned
    return (
        call.call_id == reference.call_id
        and call.name == reference.name
        and digest == reference.digest
    )
