"""`AgentWorkflow`: the durable agent loop.

Each turn: reconcile, call the model (activity `model.turn`), then answer every
tool call of the turn exactly once:

* local tools run as activities `tool.<name>` with the tool's own timeouts and
  retry policy, at most `max_concurrent_tool_calls` at a time;
* approval-gated calls wait durably (default 7 days) for a decision, which
  arrives as the `decide` signal (stored by the server even with no worker
  running) or the validated `decide_now` update;
* interaction tools wait for an `answer` signal / `answer_now` update;
* signal tools are carried out by the loop (sleep, pause, handoff, finish);
* calls answered before running (unknown tool, invalid arguments, provider
  tools) get their Failure from the plan.

A model turn that fails for good (a non-retryable error, or retries of the
bounded `ModelRetry` policy ran out) does not end the conversation: it waits
in state `model_failed` (the `status` and `pending` queries, the
`model_failed` pending kind, the current details) for the `retry` signal /
`retry_now` update, a new message (`send`), or cancellation.

Workflow code is deterministic: no I/O, clocks or randomness outside
Temporal's APIs. Everything that needs application code runs in activities.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from pydantic_core import to_json
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue, RetryPolicy, SearchAttributeKey
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStream
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
    TimeoutType,
    is_cancelled_exception,
)

from durable_tools.workflows.model_failure import describe_model_failure, model_retry_policy

with workflow.unsafe.imports_passed_through():
    from durable_tools import telemetry
    from durable_tools._wire import (
        CallReference,
        CarriedCall,
        CarriedState,
        CarriedTurn,
        ConversationInput,
        DeltaEntry,
        ModelTurn,
        ModelTurnRequest,
        PlannedCall,
        ToolActivityInput,
        ToolActivityResult,
        TranscriptDelta,
    )
    from durable_tools.activities.activity_base import MODEL_TURN_ACTIVITY, TOOL_ACTIVITY_PREFIX
    from durable_tools.activities.decision_activities import VERIFY_DECISION_ACTIVITY
    from durable_tools.approvals import (
        Decision,
        DecisionCheck,
        DecisionVerdict,
        approver_problem,
        decision_outcome,
        digest_problem,
    )
    from durable_tools.carry import MAX_EARLIER_RUNS, cut_text, tail_start
    from durable_tools.conversation import (
        AgentConfig,
        Answer,
        ConversationResult,
        ConversationStatus,
        DecisionReceipt,
        ModelFailure,
        PendingApproval,
        PendingInteraction,
        PendingState,
        RejectedDecision,
        Resume,
        RunSpan,
        SendMessage,
        TranscriptPage,
        TranscriptSlice,
        TurnOutcome,
    )
    from durable_tools.events import (
        EVENTS_TOPIC,
        FOLLOW_WINDOW,
        MAX_EVENT_TEXT,
        RETAINED_EVENTS,
        ConversationEvent,
    )
    from durable_tools.formats import check_answer
    from durable_tools.handler_input import Undecodable, clean_text, decode_input
    from durable_tools.results import (
        Failure,
        Ok,
        ToolCall,
        cancelled,
        execution_error,
        expired,
        failed,
        interrupted,
        timed_out,
    )
    from durable_tools.signals import Finish, Handoff, Pause, Reply, Sleep
    from durable_tools.transcript import (
        AssistantMessage,
        ToolCallOutput,
        TranscriptItem,
        Usage,
        UserMessage,
        is_reconciled,
        to_tool_call_output,
    )
    from durable_tools.transcript_digest import EMPTY_DIGEST, PrefixDigests

__all__ = ["NO_SEARCH_ATTRIBUTES_PATCH", "PENDING_COUNT", "PENDING_KINDS", "AgentWorkflow"]

PENDING_COUNT = SearchAttributeKey.for_int("DurableToolsPendingCount")
"""Search attribute: approvals + interactions waiting (0 when none)."""

PENDING_KINDS = SearchAttributeKey.for_keyword_list("DurableToolsPendingKinds")
"""Search attribute: what is pending (`approval`, `interaction`, `pause`, `model_failed`)."""

_EVENT_FIELDS = frozenset(ConversationEvent.model_fields) - {"kind", "at", "offset"}
"""The fields the loop sets on an event beside its kind and time."""

_JSON_PLAIN = {"encoding": b"json/plain"}
"""A published event's payload metadata (what `PydanticJSONPlainPayloadConverter` writes)."""

MODEL_FAILED_PATCH = "model-failed-waits"
"""Patch id: histories recorded before it failed the workflow on a model error."""

NO_SEARCH_ATTRIBUTES_PATCH = "durable-tools/no-search-attributes"
"""Patch id a run records when a worker with search attributes off runs it.

`DurableToolsPlugin(search_attributes=False)` activates this patch (the
worker's `patch_activation_callback`); the marker in history then makes every
replay skip the upserts too, whatever the replaying worker's setting, and a
history without it (every history recorded before) upserts as before.
"""

TRUSTED_DECISIONS_PATCH = "trusted-decisions"
"""Patch id: histories recorded before it kept early decisions and answers by default."""

BOUNDED_CARRY_PATCH = "bounded-carry"
"""Patch id: histories recorded before it carried the whole transcript across continue-as-new.

Without the marker a run carries its whole transcript and stays in the run
once that is over `_MAX_CARRY_BYTES`; with it, a bounded tail
(`durable_tools.carry`).
"""

NO_DESCRIPTOR_CARRY_PATCH = "no-descriptor-carry"
"""Patch id: histories recorded before it carried the descriptors across continue-as-new.

Nothing reads `CarriedState.descriptors` (the model activity compares the
descriptors' digest, which is carried): with the marker the carry leaves
them out (each tool's schema, once per continue-as-new, twice in history).
"""

FOLLOW_VERSIONS_PATCH = "follow-versions-at-waits"
"""Patch id: histories recorded before it continued as new only after a model turn.

With the marker (recorded at a run's first durable wait on a versioned
worker), a run that waits durably (idle, an approval, a question, a sleep, a
pause, `model_failed`) continues as new at that wait when its target worker
version changes or Temporal suggests it, carrying what waits
(`CarriedState.turn`, `model_failed`, `idle_until`), and checks every
`ConversationOptions.version_check_interval` seconds while it waits.
"""

_FIRST_TASK_EVENTS = 3
"""History length during a run's first workflow task (started, task scheduled, task started).

A run does not continue as new at a wait in its first task: a run that a
move started waits for its next task before it moves again (no loop of runs
if the server still reports a version change).
"""

_MAX_REJECTED = 100
_MAX_ID_CHARS = 200
# The page an undecodable `transcript_slice` argument gets; the client pages by
# the same size (Temporal's query results are limited to about 2 MB).
_DEFAULT_PAGE_BYTES = 1_000_000
_STREAM_POLL = "__temporal_workflow_stream_poll"  # Workflow Streams' poll update
_SIGNAL_INPUTS: dict[str, tuple[type[Decision | Answer | SendMessage | Resume], Any]] = {
    "decide": (Decision, None),
    "answer": (Answer, None),
    "send": (SendMessage, None),
    "resume": (Resume, Resume()),
}
_UPDATE_INPUTS: dict[str, type[Decision | Answer]] = {"decide_now": Decision, "answer_now": Answer}
_MAX_EARLY = 1000
_NO_TIMEOUT = timedelta(days=1)
_UNKNOWN = "unknown"
# Temporal rejects a continue-as-new input over 2 MiB (the workflow task fails
# and is retried forever); a larger carried state stays in the current run
# (only the whole transcript of histories before BOUNDED_CARRY_PATCH, or state
# other than the transcript, e.g. a thousand early decisions, gets there).
_MAX_CARRY_BYTES = 2_000_000
# A model turn's `TranscriptDelta` gives at most this many bytes of items whole
# (user messages, outputs the workflow made); past it the activity queries.
_MAX_DELTA_INLINE_BYTES = 64 * 1024


def _seconds(value: float) -> str:
    if value >= 86400 and value % 86400 == 0:
        return f"{value / 86400:g} days"
    if value >= 3600 and value % 3600 == 0:
        return f"{value / 3600:g} hours"
    return f"{value:g} s"


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    """One agent conversation. See the module docstring for the loop.

    On versioned workers (Worker Deployments; `run_worker(deployment=...)`
    sets `PINNED` as the worker's default behavior, since declaring it here
    would fail every workflow task on unversioned workers) each run is pinned
    to the version it started on, so its history is only ever replayed by the code
    that wrote it; when a new version becomes current, the conversation
    continues as new with `AUTO_UPGRADE` at its next turn boundary or durable
    wait (idle, an approval, a question, a sleep, a pause, `model_failed`;
    FOLLOW_VERSIONS_PATCH), carrying what waits, and the new run starts on
    the new version (docs/operations.md, "Upgrades").
    """

    @workflow.init
    def __init__(self, input: ConversationInput) -> None:
        state = input.state or CarriedState(
            agent=input.agent, inbox=[SendMessage(text=m) for m in input.messages]
        )
        self._input = input
        self._options = input.options
        self._agent = state.agent
        # The items from conversation-wide index `_base` on; older ones are in
        # the earlier runs `_earlier` (durable_tools.carry).
        self._transcript: list[TranscriptItem] = list(state.transcript)
        self._base = state.base
        self._earlier: list[RunSpan] = list(state.earlier)
        self._carried_needs_model = state.needs_model
        # What the previous run was waiting on when it continued as new at a
        # wait (FOLLOW_VERSIONS_PATCH): answered first in this run.
        self._carried_turn: CarriedTurn | None = state.turn
        self._carried_failure: ModelFailure | None = state.model_failed
        self._idle_until: datetime | None = state.idle_until
        self._carried_last_text = state.last_text
        self._inbox: list[SendMessage] = list(state.inbox)
        self._turns = state.turns
        self._runs = state.runs
        self._usage: dict[str, Usage] = dict(state.usage)
        self._descriptors = list(state.descriptors)
        self._digest = state.digest
        self._early_decisions: dict[str, Decision] = dict(state.early_decisions)
        self._early_answers: dict[str, Answer] = dict(state.early_answers)
        self._rejected: list[RejectedDecision] = list(state.rejected)
        self._answered: set[str] = {
            item.call_id for item in self._transcript if isinstance(item, ToolCallOutput)
        }
        self._approvals: dict[str, PendingApproval] = {}
        self._interactions: dict[str, PendingInteraction] = {}
        self._decisions: dict[str, Decision] = {}
        self._answers: dict[str, Answer] = {}
        self._open: dict[str, ToolCall] = {}
        self._started: set[str] = set()
        self._attempts: dict[str, dict[str, Any]] = {}  # call id -> attempt, duration
        self._paused: str | None = None
        self._resume: Resume | None = None
        self._early_resume: Resume | None = state.early_resume
        self._sleepers = 0  # calls of this turn in a `sleep`
        self._superseded = False
        # Not settled until the loop says where it is (an `await_turn` that a
        # new run's first activation handles before its loop must wait).
        self._state = "starting"
        # Set while the run is about to continue as new: handlers that wait
        # for the loop (`await_turn`) return, so the run never waits on them.
        self._continuing = False
        self._turns_this_run = 0
        self._running = 0
        self._published: tuple[int, tuple[str, ...], str] | None = None
        # Set from the carry too, so a `retry` in the run's first task counts.
        self._model_failed: ModelFailure | None = state.model_failed
        self._retry_requested = state.retry_requested
        # Following new worker versions at durable waits (FOLLOW_VERSIONS_PATCH):
        # `None` until the run's first durable wait decides it.
        self._follow: bool | None = None
        # Set when the turn's waits hand over to the next run (a new version).
        self._moving = False
        self._finishing = False  # a `finish` call of this turn was interpreted
        self._plans: dict[str, PlannedCall] = {}  # the current turn's calls by id
        self._toolkit = ""
        self._sleeps: dict[str, datetime] = {}  # call id -> when its sleep ends
        self._pause_until: datetime | None = None
        self._pause_call: str | None = None
        self._carry_too_large = False
        # Digests of the transcript's prefixes (conversation-wide: seeded with
        # the digest of the items before `_base`), for `transcript_page`, the
        # model activity's `TranscriptDelta` and `_carry`: a function of the
        # transcript alone.
        self._prefix_digests = PrefixDigests(state.base_digest or EMPTY_DIGEST)
        # The delta of the next model turn starts at `_delta_from` (an index
        # into this run's items; None: no delta, e.g. a carried transcript the
        # worker may not hold); items an activity returned are named by
        # `_sources[index]`.
        self._delta_from: int | None = _delta_start(state)
        self._sources: dict[int, DeltaEntry] = {}
        # The agent whose configuration this run last sent whole to the model activity.
        self._sent_agent: str | None = None
        self._produced_calls: set[str] = set()
        # `run_agent` sets it before calling __init__: the loop runs inside
        # another workflow (no continue-as-new, no event stream of its own).
        self.embedded: bool = getattr(self, "embedded", False)
        self._verifications: set[asyncio.Task[None]] = set()
        # The event stream (durable_tools.events): handlers registered here.
        # (Only inside a workflow: unit tests build the class directly.)
        self._stream = (
            WorkflowStream(prior_state=state.stream)
            if workflow.in_workflow() and not self.embedded
            else None
        )
        self._events = (
            self._stream.topic(EVENTS_TOPIC, type=ConversationEvent) if self._stream else None
        )
        # Readers of the stream, for the `followed` query (see `_count_polls`).
        self._polls = 0
        self._last_poll: datetime | None = None
        if self._stream is not None:
            self._count_polls(self._stream)
        if state.turn is not None:
            self._restore_turn(state.turn)

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        """Run the conversation until `finish`, the idle timeout or the turn limit."""
        try:
            with telemetry.conversation_context():
                return await self._loop()
        except (asyncio.CancelledError, ActivityError) as exc:
            # A cancel during the model turn arrives as the activity's error.
            if not is_cancelled_exception(exc):
                raise
            self._close_open_calls()
            self._state = "cancelled"
            self._publish()
            self._event("conversation_finished", outcome="cancelled")
            raise

    async def _loop(self) -> ConversationResult:
        if self._carried_turn is not None:
            # The previous run continued as new while these calls waited.
            carried, self._carried_turn = self._carried_turn, None
            plans = [c.plan for c in carried.calls]
            finish = await self._answer_turn(plans, carried.toolkit, carried)
            if finish is not None:
                return self._result("finished", finish.output)
        while True:
            if not self._inbox and not self._needs_model():
                self._state = "idle"
                self._publish()
                now = workflow.now()
                until = self._idle_until or now + timedelta(seconds=self._options.idle_timeout)
                self._idle_until = until
                try:
                    await self._wait(
                        lambda: self._move_due() or bool(self._inbox),
                        until,
                        "idle: waiting for the next user message",
                    )
                except builtins.TimeoutError:
                    if not self._inbox:
                        return self._result("idle_timeout", self._last_text())
                    # A message arrived with the timer: it is answered, not dropped.
                if self._move_due():  # a new worker version: the next run takes the message
                    await self._continue_as_new()
                    continue
            self._idle_until = None
            if self._should_continue_as_new():
                await self._continue_as_new()
            self._take_inbox()
            if self._turns >= self._options.max_model_turns:
                return self._result("turn_limit", self._last_text())
            agent = self._input.agents[self._agent]
            with telemetry.turn_span(agent.name, agent.model, self._turns + 1):
                if self._carried_failure is None:
                    self._event(
                        "turn_started", turn=self._turns + 1, agent=agent.name, model=agent.model
                    )
                turn = await self._model_turn()
                if isinstance(turn, _Moved):
                    await self._continue_as_new()
                    continue
                if turn.summary is not None:  # the context policy's, for later turns too
                    self._transcript.append(turn.summary)
                    if turn.summary.usage is not None:
                        model = turn.summary.model or turn.model or agent.model
                        self._usage[model] = self._usage.get(model, Usage()) + turn.summary.usage
                self._transcript.append(turn.message)
                self._sources[len(self._transcript) - 1] = DeltaEntry(turn=self._turns)
                self._event(
                    "turn_finished",
                    turn=self._turns,
                    usage=turn.message.usage,
                    calls=len(turn.message.tool_calls),
                    text=turn.message.text[:MAX_EVENT_TEXT] or None,
                )
                if turn.plans:
                    toolkit = turn.toolkit or self._input.agents[self._agent].toolkit
                    finish = await self._answer_turn(list(turn.plans), toolkit, None)
                    if finish is not None:
                        return self._result("finished", finish.output)

    async def _answer_turn(
        self, plans: list[PlannedCall], toolkit: str, carried: CarriedTurn | None
    ) -> Finish | None:
        """Answer a turn's calls; where they move to a new run at a wait, continue as new."""
        outcome = await self._answer_plans(plans, toolkit, carried)
        while isinstance(outcome, _Moved):
            turn = self._snapshot_turn()
            await self._continue_as_new(turn)
            # The carried state did not fit: the calls wait on in this run.
            outcome = await self._answer_plans([c.plan for c in turn.calls], turn.toolkit, turn)
        return outcome

    async def _continue_as_new(self, turn: CarriedTurn | None = None) -> None:
        """Continue as new (never returns), or return when the carried state is too large.

        `turn`: the turn's calls that were waiting when a new worker version
        (or Temporal's suggestion) moved them to the next run (rebuilt once
        every handler finished, so a decision that arrived meanwhile goes
        with its call). Handlers that wait for the loop (`await_turn`, the
        event stream's polls) are handed over first, so the run never waits
        on a handler that waits on it.
        """
        # Event subscribers' long polls are handlers too: release them
        # (they follow the new run), keep the latest events only.
        if self._stream is not None:
            self._stream.detach_pollers()
        # `await_turn` waits for the loop to settle: hand it over to the next
        # run (its caller follows the chain) instead of waiting on it, which
        # would wait on this very loop.
        self._continuing = True
        await workflow.wait_condition(
            lambda: workflow.all_handlers_finished() and not self._verifications
        )
        if self._stream is not None:
            self._stream.truncate(self._stream_end() - RETAINED_EVENTS)
        bounded = not self._options.transcript_in_activity_input and workflow.patched(
            BOUNDED_CARRY_PATCH
        )
        carry = self._carry(
            bounded=bounded, turn=self._snapshot_turn() if turn is not None else None
        )
        size = workflow.payload_converter().to_payloads([carry])[0].ByteSize()
        if size <= _MAX_CARRY_BYTES:
            # A new current version: the next run starts on it.
            upgrade = workflow.info().is_target_worker_deployment_version_changed()
            workflow.continue_as_new(
                carry,
                initial_versioning_behavior=(
                    workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE if upgrade else None
                ),
            )
        # Stay in this run from now on (the carried state only grows).
        self._carry_too_large = True
        self._continuing = False
        self._moving = False
        if self._stream is not None:
            self._stream._detaching = False  # pyright: ignore[reportPrivateUsage]
        workflow.logger.warning(
            "not continuing as new: the carried state is %d bytes, over %d",
            size,
            _MAX_CARRY_BYTES,
        )

    def _take_inbox(self) -> None:
        for message in self._inbox:
            self._transcript.append(UserMessage(text=message.text))
            self._event("message_received", text=message.text[:MAX_EVENT_TEXT])
        self._inbox.clear()

    def _needs_model(self) -> bool:
        if not self._transcript:  # a run that carried no item: the last is before `_base`
            return self._carried_needs_model
        return not isinstance(self._transcript[-1], AssistantMessage)

    def _length(self) -> int:
        """How many items the conversation's transcript has, over every run."""
        return self._base + len(self._transcript)

    def _should_continue_as_new(self) -> bool:
        # Embedded in another workflow (`run_agent`), continuing as new would
        # restart *that* workflow with this loop's input.
        if self._turns_this_run == 0 or self._carry_too_large or self.embedded:
            return False
        every = self._options.continue_as_new_after_turns
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.is_target_worker_deployment_version_changed()
            or (every is not None and self._turns_this_run >= every)
        )

    def _carry(self, *, bounded: bool, turn: CarriedTurn | None = None) -> ConversationInput:
        """The next run's input: the newest items that fit, or (not `bounded`) all of them.

        `turn`: the calls that move to the next run while they wait. What
        else waits durably goes too: a model failure (with a `retry` that
        arrived), an idle wait's end.
        """
        state = CarriedState(
            transcript=self._transcript,
            inbox=self._inbox,
            agent=self._agent,
            turns=self._turns,
            descriptors=[] if workflow.patched(NO_DESCRIPTOR_CARRY_PATCH) else self._descriptors,
            digest=self._digest,
            early_decisions=self._early_decisions,
            early_answers=self._early_answers,
            rejected=self._rejected[-_MAX_REJECTED:],
            runs=self._runs + 1,
            usage=self._usage,
            early_resume=self._early_resume,
            stream=self._stream.get_state() if self._stream is not None else None,
            base=self._base,
            base_digest=self._prefix_digests.digest(self._transcript, 0) if self._base else "",
            earlier=self._earlier,
            needs_model=self._needs_model(),
            last_text=self._carried_last_text,
            delta_from=None if self._delta_from is None else self._base + self._delta_from,
            turn=turn,
            model_failed=self._model_failed,
            retry_requested=self._retry_requested and self._model_failed is not None,
            idle_until=self._idle_until if self._state == "idle" and not self._inbox else None,
        )
        if bounded:
            state = self._bounded(state, workflow.info().run_id)
        return self._input.model_copy(update={"messages": [], "state": state, "agent": self._agent})

    def _bounded(self, state: CarriedState, run_id: str) -> CarriedState:
        """`state` with only the transcript's tail (`durable_tools.carry.tail_start`).

        `run_id` is this run's: the next run lists it among the earlier runs
        when it does not carry every item this run holds.
        """
        transcript, memo = self._transcript, self._prefix_digests
        sizes = [memo.size(transcript, k) for k in range(len(transcript))]
        start = tail_start(transcript, sizes, self._options.carry_transcript_bytes)
        if start == 0:
            return state  # everything this run holds fits: the same earlier runs hold the rest
        tail = transcript[start:]
        last_text = self._last_text()
        has_text = any(isinstance(item, AssistantMessage) and item.text for item in tail)
        earlier = [*self._earlier, RunSpan(run_id=run_id, base=self._base)]
        return state.model_copy(
            update={
                "transcript": tail,
                "base": self._base + start,
                "base_digest": memo.digest(transcript, start),
                "earlier": earlier[-MAX_EARLIER_RUNS:],
                "last_text": "" if has_text else cut_text(last_text),
            }
        )

    def _result(self, status: Any, output: Any) -> ConversationResult:
        # Messages that arrived after the model's last turn (e.g. while it was
        # calling `finish`) are returned with the result, never dropped silently.
        self._state = "finished"
        self._publish()
        self._event("conversation_finished", outcome=str(status))
        if self._stream is not None:
            self._stream.detach_pollers()
        return ConversationResult(
            status=status,
            output=output,
            turns=self._turns,
            transcript_items=self._length(),
            usage=self._usage,
            unanswered_messages=list(self._inbox),
        )

    def _last_text(self) -> str:
        for item in reversed(self._transcript):
            if isinstance(item, AssistantMessage) and item.text:
                return item.text
        return self._carried_last_text

    # ---------------------------------------------------------------- model

    async def _model_turn(self) -> ModelTurn | _Moved:
        """Run the model turn until it succeeds; between failures, wait for an operator.

        Returns `MOVED` when the run continues as new while it waits after a
        failure (a new worker version: the next run waits on, or retries).
        """
        while True:
            failure, self._carried_failure = self._carried_failure, None
            if failure is None:
                try:
                    turn = await self._request_model_turn()
                except ActivityError as exc:
                    # A cancelled conversation cancels its model turn: that ends it.
                    if isinstance(exc.cause, CancelledError) or not workflow.patched(
                        MODEL_FAILED_PATCH
                    ):
                        raise
                    failure = self._model_failure(exc)
                else:
                    self._turns += 1
                    self._turns_this_run += 1
                    if turn.message.usage is not None:
                        model = turn.model or self._input.agents[self._agent].model
                        self._usage[model] = self._usage.get(model, Usage()) + turn.message.usage
                    if turn.descriptors is not None:
                        self._descriptors = turn.descriptors
                        self._digest = turn.digest
                    return turn
            if not await self._wait_after_model_failure(failure):
                self._carried_failure = failure  # waited on after the move
                return MOVED
            self._take_inbox()

    async def _request_model_turn(self) -> ModelTurn:
        agent = self._input.agents[self._agent]
        retry = agent.model_retry or self._options.model_retry
        number = self._turns + 1
        self._state = "model"
        info = workflow.info()
        inline = self._options.transcript_in_activity_input
        # The configuration is in this run's input and its first model request;
        # later requests name it (read with the `agent_config` query by a
        # worker that did not keep it), unless the loop cannot be queried.
        whole = inline or self._agent != self._sent_agent
        request = ModelTurnRequest(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            turn=number,
            upto=self._length(),
            # Whole in the run's first request and after a handoff (the
            # worker keeps it), else by name: no query on the common path.
            agent=agent if whole else None,
            agent_name="" if inline else self._agent,
            known_digest=self._digest,
            transcript=list(self._transcript) if inline else None,
            delta=None if inline else self._transcript_delta(),
        )
        self._sent_agent = self._agent
        return await workflow.execute_activity(
            MODEL_TURN_ACTIVITY,
            request,
            result_type=ModelTurn,
            start_to_close_timeout=timedelta(seconds=self._options.model_timeout),
            schedule_to_close_timeout=timedelta(
                seconds=max(retry.timeout, self._options.model_timeout)
            ),
            heartbeat_timeout=timedelta(seconds=retry.heartbeat_timeout),
            retry_policy=model_retry_policy(retry),
            # Where the agent starts (a run's first turn, a handoff): every
            # summary is a payload the SDK converts in the sandbox, once per
            # pass (about 0.3 ms of worker CPU per turn).
            summary=(
                f"{agent.name}: {agent.model}, turn {number}"
                if agent.model
                else f"{agent.name}, turn {number}"
            )
            if whole
            else None,
        )

    def _transcript_delta(self) -> TranscriptDelta | None:
        """The items since the previous model turn, by reference where an activity made them.

        `None` when a delta would record much that history already holds
        (items given whole over `_MAX_DELTA_INLINE_BYTES`) or the run has not
        sent one yet over a carried transcript: the activity then queries.
        """
        start, end = self._delta_from, len(self._transcript)
        self._delta_from = end
        sources, self._sources = self._sources, {}
        if start is None or start > end:
            return None
        digests, transcript = self._prefix_digests, self._transcript
        entries: list[DeltaEntry] = []
        inline = 0
        for index in range(start, end):
            source = sources.get(index)
            if source is None:
                inline += digests.size(transcript, index)
                if inline > _MAX_DELTA_INLINE_BYTES:
                    return None
                source = DeltaEntry(item=transcript[index])
            entries.append(source)
        return TranscriptDelta(
            start=self._base + start,  # conversation-wide, as the worker's cache
            start_digest=digests.digest(transcript, start),
            entries=entries,
            digest=digests.digest(transcript, end),
        )

    def _model_failure(self, error: ActivityError) -> ModelFailure:
        """Describe a model turn that failed for good; log it and publish `model_failed`."""
        agent = self._input.agents[self._agent]
        failure = describe_model_failure(
            error,
            retry=agent.model_retry or self._options.model_retry,
            turn=self._turns + 1,
            now=workflow.now(),
        )
        workflow.logger.warning("model turn %d failed: %s", failure.turn, failure.message)
        self._event("model_failed", turn=failure.turn, reason=failure.message)
        self._retry_requested = False
        return failure

    async def _wait_after_model_failure(self, failure: ModelFailure) -> bool:
        """Wait for `retry` or a new message (True), or a move to a new run (False)."""
        self._model_failed = failure
        self._state = "model_failed"
        self._publish()
        try:
            await self._wait(
                lambda: self._move_due() or self._retry_requested or bool(self._inbox),
                None,
                "model_failed: waiting for retry or a new message",
            )
        except asyncio.CancelledError:
            self._model_failed = None
            raise
        if self._move_due():
            return False  # `_model_failed` (and a retry) go to the next run, on the new code
        self._model_failed = None
        self._publish()
        return True

    @workflow.signal(name="retry")
    def retry(self, *args: Any) -> None:
        """Run a failed model turn again (state `model_failed`; durable).

        Takes an optional `RetryRequest`; any input (none, several, not JSON)
        counts as a plain retry. Ignored in any other state.
        """
        if self._model_failed is not None:
            self._retry_requested = True

    @workflow.update(name="retry_now")
    def retry_now(self, *args: Any) -> None:
        """Run a failed model turn again; rejected unless the state is `model_failed`.

        Takes an optional `RetryRequest` (any input is accepted).
        """
        self._retry_requested = True

    @retry_now.validator
    def _validate_retry_now(self, *args: Any) -> None:
        if self._model_failed is None:
            raise ApplicationError(
                f"the conversation is not waiting after a model failure (state {self._state!r})",
                type="RetryRejected",
                non_retryable=True,
            )

    # ---------------------------------------------------------------- calls

    async def _answer_plans(
        self, plans: list[PlannedCall], toolkit: str, carried: CarriedTurn | None
    ) -> Finish | _Moved | None:
        """Answer each of a turn's calls exactly once; `MOVED` if waits moved to a new run.

        `carried`: the calls that already wait (their approvals, questions,
        sleeps and pause, with their deadlines and what arrived for them):
        restored by `__init__` in a run that a move started (`_restore_turn`),
        still registered in a run whose continue-as-new did not fit; not
        registered anew.
        """
        # A message that arrived while the model was thinking supersedes this
        # turn's waits exactly as one arriving while they wait does (`send`).
        self._superseded = bool(self._inbox) or (carried is not None and carried.superseded)
        self._state = "tools"
        self._toolkit = toolkit
        self._moving = self._finishing = False
        self._plans = {plan.call.call_id: plan for plan in plans}
        limit = asyncio.Semaphore(self._options.max_concurrent_tool_calls)
        for plan in plans:
            self._open[plan.call.call_id] = plan.call
        restored = {c.plan.call.call_id for c in carried.calls} if carried else set[str]()
        # Register every wait before anything runs, so a decision arriving in
        # the same workflow task finds its call pending.
        for plan in plans:
            if plan.call.call_id in restored:
                continue
            if plan.failure is None and plan.kind == "local" and plan.needs_approval:
                self._register_approval(plan)
            elif plan.failure is None and plan.kind == "interaction":
                self._register_interaction(plan)
        self._publish()
        outcomes = await asyncio.gather(
            *(self._answer(plan, toolkit, limit, plan.call.call_id in restored) for plan in plans)
        )
        self._publish()
        finish: Finish | None = None
        moved = False
        for outcome in outcomes:
            if isinstance(outcome, Handoff):
                self._agent = outcome.agent
            elif isinstance(outcome, Finish) and finish is None:
                finish = outcome
            moved = moved or isinstance(outcome, _Moved)
        return MOVED if moved else finish

    def _restore_turn(self, carried: CarriedTurn) -> None:
        """Make the carried turn's calls wait again as they did in the previous run.

        Called by `__init__`, before any handler of the run's first activation
        runs: a decision, an answer or a `resume` that arrived after the
        previous run moved and before this run's first workflow task finds its
        call waiting (registered by the loop, they were rejected as unknown
        calls, and the resume kept for a later pause).
        """
        self._toolkit = carried.toolkit
        self._superseded = carried.superseded
        self._paused, self._resume = carried.paused, carried.resume
        for wait in carried.calls:
            self._plans[wait.plan.call.call_id] = wait.plan
            self._open[wait.plan.call.call_id] = wait.plan.call
            self._restore(wait)

    def _restore(self, wait: CarriedCall) -> None:
        """Make a carried call wait again as it did in the previous run."""
        call_id = wait.plan.call.call_id
        if wait.approval is not None:
            self._approvals[call_id] = wait.approval
            if wait.decision is not None:
                self._decisions[call_id] = wait.decision
        if wait.interaction is not None:
            self._interactions[call_id] = wait.interaction
            if wait.answer is not None:
                self._answers[call_id] = wait.answer
        if wait.wake_at is not None:
            self._sleeps[call_id] = wait.wake_at
        if wait.pause_until is not None:
            self._pause_until = wait.pause_until

    def _snapshot_turn(self) -> CarriedTurn:
        """The current turn's calls without an output, with what they wait for."""
        calls: list[CarriedCall] = []
        for call_id, plan in self._plans.items():
            if call_id in self._answered:
                continue
            approval = self._approvals.get(call_id)
            interaction = self._interactions.get(call_id)
            calls.append(
                CarriedCall(
                    plan=plan,
                    approval=approval,
                    decision=self._decisions.get(call_id) if approval else None,
                    interaction=interaction,
                    answer=self._answers.get(call_id) if interaction else None,
                    wake_at=self._sleeps.get(call_id),
                    pause_until=self._pause_until if call_id == self._pause_call else None,
                )
            )
        return CarriedTurn(
            toolkit=self._toolkit,
            calls=calls,
            superseded=self._superseded,
            paused=self._paused,
            resume=self._resume,
        )

    # ------------------------------------------------- waits and new versions

    def _follows_versions(self) -> bool:
        """Whether this run continues as new at its durable waits (decided once per run).

        Only on a versioned worker (a pinned run can move to a new version),
        and only in histories with FOLLOW_VERSIONS_PATCH (whose marker is
        recorded here, at the run's first durable wait).
        """
        if self._follow is None:
            self._follow = (
                not self.embedded
                and workflow.info().get_current_deployment_version() is not None
                and workflow.patched(FOLLOW_VERSIONS_PATCH)
            )
        return self._follow

    def _move_due(self) -> bool:
        """A wait's condition: continue as new now (a new target version, or Temporal says so).

        Never in a run's first workflow task (a run a move started waits for
        its next task), never when the carried state was too large.
        """
        if not self._follow or self._carry_too_large:
            return False
        info = workflow.info()
        return info.get_current_history_length() > _FIRST_TASK_EVENTS and (
            info.is_target_worker_deployment_version_changed()
            or info.is_continue_as_new_suggested()
        )

    async def _wait(
        self, condition: Callable[[], bool], until: datetime | None, summary: str
    ) -> None:
        """A durable wait: until `condition` holds, or `until` passes (`TimeoutError`).

        `until` `None`: no deadline. A deadline already past (a wait carried
        across continue-as-new) raises at once unless `condition` holds,
        without a timer. In a run that follows new worker versions
        (`_follows_versions`) the deadline's timer is cut into slices of
        `ConversationOptions.version_check_interval` seconds: Temporal tells a
        run its target version changed only in a workflow task, and a slice
        that ends is one (a wait with no deadline gets slices too). A wait
        that ends early cancels its timer as before, so slices cost history
        events only while nothing else happens. Elsewhere (histories before
        FOLLOW_VERSIONS_PATCH, unversioned workers) one timer, as before.
        """
        interval = self._options.version_check_interval if self._follows_versions() else None
        while True:
            left = None if until is None else until - workflow.now()
            if left is not None and left <= timedelta(0):
                if condition():
                    return
                raise builtins.TimeoutError
            step = left
            if interval is not None and (step is None or step > timedelta(seconds=interval)):
                step = timedelta(seconds=interval)
            if step is None:
                await workflow.wait_condition(condition)
                return
            try:
                await workflow.wait_condition(condition, timeout=step, timeout_summary=summary)
                return
            except builtins.TimeoutError:
                if step == left:
                    raise  # the deadline itself
                # A slice ended in a workflow task of its own: a move may be due now.
                if condition():
                    return

    def _move_now(self) -> bool:
        """A call's wait condition, first: move the turn's waits to a new run?

        Once no call of the turn runs (or waits for a slot) and a move is due,
        every wait of the turn returns `MOVED` in the same workflow task,
        with what arrived for it (a decision, an answer, a resume) carried:
        the new version handles them.
        """
        if not self._moving and self._running == 0 and not self._finishing:
            self._moving = self._move_due()
        return self._moving

    async def _answer(
        self, plan: PlannedCall, toolkit: str, limit: asyncio.Semaphore, resumed: bool = False
    ) -> Handoff | Finish | _Moved | None:
        call = plan.call
        try:
            if plan.failure is not None:
                self._record(plan.failure)
            elif plan.kind == "signal":
                return await self._interpret(plan, resumed)
            elif plan.kind == "interaction":
                answer = await self._traced_answer(plan, resumed)
                if isinstance(answer, _Moved):
                    return answer
                self._record(answer)
            elif plan.kind != "local":
                reason = f"{call.name!r} is a {plan.kind} tool; it is not executed locally"
                self._record(failed(call, "non_local_tool", reason))
            else:
                refusal = (
                    await self._traced_decision(plan, resumed) if plan.needs_approval else None
                )
                if isinstance(refusal, _Moved):
                    return refusal
                if refusal is not None:
                    self._record(refusal)
                else:
                    async with limit:
                        self._record(await self._execute(plan, toolkit))
        except asyncio.CancelledError:
            self._close(call)
            raise
        return None

    def _record(self, result: Ok | Failure) -> None:
        """Append the one output of a call; a second one is dropped."""
        if result.call_id in self._answered:
            return
        self._answered.add(result.call_id)
        self._open.pop(result.call_id, None)
        self._transcript.append(to_tool_call_output(result))
        if result.call_id in self._produced_calls:  # as its tool activity returned it
            self._produced_calls.discard(result.call_id)
            self._sources[len(self._transcript) - 1] = DeltaEntry(call_id=result.call_id)
        outcome = "ok" if isinstance(result, Ok) else result.kind
        telemetry.record_tool_call(result.tool, outcome)
        facts = self._attempts.pop(result.call_id, {})
        self._event(
            "tool_call_finished",
            call_id=result.call_id,
            tool=result.tool,
            outcome=outcome,
            **facts,
        )

    def _close(self, call: ToolCall) -> None:
        if call.call_id in self._started:
            self._record(interrupted(call))
        else:
            self._record(cancelled(call, "the conversation was cancelled before this call started"))

    def _close_open_calls(self) -> None:
        for call in list(self._open.values()):
            self._close(call)

    async def _execute(self, plan: PlannedCall, toolkit: str) -> Ok | Failure:
        call = plan.call
        info = workflow.info()
        self._started.add(call.call_id)
        self._running += 1
        self._event("tool_call_scheduled", call_id=call.call_id, tool=call.name, turn=self._turns)
        scheduled = workflow.now()
        try:
            out = await workflow.execute_activity(
                TOOL_ACTIVITY_PREFIX + call.name,
                ToolActivityInput(
                    toolkit=toolkit,
                    # The arguments are recorded once, in the model turn's
                    # result: the activity finds them by reference (the
                    # `tool_call` query) unless the loop cannot be queried.
                    call=call if self._options.transcript_in_activity_input else None,
                    reference=None
                    if self._options.transcript_in_activity_input
                    else CallReference(
                        call_id=call.call_id, name=call.name, digest=plan.arguments_hash
                    ),
                    workflow_id=info.workflow_id,
                    idempotency_key=f"{info.workflow_id}/{call.call_id}",
                    summary=plan.summary,
                ),
                result_type=ToolActivityResult,
                start_to_close_timeout=timedelta(seconds=plan.timeout)
                if plan.timeout
                else _NO_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=plan.heartbeat_timeout)
                if plan.heartbeat_timeout
                else None,
                retry_policy=RetryPolicy(
                    maximum_attempts=plan.max_attempts,
                    initial_interval=timedelta(seconds=plan.initial_interval),
                    backoff_coefficient=plan.backoff_coefficient,
                    maximum_interval=timedelta(seconds=plan.maximum_interval),
                    non_retryable_error_types=[
                        *plan.non_retryable_error_types,
                        "ConfigurationError",
                        "PayloadsTooLarge",
                    ],
                ),
                # No activity summary: its payload (user metadata) costs the
                # worker three sandbox round trips per workflow task, about
                # 3% of a tool turn's CPU; `summary` in the input says as much.
            )
            self._produced_calls.add(call.call_id)
            self._note_attempts(call, out.attempt, scheduled)
            return out.result
        except ActivityError as exc:
            exhausted = exc.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED
            self._note_attempts(call, plan.max_attempts if exhausted else None, scheduled)
            return self._activity_failure(plan, exc)
        finally:
            self._running -= 1

    def _note_attempts(self, call: ToolCall, attempt: int | None, scheduled: datetime) -> None:
        """Keep the attempt and duration for the call's `tool_call_finished` (events only)."""
        seconds = (workflow.now() - scheduled).total_seconds()
        self._attempts[call.call_id] = {"attempt": attempt, "duration": round(seconds, 3)}

    def _activity_failure(self, plan: PlannedCall, exc: ActivityError) -> Failure:
        call, cause = plan.call, exc.cause
        if isinstance(cause, TimeoutError) and plan.at_most_once:
            return interrupted(
                call,
                "the worker running this call was lost; the call may have reached its "
                "server, and it is not retried because the tool is not idempotent",
            )
        if isinstance(cause, TimeoutError):
            if cause.type == TimeoutType.HEARTBEAT:
                # The tool activity heartbeats by itself while the tool runs.
                return failed(
                    call,
                    "timed_out",
                    f"the worker running the tool sent no heartbeat for "
                    f"{plan.heartbeat_timeout or 0:g} s (it was lost, or the tool blocked its "
                    "event loop); it may have taken effect",
                )
            return timed_out(call, plan.timeout)
        if isinstance(cause, CancelledError):
            return interrupted(call, "the tool activity was cancelled; it may have taken effect")
        if isinstance(cause, ApplicationError):
            attempts = f" after {plan.max_attempts} attempts" if plan.max_attempts > 1 else ""
            kind = cause.type or "Error"
            return execution_error(call, f"{kind}: {cause.message}{attempts}")
        return execution_error(call, str(cause or exc))

    # ------------------------------------------------------------ approvals

    def _deadline(self, plan: PlannedCall) -> float:
        return plan.approval_deadline or self._options.approval_deadline

    def _register_approval(self, plan: PlannedCall) -> None:
        call, now = plan.call, workflow.now()
        self._approvals[call.call_id] = PendingApproval(
            call_id=call.call_id,
            tool=call.name,
            arguments=call.arguments,
            arguments_hash=plan.arguments_hash,
            summary=plan.summary,
            requested_at=now,
            deadline=now + timedelta(seconds=self._deadline(plan)),
            approvers=plan.approvers,
            signed=bool(plan.approvers) or self._options.require_signed_decisions,
        )
        early = self._early_decisions.pop(call.call_id, None)
        if early is None:
            return
        if not workflow.patched(TRUSTED_DECISIONS_PATCH):
            self._accept_or_reject_decision(early)
            return
        # Kept because the conversation accepts early decisions: it still
        # must match this call's digest, signature and approvers.
        task = asyncio.create_task(self._consider_decision(early, "decide"))
        self._verifications.add(task)
        task.add_done_callback(self._verifications.discard)

    async def _traced_decision(self, plan: PlannedCall, resumed: bool) -> Failure | _Moved | None:
        """`_await_decision`, as `approval.*` events on the turn's span and the wait metric.

        `resumed`: the call waited in the previous run, which published its request.
        """
        call, asked = plan.call, workflow.now()
        if resumed:
            asked = self._approvals[call.call_id].requested_at
        else:
            telemetry.approval_event("approval.requested", call.call_id, call.name)
            self._event("approval_requested", call_id=call.call_id, tool=call.name)
        refusal = await self._await_decision(plan)
        if isinstance(refusal, _Moved):
            return refusal
        decision = self._decisions.get(call.call_id)
        outcome = "approved" if refusal is None else refusal.kind
        self._event(
            "approval_decided" if decision is not None else "approval_expired",
            call_id=call.call_id,
            tool=call.name,
            outcome=outcome,
            decided_by=decision.decided_by if decision is not None else None,
        )
        telemetry.approval_event(
            "approval.decided" if decision is not None else f"approval.{outcome}",
            call.call_id,
            call.name,
            **{
                "durable_tools.approval.decision": outcome,
                telemetry.ATTR_APPROVAL_DECIDED_BY: decision.decided_by if decision else None,
            },
        )
        telemetry.record_approval_wait(call.name, outcome, (workflow.now() - asked).total_seconds())
        return refusal

    async def _await_decision(self, plan: PlannedCall) -> Failure | _Moved | None:
        call = plan.call
        seconds = self._deadline(plan)
        self._state = "waiting"
        try:
            await self._wait(
                lambda: self._move_now() or call.call_id in self._decisions or self._superseded,
                self._approvals[call.call_id].deadline,
                f"approval deadline of {plan.summary}",
            )
        except builtins.TimeoutError:
            self._approvals.pop(call.call_id, None)
            return expired(call, f"no decision within {_seconds(seconds)}; the tool did not run")
        finally:
            if not self._moving:
                self._approvals.pop(call.call_id, None)
            self._state = self._calls_state()
            self._publish()
        if self._moving:
            return MOVED  # the pending approval (and any decision) goes to the next run
        decision = self._decisions.get(call.call_id)
        if decision is None:
            return cancelled(call, "a new user message arrived before a decision; not run")
        return decision_outcome(call, decision)

    def _decision_problem(self, decision: Decision) -> str | None:
        """Why `decision` cannot apply now (`_UNKNOWN`: no such call), or `None`.

        Everything but the signature itself, which only the worker's keys
        can check (`_verify`).
        """
        call_id = decision.call_id
        pending = self._approvals.get(call_id)
        if pending is not None:
            if call_id in self._decisions:
                return f"a decision for call {call_id!r} was already received"
            mismatch = digest_problem(call_id, pending.arguments_hash, decision)
            if mismatch is not None:
                return mismatch
            if pending.signed and not decision.signature:
                return f"call {call_id!r} needs a signed decision (key_id and signature)"
            return approver_problem(decision, pending.approvers) if pending.signed else None
        if call_id in self._answered or call_id in self._open:
            return f"call {call_id!r} is not waiting for a decision"
        if call_id in self._early_decisions:
            return f"a decision for call {call_id!r} was already received"
        return _UNKNOWN

    def _reject(
        self, call_id: str, reason: str, by: str, signal: str, at: datetime | None = None
    ) -> None:
        self._event(
            "approval_rejected",
            call_id=clean_text(call_id, _MAX_ID_CHARS),
            reason=clean_text(reason),
            decided_by=clean_text(by, _MAX_ID_CHARS),
            outcome=signal,
        )
        self._rejected.append(
            RejectedDecision(
                call_id=clean_text(call_id, _MAX_ID_CHARS),
                reason=clean_text(reason),
                decided_by=clean_text(by, _MAX_ID_CHARS),
                # When it arrived: after a local activity, `now()` differs on replay.
                received_at=at or workflow.now(),
                signal=signal,
            )
        )
        del self._rejected[:-_MAX_REJECTED]

    def _accept_or_reject_decision(self, decision: Decision) -> None:
        # The rules of histories recorded before TRUSTED_DECISIONS_PATCH.
        problem = self._decision_problem(decision)
        if problem is None:
            self._decisions[decision.call_id] = decision
        elif problem == _UNKNOWN and len(self._early_decisions) < _MAX_EARLY:
            self._early_decisions[decision.call_id] = decision
        else:
            reason = f"unknown call id {decision.call_id!r}" if problem == _UNKNOWN else problem
            self._reject(decision.call_id, reason, decision.decided_by, "decide")

    async def _verify(self, decision: Decision) -> str | None:
        """Check the signature on the worker (a local activity: the verdict is recorded).

        A replay reads the recorded verdict, so rotating keys never changes
        the fate of a decision already received.
        """
        try:
            verdict = await workflow.execute_local_activity(
                VERIFY_DECISION_ACTIVITY,
                DecisionCheck(workflow_id=workflow.info().workflow_id, decision=decision),
                result_type=DecisionVerdict,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"verify decision on {clean_text(decision.call_id, 100)}",
            )
        except ActivityError as exc:
            return f"the signature could not be verified: {exc.cause or exc}"
        return None if verdict.valid else f"signature rejected: {verdict.reason}"

    async def _checked(self, decision: Decision) -> str | None:
        """All checks of a decision on a pending call, the signature included."""
        problem = self._decision_problem(decision)
        pending = self._approvals.get(decision.call_id)
        if problem is None and pending is not None and pending.signed:
            problem = await self._verify(decision)
            # The call may have been decided, superseded or expired meanwhile.
            problem = problem or self._decision_problem(decision)
        if problem == _UNKNOWN:
            return f"call {decision.call_id!r} is no longer waiting for a decision"
        return problem

    async def _consider_decision(self, decision: Decision, signal: str) -> None:
        received = workflow.now()
        problem = self._decision_problem(decision)
        if problem == _UNKNOWN:
            if self._options.accept_early_decisions and len(self._early_decisions) < _MAX_EARLY:
                self._early_decisions[decision.call_id] = decision
                return
            problem = (
                f"unknown call id {decision.call_id!r}: no such call is waiting for a decision "
                "(decisions for calls not yet pending are off; "
                "ConversationOptions.accept_early_decisions)"
            )
        elif problem is None:
            problem = await self._checked(decision)
        if problem is None:
            self._decisions[decision.call_id] = decision
        else:
            self._reject(decision.call_id, problem, decision.decided_by, signal, received)

    async def decide(self, decision: Decision) -> None:
        """The `decide` signal: approve or deny a gated call (durable).

        Stored by the server even with no worker running. A decision that
        fails its checks, or names a call that is not pending (unless the
        conversation accepts early decisions), is recorded as rejected (see
        `pending`). A call that needs a signed decision has its signature
        checked by the `verify_decision` local activity. Routed by `_signal`.
        """
        if not workflow.patched(TRUSTED_DECISIONS_PATCH):
            self._accept_or_reject_decision(decision)
            return
        await self._consider_decision(decision, "decide")

    async def decide_now(self, decision: Decision) -> DecisionReceipt:
        """The `decide_now` update: decide a pending call, acknowledged at once.

        Routed by `_update` after `_validate_update` checked everything but
        the signature; a signature is checked here (a local activity, so the
        verdict is recorded) and a bad one fails the update, recorded in
        `pending().rejected`.

        Raises:
            ApplicationError: Type `DecisionRejected`: the signature does not
                verify, or the call was decided or ended while it was checked.
        """
        pending = self._approvals.get(decision.call_id)
        if pending is not None and pending.signed:
            received = workflow.now()
            problem = await self._checked(decision)
            if problem is not None:
                self._reject(decision.call_id, problem, decision.decided_by, "decide_now", received)
                raise ApplicationError(
                    clean_text(problem), type="DecisionRejected", non_retryable=True
                )
        self._decisions[decision.call_id] = decision
        return DecisionReceipt(call_id=decision.call_id)

    # --------------------------------------------------------- interactions

    def _register_interaction(self, plan: PlannedCall) -> None:
        call, now = plan.call, workflow.now()
        self._interactions[call.call_id] = PendingInteraction(
            call_id=call.call_id,
            tool=call.name,
            arguments=call.arguments,
            arguments_hash=plan.arguments_hash,
            answer_schema=plan.answer_schema,
            requested_at=now,
            deadline=now + timedelta(seconds=self._deadline(plan)),
        )
        early = self._early_answers.pop(call.call_id, None)
        if early is not None:
            self._accept_or_reject_answer(early)

    async def _traced_answer(self, plan: PlannedCall, resumed: bool) -> Ok | Failure | _Moved:
        """`_await_answer`, published as `question_asked` / `question_answered` events.

        `resumed`: the call waited in the previous run, which published the question.
        """
        call = plan.call
        if not resumed:
            self._event("question_asked", call_id=call.call_id, tool=call.name)
        result = await self._await_answer(plan)
        if isinstance(result, _Moved):
            return result
        outcome = "ok" if isinstance(result, Ok) else result.kind
        self._event("question_answered", call_id=call.call_id, tool=call.name, outcome=outcome)
        return result

    async def _await_answer(self, plan: PlannedCall) -> Ok | Failure | _Moved:
        call = plan.call
        seconds = self._deadline(plan)
        self._state = "waiting"
        try:
            await self._wait(
                lambda: self._move_now() or call.call_id in self._answers or self._superseded,
                self._interactions[call.call_id].deadline,
                f"answer deadline of {plan.summary}",
            )
        except builtins.TimeoutError:
            self._interactions.pop(call.call_id, None)
            return expired(call, f"no answer within {_seconds(seconds)}")
        finally:
            if not self._moving:
                self._interactions.pop(call.call_id, None)
            self._state = self._calls_state()
            self._publish()
        if self._moving:
            return MOVED  # the pending question (and any answer) goes to the next run
        answer = self._answers.get(call.call_id)
        if answer is None:
            return cancelled(call, "a new user message arrived before an answer")
        return Ok(call_id=call.call_id, tool=call.name, value=answer.value)

    def _answer_problem(self, answer: Answer) -> str | None:
        call_id = answer.call_id
        pending = self._interactions.get(call_id)
        if pending is None:
            if call_id in self._answered or call_id in self._open:
                return f"call {call_id!r} is not waiting for an answer"
            if call_id in self._early_answers:
                return f"an answer for call {call_id!r} was already received"
            return _UNKNOWN
        if call_id in self._answers:
            return f"an answer for call {call_id!r} was already received"
        if answer.arguments_hash != pending.arguments_hash:
            return (
                f"arguments hash does not match call {call_id!r}: the digest covers the "
                "tool name, the call id and the arguments shown"
            )
        if pending.answer_schema is not None:
            # Formats by a fixed stdlib checker: the verdict, and so the replay,
            # does not depend on the worker's installed packages.
            return check_answer(pending.answer_schema, answer.value)
        return None

    def _accept_or_reject_answer(self, answer: Answer) -> None:
        problem = self._answer_problem(answer)
        early = self._options.accept_early_decisions or not workflow.patched(
            TRUSTED_DECISIONS_PATCH
        )
        if problem is None:
            self._answers[answer.call_id] = answer
        elif problem == _UNKNOWN and early and len(self._early_answers) < _MAX_EARLY:
            self._early_answers[answer.call_id] = answer
        else:
            reason = f"unknown call id {answer.call_id!r}" if problem == _UNKNOWN else problem
            if problem == _UNKNOWN and not early:
                reason += (
                    ": no such call is waiting for an answer (answers for calls not yet "
                    "pending are off; ConversationOptions.accept_early_decisions)"
                )
            self._reject(answer.call_id, reason, answer.answered_by, "answer")

    def answer(self, answer: Answer) -> None:
        """The `answer` signal: answer an interaction call (durable).

        Invalid answers are recorded as rejected. Routed by `_signal`.
        """
        self._accept_or_reject_answer(answer)

    def answer_now(self, answer: Answer) -> DecisionReceipt:
        """The `answer_now` update: answer a pending interaction, acknowledged at once.

        Routed by `_update` after `_validate_update` checked it.
        """
        self._answers[answer.call_id] = answer
        return DecisionReceipt(call_id=answer.call_id)

    # --------------------------------------------------------- signal tools

    async def _interpret(
        self, plan: PlannedCall, resumed: bool = False
    ) -> Handoff | Finish | _Moved | None:
        call, action = plan.call, plan.action
        if isinstance(action, Sleep):
            wake_at = self._sleeps.setdefault(
                call.call_id, workflow.now() + timedelta(seconds=action.seconds)
            )
            self._sleepers += 1
            self._state = "sleeping"
            try:
                await self._wait(
                    lambda: self._move_now() or self._superseded,
                    wake_at,
                    f"sleep {_seconds(action.seconds)}",
                )
                woke = "woken early by a new user message"
                if self._moving:
                    return MOVED  # the sleep's end goes to the next run
            except builtins.TimeoutError:
                woke = f"slept {_seconds(action.seconds)}"
            finally:
                self._sleepers -= 1
                self._state = self._calls_state()
            self._sleeps.pop(call.call_id, None)
            self._record(Ok(call_id=call.call_id, tool=call.name, value=woke))
        elif isinstance(action, Pause):
            if not resumed:
                self._paused = action.reason or "paused"
                # A `resume` that arrived before this pause registered applies to it.
                self._resume, self._early_resume = self._early_resume, None
                if action.seconds is not None:
                    self._pause_until = workflow.now() + timedelta(seconds=action.seconds)
            self._pause_call = call.call_id
            self._state = "paused"
            self._publish()
            if not resumed:
                self._event("conversation_paused", call_id=call.call_id, reason=self._paused)
            timed_out = False
            try:
                await self._wait(
                    lambda: self._move_now() or self._resume is not None or self._superseded,
                    self._pause_until,
                    f"pause of {plan.summary}",
                )
            except builtins.TimeoutError:
                timed_out = True
            finally:
                if not (self._moving and not timed_out):
                    self._paused = self._pause_until = self._pause_call = None
                self._state = self._calls_state()
                self._publish()
            if timed_out:
                seconds = action.seconds or 0
                value = f"nobody resumed the conversation within {_seconds(seconds)}"
            elif self._moving:
                return MOVED  # the pause (and any resume) goes to the next run
            else:
                value = self._resume.message if self._resume else "resumed by a new user message"
            self._record(Ok(call_id=call.call_id, tool=call.name, value=value))
        elif isinstance(action, Handoff):
            if action.agent not in self._input.agents:
                known = ", ".join(sorted(self._input.agents))
                reason = f"no agent named {action.agent!r}; known agents: {known}"
                self._record(failed(call, "input_validation_error", reason))
                return None
            self._record(
                Ok(call_id=call.call_id, tool=call.name, value=f"handed off to {action.agent}")
            )
            return action
        elif isinstance(action, Finish):
            self._finishing = True  # the conversation ends with this turn: no move
            self._record(Ok(call_id=call.call_id, tool=call.name, value="finished"))
            return action
        elif isinstance(action, Reply):
            self._record(Ok(call_id=call.call_id, tool=call.name, value=action.value))
        else:
            self._record(failed(call, "execution_error", "signal tool produced no action"))
        return None

    def resume(self, resume: Resume) -> None:
        """The `resume` signal: resume a conversation paused by the `pause` signal tool.

        Routed by `_signal`; no input (or `null`) means `Resume()`. A resume
        that arrives while nothing is paused (e.g. while the model is still
        deciding to pause) is kept and applies to the next pause; a later one
        replaces it.
        """
        if self._paused is not None:
            self._resume = resume
        else:
            self._early_resume = resume

    def send(self, message: SendMessage) -> None:
        """The `send` signal: add a user message; it wakes an idle conversation.

        While approvals, answers, a pause or a sleep are pending, the message
        supersedes them: they are answered `cancelled` (or woken) and the model
        sees the new message next.
        """
        self._inbox.append(message)
        if self._approvals or self._interactions or self._paused is not None or self._sleepers:
            self._superseded = True

    # ------------------------------------------------------ raw input routing
    # Handlers that take input are dynamic: the SDK hands over raw payloads,
    # which never fail to decode, and `decode_input` decodes them here, so no
    # input (none, several, any encoding, any shape) fails a workflow task.

    def _decoded_signal(self, name: str, args: Sequence[RawValue]) -> Any:
        converter = workflow.payload_converter()
        model, default = _SIGNAL_INPUTS[name]
        decoded = decode_input(args, model, converter, default=default)
        if isinstance(decoded, Undecodable):
            reason = f"undecodable {name} signal: {decoded.reason}"
            self._reject(decoded.call_id, reason, decoded.sent_by, name)
            workflow.logger.warning("rejected a %s signal: %s", name, decoded.reason)
            return None
        return decoded

    @workflow.signal(dynamic=True)
    async def _signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Route the `decide`, `answer`, `send` and `resume` signals.

        An input that cannot be decoded into the signal's model is recorded in
        `pending().rejected` with the reason; a signal of another name is
        logged and ignored.
        """
        if name not in _SIGNAL_INPUTS:
            workflow.logger.warning("ignoring signal %r: no such signal", clean_text(name, 100))
            return
        decoded = self._decoded_signal(name, args)
        if isinstance(decoded, Decision):
            await self.decide(decoded)
        elif isinstance(decoded, Answer):
            self.answer(decoded)
        elif isinstance(decoded, SendMessage):
            self.send(decoded)
        elif isinstance(decoded, Resume):
            self.resume(decoded)

    def _decoded_update(self, name: str, args: Sequence[RawValue]) -> Decision | Answer:
        """The update's input, or `ApplicationError` `DecisionRejected` saying why not."""
        if name not in _UPDATE_INPUTS:
            known = ", ".join(sorted(_UPDATE_INPUTS))
            raise ApplicationError(
                f"no update named {clean_text(name, 100)!r}; known updates: {known}",
                type="UnknownUpdate",
                non_retryable=True,
            )
        decoded = decode_input(args, _UPDATE_INPUTS[name], workflow.payload_converter())
        if isinstance(decoded, Undecodable):
            raise ApplicationError(
                f"undecodable {name} update: {decoded.reason}",
                type="DecisionRejected",
                non_retryable=True,
            )
        return decoded

    @workflow.update(dynamic=True)
    async def _update(self, name: str, args: Sequence[RawValue]) -> DecisionReceipt:
        """Route the `decide_now` and `answer_now` updates (validated by `_validate_update`)."""
        decoded = self._decoded_update(name, args)
        if isinstance(decoded, Decision):
            return await self.decide_now(decoded)
        return self.answer_now(decoded)

    @_update.validator
    def _validate_update(self, name: str, args: Sequence[RawValue]) -> None:
        """Reject an update (nothing recorded) whose input cannot be decoded or fails its checks.

        Raises:
            ApplicationError: Type `DecisionRejected` (the client raises
                `DecisionRejected`) with the reason, or `UnknownUpdate` for a
                name other than `decide_now` / `answer_now`.
        """
        decoded = self._decoded_update(name, args)
        if isinstance(decoded, Decision):
            problem = self._decision_problem(decoded)
        else:
            problem = self._answer_problem(decoded)
        if problem is not None:
            reason = f"unknown call id {decoded.call_id!r}" if problem == _UNKNOWN else problem
            raise ApplicationError(clean_text(reason), type="DecisionRejected", non_retryable=True)

    @workflow.query(dynamic=True)
    def _query(
        self, name: str, args: Sequence[RawValue]
    ) -> list[TranscriptItem] | TranscriptPage | AgentConfig | ToolCall | None:
        """Route the activities' queries: `transcript_slice`, `agent_config`, `tool_call`.

        `transcript_slice`: an argument with `known_digest` gets a
        `TranscriptPage`, any other a list; an undecodable argument reads the
        first page. `agent_config` (argument: a name) answers this run's
        configuration of that agent, `tool_call` (argument: a call id) the
        open call of that id; either answers `None` for what it does not have.

        Raises:
            ApplicationError: For a query name this workflow does not have
                (the query fails, the workflow does not).
        """
        if name == "agent_config":
            return self._input.agents.get(_text_argument(args))
        if name == "tool_call":
            return self._open.get(_text_argument(args))
        if name != "transcript_slice":
            raise ApplicationError(
                f"no query named {clean_text(name, 100)!r}; known queries: "
                "agent_config, followed, history, pending, status, tool_call, transcript_slice",
                type="UnknownQuery",
            )
        request = decode_input(args, TranscriptSlice, workflow.payload_converter())
        if isinstance(request, Undecodable):
            request = TranscriptSlice(
                start=self._base, upto=self._length(), max_bytes=_DEFAULT_PAGE_BYTES
            )
        if request.known_digest is not None:
            return self.transcript_page(request)
        return self.transcript_slice(request)

    # -------------------------------------------------------------- queries

    @workflow.query(name="history")
    def history(self, *_ignored: object) -> list[TranscriptItem]:
        """The items this run holds (reconciled between turns); arguments are ignored.

        After continue-as-new a run holds the conversation's items from its
        `base` on (`TranscriptPage.base`); `Conversations.history` reads
        every item across runs.
        """
        return list(self._transcript)

    def transcript_slice(self, request: TranscriptSlice) -> list[TranscriptItem]:
        """The `transcript_slice` query without `known_digest`: a list, as older callers expect.

        Items `start` to `upto` (conversation-wide indices), paged by
        `max_bytes`; none when `start` is before this run's `base` (those
        items are in earlier runs, which only a `TranscriptPage` names).
        Routed by `_query`.
        """
        if request.start < self._base:
            return []
        items = self._transcript[request.start - self._base : request.upto - self._base]
        if request.max_bytes is not None:
            size = 0
            for n, item in enumerate(items):
                size += len(item.model_dump_json().encode())  # bytes, not characters
                if n and size > request.max_bytes:
                    return items[:n]
        return items

    def transcript_page(self, request: TranscriptSlice) -> TranscriptPage:
        """The `transcript_slice` query with `known_digest`: only what the caller lacks.

        Items `start` to `upto` (conversation-wide indices, paged by
        `max_bytes`) when the caller's `known_digest` is the digest of the
        conversation's items `[0, start)` (or is `""`: unchecked), else none
        (`matched=False`). A `start` before this run's `base` gets none
        either, with the earlier runs that hold those items (`earlier`).
        Costs what it returns: digests and sizes are memoized per item
        (`PrefixDigests`). Routed by `_query`.
        """
        transcript, memo, base = self._transcript, self._prefix_digests, self._base
        length = self._length()
        start = request.start - base
        if start < 0:
            return TranscriptPage(matched=False, length=length, base=base, earlier=self._earlier)
        if start > len(transcript):
            return TranscriptPage(matched=False, length=length, base=base)
        digest = memo.digest(transcript, start)
        if request.known_digest and digest != request.known_digest:
            return TranscriptPage(matched=False, digest=digest, length=length, base=base)
        end, size = start, 0
        stop = max(start, min(request.upto - base, len(transcript)))
        while end < stop:
            size += memo.size(transcript, end)
            if end > start and request.max_bytes is not None and size > request.max_bytes:
                break
            end += 1
        return TranscriptPage(
            matched=True,
            items=transcript[start:end],
            digest=memo.digest(transcript, end),
            length=length,
            base=base,
        )

    @workflow.update(name="await_turn")
    async def await_turn(self, *args: Any) -> TurnOutcome:
        """Wait until the conversation settles after more than `after_turns` model turns.

        Takes an optional `{"after_turns": n}` (default 0; any other input
        counts as 0). Settled: the model answered (state `idle`), a call waits
        for a person, the loop is paused, the model failed, or the
        conversation ended. When the run continues as new first, it answers
        state `continued` (with this run's `run_id`) instead of waiting: the
        caller asks the next run (`Conversations.wait_turn` follows the chain).
        `Conversations.start_and_wait` sends it with the start
        (update-with-start).
        """
        after = _after_turns(args)
        await workflow.wait_condition(
            lambda: self._continuing or (self._turns > after and self._settled())
        )
        if self._continuing:
            return TurnOutcome(
                state="continued",
                pending=self.pending(),
                turns=self._turns,
                run_id=workflow.info().run_id,
            )
        reply = self._last_text() if self._state in ("idle", "finished") else None
        return TurnOutcome(
            state=self._state,
            reply=reply,
            pending=self.pending(),
            turns=self._turns,
            run_id=workflow.info().run_id,
        )

    def _settled(self) -> bool:
        return (
            self._state in ("idle", "paused", "model_failed", "finished", "cancelled")
            or bool(self._approvals)
            or bool(self._interactions)
            or self._paused is not None
        )

    def _calls_state(self) -> str:
        """The `status` state while a turn's calls are open: what they wait on, if anything.

        Calls of one turn wait side by side (a sleep, a pause, approvals):
        when one wait ends, the state is what the others still wait on.
        """
        if self._approvals or self._interactions:
            return "waiting"
        if self._paused is not None:
            return "paused"
        if self._sleepers:
            return "sleeping"
        return "tools"

    @workflow.query(name="pending")
    def pending(self, *_ignored: object) -> PendingState:
        """Approvals and interactions waiting, the pause reason, rejected inputs."""
        return PendingState(
            approvals=list(self._approvals.values()),
            interactions=list(self._interactions.values()),
            paused=self._paused,
            rejected=list(self._rejected),
            model_failed=self._model_failed,
        )

    @workflow.query(name="status")
    def status(self, *_ignored: object) -> ConversationStatus:
        """What the loop is doing now, with counts; arguments are ignored."""
        return ConversationStatus(
            state=self._state,
            agent=self._agent,
            turns=self._turns,
            runs=self._runs,
            pending_approvals=len(self._approvals),
            pending_interactions=len(self._interactions),
            running_tools=self._running,
            transcript_items=self._length(),
            reconciled=is_reconciled(self._transcript),
            model_failed=self._model_failed,
            usage=self._usage,
            unanswered_messages=list(self._inbox) if self._state == "finished" else [],
        )

    # ----------------------------------------------------------- visibility

    def _event(self, kind: Any, **fields: Any) -> None:
        """Publish a `ConversationEvent` to the conversation's stream (durable_tools.events)."""
        if self._events is None or not (workflow.in_workflow() and workflow.instance() is self):
            return  # a dropped instance's `finally` blocks (see `_publish`)
        # Encoded here, as `json/plain` (what the pydantic converter writes),
        # from the fields the loop sets, without their None: a tool turn
        # publishes four events, and building, validating and serializing a
        # `ConversationEvent` through the converter's type probes (each a
        # sandboxed `isinstance`) was a measurable part of a turn's CPU.
        # Readers validate what they read (`ConversationEvent`, which leaves
        # unset fields None); a field it does not have is a bug here.
        unknown = fields.keys() - _EVENT_FIELDS
        if unknown:
            raise TypeError(f"ConversationEvent has no field {sorted(unknown)}")
        event = {"kind": kind, "at": workflow.now()}
        event.update((name, value) for name, value in fields.items() if value is not None)
        self._events.publish(Payload(metadata=_JSON_PLAIN, data=to_json(event)))

    def _count_polls(self, stream: WorkflowStream) -> None:
        """Wrap the stream's poll update so the `followed` query knows about readers.

        Only state the `followed` query reads changes: no command, so
        recorded histories replay unchanged.
        """
        poll = stream._on_poll  # pyright: ignore[reportPrivateUsage]
        validate = stream._validate_poll  # pyright: ignore[reportPrivateUsage]

        async def counted(payload: PollInput) -> PollResult:
            self._polls += 1
            try:
                return await poll(payload)
            finally:
                self._polls -= 1
                if workflow.in_workflow() and workflow.instance() is self:
                    self._last_poll = workflow.now()

        workflow.set_update_handler(_STREAM_POLL, counted, validator=validate)  # pyright: ignore[reportUnknownMemberType]

    @workflow.query(name="followed")
    def followed(self) -> bool:
        """Whether a reader follows the event stream: a poll waits, or one ended lately.

        "Lately" is within `FOLLOW_WINDOW` seconds of the workflow's clock.
        The model activity asks before it publishes text deltas (see
        `activities/activity_events.py`).
        """
        if self._polls:
            return True
        last = self._last_poll
        return last is not None and (workflow.now() - last).total_seconds() <= FOLLOW_WINDOW

    def _stream_end(self) -> int:
        stream = self._stream
        return stream._on_offset() if stream is not None else 0  # pyright: ignore[reportPrivateUsage]

    def _publish(self) -> None:
        """Update search attributes and current details when what is pending changes."""
        if not (workflow.in_workflow() and workflow.instance() is self):
            # A dropped instance's coroutines are closed by the garbage collector
            # (GeneratorExit at their await) and the `finally` blocks calling
            # this run outside this workflow's event loop (e.g. after a worker
            # shutdown without eviction): touch no workflow API then.
            return
        kinds = tuple(
            kind
            for kind, present in (
                ("approval", bool(self._approvals)),
                ("interaction", bool(self._interactions)),
                ("pause", self._paused is not None),
                ("model_failed", self._model_failed is not None),
            )
            if present
        )
        failed = self._model_failed
        count = len(self._approvals) + len(self._interactions) + (failed is not None)
        published = (count, kinds, failed.message if failed is not None else "")
        if self._published == published:
            return
        self._published = published
        if self._options.search_attributes and not workflow.patched(NO_SEARCH_ATTRIBUTES_PATCH):
            workflow.upsert_search_attributes(  # pyright: ignore[reportUnknownMemberType]
                [PENDING_COUNT.value_set(count), PENDING_KINDS.value_set(list(kinds))]
            )
        lines = [
            f"- approval: `{a.summary}` (until {a.deadline:%Y-%m-%d %H:%M} UTC)"
            for a in self._approvals.values()
        ]
        lines += [f"- question: `{i.tool}` call `{i.call_id}`" for i in self._interactions.values()]
        if self._paused is not None:
            lines.append(f"- paused: {self._paused}")
        if failed is not None:
            lines.append(
                f"- model_failed (turn {failed.turn}, {failed.type}): {failed.message}\n"
                f"  run it again: `durable-tools retry {workflow.info().workflow_id}`"
            )
        workflow.set_current_details("**Pending**\n" + "\n".join(lines) if lines else "")


class _Moved:
    """The sentinel a wait returns when its call moves to the next run (`MOVED`)."""


MOVED = _Moved()


def _delta_start(state: CarriedState) -> int | None:
    """Where a run's first `TranscriptDelta` starts, as an index into its items.

    Where the previous run's next delta would have started, when the run
    holds that item (`CarriedState.delta_from`); with no carried items, 0;
    else `None` (the first turn reads by query).
    """
    if state.delta_from is not None and state.delta_from >= state.base:
        return state.delta_from - state.base
    return None if state.transcript else 0


def _after_turns(args: Sequence[Any]) -> int:
    """`after_turns` of an `await_turn` input, 0 for anything else."""
    first: Any = args[0] if args else None
    fields = cast(dict[str, Any], first) if isinstance(first, dict) else {}
    value = fields.get("after_turns")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _text_argument(args: Sequence[RawValue]) -> str:
    """The one string argument of a query, `""` for anything else (never raises)."""
    if len(args) != 1:
        return ""
    try:
        value: Any = workflow.payload_converter().from_payload(args[0].payload, str)
    except Exception:
        return ""
    return value if isinstance(value, str) else ""
