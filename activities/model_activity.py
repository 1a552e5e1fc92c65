"""The model activity `model.turn` (see `agent_activities.py`).

It reads the transcript (only the items this worker has not read yet),
builds the model's view of it under the agent's context policy, calls the
model adapter, makes its output safe to record and plans the turn's calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from typing import Any, Final

from pydantic_core import to_json
from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_tools import telemetry
from durable_tools._wire import (
    PAYLOAD_BUDGET_BYTES,
    DeltaEntry,
    ModelTurn,
    ModelTurnRequest,
    PlannedCall,
)
from durable_tools.activities.activity_base import (
    AGENT_CONFIG_QUERY,
    FALLBACK_QUERIES,
    MODEL_TURN_ACTIVITY,
    TRANSCRIPT_QUERY,
    ActivitiesBase,
    PlannedHere,
    heartbeating,
    remember,
)
from durable_tools.activities.activity_events import ActivityEvents
from durable_tools.activities.call_policies import CallPolicies
from durable_tools.activities.context_window import SummaryCheckpoint
from durable_tools.activities.failure_log import expected_failure, mark_expected, one_line
from durable_tools.activities.model_output import bound_arguments, safe_turn
from durable_tools.activities.planning import plan_calls
from durable_tools.agents import ResolvedAgent, is_offline_model, resolve_agent
from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES
from durable_tools.budgets import turn_cost
from durable_tools.context import Summarize
from durable_tools.conversation import (
    AGENT_REFUSED,
    AgentConfig,
    TranscriptPage,
    TranscriptSlice,
)
from durable_tools.descriptor import ToolDescriptor, descriptors_digest
from durable_tools.errors import ConfigurationError
from durable_tools.events import MAX_EVENT_TEXT, TEXT_DELTA_INTERVAL
from durable_tools.executor import PreparedCall
from durable_tools.models.base import Model, ModelRequest
from durable_tools.models.errors import CONTEXT_LENGTH_EXCEEDED, bounded_failure
from durable_tools.models.registry import resolve_model
from durable_tools.models.streaming import text_sink
from durable_tools.policies import Policy
from durable_tools.policy_document import InstalledPolicy, PolicyRef
from durable_tools.results import ToolCall, failed
from durable_tools.signals import finish_tool
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import AssistantMessage, ContextSummary, TranscriptItem, UserMessage
from durable_tools.transcript_digest import CheckedTranscript

# Bound of the per-worker memory of toolkits' descriptors (entries).
_MAX_TOOLKITS: Final[int] = 256

# What `transcript_slice` answers: a page with digests, or a list from older workflow code.
_TRANSCRIPT_ANSWER: Any = TranscriptPage | list[TranscriptItem]
_AGENT_CONFIG_ANSWER: Any = AgentConfig | None

# Settings that only make sense with tools or an output format: not sent to the summarizer.
_NOT_FOR_SUMMARIES: Final = frozenset({"tool_choice", "parallel_tool_calls", "response_format"})


class ModelActivity(ActivitiesBase):
    """The `model.turn` activity of `AgentActivities`."""

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

    def _cost(
        self, model: str, message: AssistantMessage, summary: ContextSummary | None
    ) -> float | None:
        """The turn's cost by the price table (`None`: no price applies), recorded with it."""
        costs = [turn_cost(message.usage, self.prices.get(model))]
        if summary is not None:
            costs.append(turn_cost(summary.usage, self.prices.get(summary.model or model)))
        priced = [c for c in costs if c is not None]
        if not priced:
            return None
        telemetry.record_cost(model, sum(priced))
        return sum(priced)

    def _call_policies(
        self,
        agent: ResolvedAgent,
        request: ModelTurnRequest,
        transcript: list[TranscriptItem],
        history: tuple[dict[str, int], dict[str, int]] | None = None,
        caller: str | None = None,
        installed: Policy | None = None,
    ) -> CallPolicies | None:
        """The approval policies of this turn's calls (`None`: none apply).

        `installed`: the policy a live change installed in the conversation
        (`installed_policy`, docs/policies.md "Live change"); it takes the
        agent's policy's place. `history`, `caller`: what rules see as
        `history.calls`, `history.ran` and `conversation.caller` (default:
        read from `transcript`).
        """
        own = installed if installed is not None else agent.policy
        defaults = [p for p in (self.policies.get(agent.toolkit),) if p is not None]
        ordered = [p for p in (own, *defaults) if p is not None]
        shadow = agent.shadow_policy
        mcp = self.mcp
        if not ordered and shadow is None and (mcp is None or not self.policies):
            return None

        def chain(first: list[Policy]) -> Callable[[str], list[Policy]]:
            def policies_for(tool: str) -> list[Policy]:
                server = mcp.server_of(tool) if mcp is not None else None
                extra = self.policies.get(f"mcp:{server.name}") if server is not None else None
                return [*first, extra] if extra is not None else first

            return policies_for

        def trusted(tool: str) -> bool:
            server = mcp.server_of(tool) if mcp is not None else None
            return server is None or server.trust_annotations

        conversation = {
            "team": request.team or "",
            "agent": agent.name,
            "workflow_id": request.workflow_id,
        }
        if caller is not None:
            conversation["caller"] = caller
        candidates = chain([shadow, *defaults]) if shadow is not None else None
        return CallPolicies(
            chain(ordered), transcript, conversation, trusted, candidates, history=history
        )

    async def installed_policy(
        self, workflow_id: str, run_id: str, ref: PolicyRef | None, recorded: InstalledPolicy | None
    ) -> Policy | None:
        """The policy version a live change installed (`None`: none), loaded by version.

        See `policy_versions.py`: compiled once per version, read from the
        run, checked by digest; one that cannot be loaded fails closed.
        `recorded`: the whole document an older input carried.
        """
        if recorded is not None:
            ref = recorded.ref()
        if ref is None:
            return None
        return await self.policy_versions.load(
            ref,
            workflow_id=workflow_id,
            run_id=run_id,
            live=self.live_run(workflow_id, run_id),
            recorded=recorded.document if recorded is not None else None,
        )

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
            remember(self._descriptors, id(toolkit), cached, _MAX_TOOLKITS)
        return list(cached[1]), cached[2]

    async def _agent_config(self, request: ModelTurnRequest) -> AgentConfig:
        """The turn's agent configuration: in the request (kept), or kept, or read by name."""
        workflow_id, key = request.workflow_id, (request.run_id, request.agent_name)
        if request.agent is not None:
            if request.agent_name:
                self._agent_configs.put(workflow_id, key, request.agent)
            return request.agent
        config = self._agent_configs.get(workflow_id, key)
        if config is None:
            live = self.live_run(workflow_id, request.run_id)
            found = live.live_agent_config(request.agent_name) if live is not None else None
            if found is not None:
                self.reads.local += 1
            else:
                self.reads.queries += 1
                handle = activity.client().get_workflow_handle(workflow_id, run_id=request.run_id)
                async with FALLBACK_QUERIES.slot(AGENT_CONFIG_QUERY):
                    found = await handle.query(
                        AGENT_CONFIG_QUERY, request.agent_name, result_type=_AGENT_CONFIG_ANSWER
                    )
            if found is None:
                raise ApplicationError(
                    f"the conversation has no agent named {request.agent_name[:200]!r}",
                    type="ConfigurationError",
                    non_retryable=True,
                )
            config = found
            self._agent_configs.put(workflow_id, key, config)
        return config

    def _resolve(self, agent_config: AgentConfig) -> ResolvedAgent:
        try:
            return resolve_agent(
                agent_config, self.agents, offline_models=self.allow_offline_models
            )
        except ConfigurationError as exc:
            raise ApplicationError(str(exc), type=AGENT_REFUSED, non_retryable=True) from None

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
                        str(exc), type=AGENT_REFUSED, non_retryable=True
                    ) from None
                raise ApplicationError(
                    f"no model named {name!r} on this worker (registered: "
                    f"{sorted(self.models)}), and it is not a usable model spec: {exc}",
                    # The worker's to fix (a missing key, an SDK not installed): not a refusal.
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
                self.produced.forget_delta(workflow_id, request.delta)  # the cache holds them now
                return found
        client = activity.client()
        live = self.live_run(request.workflow_id, request.run_id)

        def local(arg: TranscriptSlice) -> TranscriptPage | None:
            page = live.live_transcript(arg) if live is not None else None
            if page is not None:
                self.reads.local += 1
            return page

        async def query(
            run_id: str | None, arg: TranscriptSlice
        ) -> TranscriptPage | list[TranscriptItem]:
            handle = client.get_workflow_handle(
                request.workflow_id, run_id=run_id or request.run_id
            )
            async with FALLBACK_QUERIES.slot(TRANSCRIPT_QUERY):
                answer: TranscriptPage | list[TranscriptItem] = await handle.query(
                    TRANSCRIPT_QUERY, arg, result_type=_TRANSCRIPT_ANSWER
                )
            return answer

        return await self.transcripts.read(query, request.workflow_id, request.upto, local=local)

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
        self.let_go()
        info = activity.info()
        fields = {"turn": request.turn, "attempt": info.attempt}

        async def followed() -> bool:
            live = self.live_run(request.workflow_id, request.run_id)
            if live is not None:
                return live.live_followed(datetime.now(UTC))
            if FALLBACK_QUERIES.busy():  # text deltas are best-effort: not worth a wait
                return False
            self.reads.queries += 1
            client = activity.client()
            handle = client.get_workflow_handle(request.workflow_id, run_id=request.run_id)
            async with FALLBACK_QUERIES.slot("followed"):
                answer: bool = await handle.query("followed", result_type=bool)
            return answer

        async with ActivityEvents(interval=TEXT_DELTA_INTERVAL, gate=followed) as events:
            try:
                details: list[Any] = []  # what each heartbeat records (a summary made)
                async with heartbeating(details):
                    with text_sink(lambda piece: events.text(piece, **fields)):
                        try:
                            return await self._model_turn(request, details)
                        finally:
                            await events.flush()  # every delta lands before `turn_finished`
            except Exception as exc:
                failure = bounded_failure(exc, self.redact)
                policy = info.retry_policy
                limit = policy.maximum_attempts if policy is not None else 0
                never = policy.non_retryable_error_types or () if policy is not None else ()
                retried = not failure.non_retryable and failure.type not in never
                retried = retried and (not limit or info.attempt < limit)
                if expected_failure(exc):
                    # One line, the traceback (and the SDK's) only at DEBUG; when
                    # no retry follows, the workflow's `model turn N failed` line.
                    level = logging.WARNING if retried else logging.DEBUG
                    activity.logger.log(
                        level,
                        "model turn %d failed (attempt %d%s): %s",
                        request.turn,
                        info.attempt,
                        ", retried" if retried else "",
                        one_line(exc),
                    )
                    activity.logger.debug("model turn %d failed", request.turn, exc_info=True)
                    mark_expected(failure)
                else:
                    activity.logger.warning("model turn %d failed", request.turn, exc_info=True)
                if retried:
                    # Only when a retry follows: otherwise the workflow's `model_failed` says it.
                    events.publish(
                        "model_attempt_failed",
                        **fields,
                        max_attempts=limit,
                        reason=failure.message[:MAX_EVENT_TEXT],
                    )
                    await events.flush(wait=False)  # the retry does not wait for it
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
            return await traced_model_call(
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
            return await traced_model_call(
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
        message = bound_arguments(message, self.max_payload_bytes or PAYLOAD_BUDGET_BYTES)
        installed = None
        if message.tool_calls:
            ids = (request.workflow_id, request.run_id)
            installed = await self.installed_policy(*ids, request.policy_ref, request.policy)
        validated: dict[str, PreparedCall] = {}
        plans = plan_calls(
            toolkit,
            message.tool_calls,
            transcript,
            message=message,
            validated=validated,
            max_argument_bytes=self.max_payload_bytes or DEFAULT_MAX_ARGUMENT_BYTES,
            redact=self.redact,
            policies=self._call_policies(agent, request, transcript, installed=installed)
            if message.tool_calls
            else None,
        )
        for index, problem in enumerate(problems):
            if problem is not None:
                plan = plans[index]
                failure = failed(plan.call, "input_validation_error", problem)
                plans[index] = plan.model_copy(update={"kind": "unknown", "failure": failure})
        if self.notify:
            mcp = self.mcp
            plans = [
                _with_notify(
                    plan,
                    self.notify,
                    may_ask=mcp is not None and mcp.server_of(plan.call.name) is not None,
                )
                for plan in plans
            ]
        for plan in plans:
            if plan.kind == "local":  # read back by its tool activity (`ToolActivity._call`)
                # The call itself, so a failure of its plan never runs it validated.
                kept = validated.get(plan.call.call_id) if plan.failure is None else None
                self._planned.put(
                    request.workflow_id,
                    plan.call.call_id,
                    PlannedHere(plan.call, plan.arguments_hash, kept),
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
            messages_supersede=agent.messages_supersede,
            cost_usd=self._cost(agent.model, message, window.summary),
            budget=agent.budget,
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


async def traced_model_call(model: Model, request: ModelRequest) -> AssistantMessage:
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


def _with_notify(
    plan: PlannedCall, notify: dict[str, list[str]], *, may_ask: bool = False
) -> PlannedCall:
    """`plan` with the worker's webhooks when its call waits, or may wait, for a person.

    `may_ask`: the call's tool is an MCP server's, which may ask a question
    or ask to sample or open a link while it runs (`workflows/input_rounds.py`).
    """
    waits = plan.failure is None and (
        (plan.kind == "local" and (plan.needs_approval or may_ask)) or plan.kind == "interaction"
    )
    return plan.model_copy(update={"notify": notify}) if waits else plan
