"""The data a durable conversation exchanges: inputs, decisions, answers, queries.

Every workflow input, signal, update and query of `AgentWorkflow` takes one of
these pydantic models and returns one, so fields can be added without breaking
recorded histories (Temporal's samples-python habit). They are shared by the
workflow, the activities and `durable_tools.client`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from temporalio.contrib.workflow_streams import WorkflowStreamState

from durable_tools.approvals import Decision
from durable_tools.arguments import summarize_call
from durable_tools.context import ContextPolicy
from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import ConfigurationError
from durable_tools.results import Failure, ToolCall, ToolResult
from durable_tools.signals import SignalAction
from durable_tools.transcript import AssistantMessage, ContextSummary, TranscriptItem, Usage
from durable_tools.transcript_digest import CheckedTranscript

__all__ = [
    "DEFAULT_APPROVAL_DEADLINE",
    "DEFAULT_IDLE_TIMEOUT",
    "AgentConfig",
    "Answer",
    "CallReference",
    "CarriedState",
    "ConversationInput",
    "ConversationOptions",
    "ConversationResult",
    "ConversationStatus",
    "DecisionReceipt",
    "DeltaEntry",
    "ModelFailure",
    "ModelRequest",
    "ModelRetry",
    "ModelTurn",
    "ModelTurnRequest",
    "PendingApproval",
    "PendingInteraction",
    "PendingState",
    "PlannedCall",
    "RejectedDecision",
    "Resume",
    "RetryRequest",
    "RunSpan",
    "SendMessage",
    "ToolActivityInput",
    "ToolActivityResult",
    "TranscriptDelta",
    "TranscriptPage",
    "TranscriptSlice",
    "TurnOutcome",
    "conversation_input",
]

DEFAULT_APPROVAL_DEADLINE: float = 7 * 24 * 3600.0
"""Seconds an approval or interaction may wait before it expires (7 days)."""

DEFAULT_IDLE_TIMEOUT: float = 7 * 24 * 3600.0
"""Seconds a conversation waits for the next user message before it ends (7 days)."""


class ModelRetry(BaseModel):
    """How the model activity is retried and watched.

    Retryable failures (HTTP 408/409/429/5xx, connection errors, timeouts)
    are retried with exponential backoff (a provider's `retry-after` replaces
    the backoff for that attempt) until `max_attempts` or `timeout`; then, or
    at once for a non-retryable failure, the conversation waits in state
    `model_failed` for an operator (`retry`, `send` or `cancel`).

    Attributes:
        max_attempts: Attempts of one model turn, the first included (default 10).
        timeout: Seconds all attempts of one model turn may take together
            (default 1800: 30 minutes; Temporal's schedule-to-close timeout;
            never less than `ConversationOptions.model_timeout`).
        initial_interval: Seconds before the first retry (default 1).
        maximum_interval: Most seconds between retries (default 60).
        heartbeat_timeout: Seconds without a heartbeat after which an attempt
            counts as lost (its worker died) and is retried (default 30);
            the activity heartbeats every third of it.
    """

    model_config = ConfigDict(frozen=True)

    max_attempts: int = Field(default=10, ge=1)
    timeout: float = Field(default=1800.0, gt=0)
    initial_interval: float = Field(default=1.0, gt=0)
    maximum_interval: float = Field(default=60.0, gt=0)
    heartbeat_timeout: float = Field(default=30.0, gt=0)


class ModelFailure(BaseModel):
    """Why a model turn failed and the conversation waits (state `model_failed`).

    Attributes:
        message: The error's message: one line of at most 1,000 characters
            (the worker's log has the full text).
        type: The error's type: a provider error (`ProviderBadRequest`,
            `ProviderUnavailable`, `ContextLengthExceeded`, ...; see
            `durable_tools.models.errors`), `ConfigurationError` (no such
            toolkit or model on the worker, an agent it does not declare, an
            override the agent does not allow, an offline model or a script
            it refuses), or a timeout
            (`StartToClose`, `Heartbeat`, `ScheduleToClose`).
        retries_exhausted: True when a retryable error ran out of attempts or
            time; False when the error is not retryable.
        turn: The model turn that failed (from 1).
        failed_at: When (workflow time, UTC).
    """

    message: str
    type: str = ""
    retries_exhausted: bool = False
    turn: int
    failed_at: datetime


class RetryRequest(BaseModel):
    """Input of the `retry` signal and `retry_now` update (optional).

    Attributes:
        requested_by: Who asked for the retry.
    """

    requested_by: str = ""


class AgentConfig(BaseModel):
    """The agent a conversation runs under, as the client asked for it.

    The *requested* form of an agent (`durable_tools.agents` tells the story:
    declared `Agent` → requested `AgentConfig` → `ResolvedAgent`). It is
    workflow input recorded in history: its field names and JSON shape never
    change.

    On a worker that declares agents (`App(agents=...)`, see
    `durable_tools.agents`), `name` picks a declared agent and every other
    field is a request the worker checks on each model turn: empty fields
    take the agent's own, anything else must be the agent's own value or an
    override it allows, or the turn fails with a `ConfigurationError`. On a
    worker that declares none (development mode), the configuration is used
    as it is and needs `model` and `toolkit`.

    Attributes:
        name: The agent's name (what `handoff` refers to).
        instructions: System instructions for the model (`""`: the agent's).
        model: Name of a model adapter registered on the worker, or a model
            spec the worker resolves (`"openai:MODEL"`, `"anthropic:MODEL"`,
            and on workers that allow offline models `"test"` and
            `"scripted:FILE"`; see `durable_tools.models`); `""`: the agent's.
        toolkit: Name of a toolkit registered on the worker (`""`: the agent's).
        settings: Provider settings passed to the model on every turn
            (e.g. `{"temperature": 0.2, "max_tokens": 1024}`); default none.
        variables: Values of the agent's instructions template variables
            (`{"customer_name": "Ana"}`); default none.
        model_retry: How this agent's model turns are retried; `None` (the
            default): `ConversationOptions.model_retry`.
        context: What the model sees of a long transcript
            (`durable_tools.context`); `None` (the default): the agent's
            policy, in development mode `ContextPolicy()` (the whole
            transcript; summarize and retry once on a context-length error).
            On a worker that declares agents, it must be the agent's policy
            or one of its `AgentOverrides.contexts`.
    """

    model_config = ConfigDict(frozen=True)

    name: str = "default"
    instructions: str = ""
    model: str = ""
    toolkit: str = ""
    settings: dict[str, Any] = Field(default_factory=dict[str, Any])
    variables: dict[str, str] = Field(default_factory=dict[str, str])
    model_retry: ModelRetry | None = None
    context: ContextPolicy | None = None


class ConversationOptions(BaseModel):
    """Limits and deadlines of one conversation.

    Attributes:
        approval_deadline: Seconds an approval or interaction waits before it
            expires, unless the tool sets its own (default 7 days).
        idle_timeout: Seconds to wait for the next user message before the
            conversation completes (default 7 days).
        max_concurrent_tool_calls: Most tool activities pending at once
            (default 100; Temporal wedges a workflow at 2,000 pending
            activities and recommends at most 500).
        max_model_turns: Model requests before the conversation stops with
            status `turn_limit` (default 1,000), a guard against loops.
        continue_as_new_after_turns: Continue-as-new after this many model
            turns in one run even if Temporal does not suggest it yet (`None`:
            only when `is_continue_as_new_suggested()`).
        model_timeout: Start-to-close seconds of one model request (default 300).
        model_retry: How model turns are retried and when the conversation
            stops retrying and waits in state `model_failed` (default: 10
            attempts or 30 minutes, 30 s heartbeat timeout); an agent's
            `AgentConfig.model_retry` wins.
        search_attributes: Upsert the `DurableToolsPendingCount` /
            `DurableToolsPendingKinds` search attributes (they must be
            registered on the namespace; see docs/operations.md).
        transcript_in_activity_input: Pass the whole transcript as the model
            activity's input instead of reading it through a query. History
            then grows with the square of the conversation: only for
            comparison (bench/history_growth.py).
        accept_early_decisions: Keep a decision or answer for a call that is
            not pending yet (up to 1,000) and apply it when the call becomes
            pending with the same digest (default False: such a decision is
            rejected and recorded, since nobody could have seen the call).
        require_signed_decisions: Accept only decisions signed with a key the
            worker holds (`sign_decision`; default False). Calls of tools
            with approvers require signed decisions either way.
        carry_transcript_bytes: At continue-as-new, the newest transcript
            items that fit in this many bytes of JSON are carried to the new
            run (default 32 KiB, at most 384 KiB, so the whole carried state
            stays under `durable_tools.carry.CARRY_LIMIT_BYTES`); older items
            are read back from the earlier runs (docs/architecture.md,
            "Continue-as-new"). The carry is recorded twice per
            continue-as-new; the model activity needs none of it (it reads
            what it has not cached by query), so the default is small.
        version_check_interval: Seconds between checks for a new worker
            version while the conversation waits durably (idle, an approval,
            a question, a sleep, a pause, `model_failed`) on a versioned
            worker (Worker Deployments): Temporal tells a run that a new
            version became current only in its next workflow task, so the
            wait's timer is cut into slices this long (default 3,600: about
            5 history events an hour of waiting with nothing happening; a
            wait that ends earlier costs nothing more); `None`: only a
            signal or update wakes it. At each check (and
            whenever a signal or update arrives) a run whose target version
            changed, or whose history Temporal suggests continuing, continues
            as new at that wait, keeping every pending approval, question,
            sleep, pause and deadline (docs/operations.md, "Upgrades").
            Unversioned workers never slice a timer.
    """

    model_config = ConfigDict(frozen=True)

    approval_deadline: float = DEFAULT_APPROVAL_DEADLINE
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_concurrent_tool_calls: int = Field(default=100, ge=1, le=1000)
    max_model_turns: int = Field(default=1000, ge=1)
    continue_as_new_after_turns: int | None = Field(default=None, ge=1)
    model_timeout: float = 300.0
    model_retry: ModelRetry = Field(default_factory=ModelRetry)
    search_attributes: bool = True
    transcript_in_activity_input: bool = False
    accept_early_decisions: bool = False
    require_signed_decisions: bool = False
    carry_transcript_bytes: int = Field(default=32 * 1024, ge=0, le=384 * 1024)
    version_check_interval: float | None = Field(default=3600.0, ge=1.0)


class PendingApproval(BaseModel):
    """A tool call waiting for a person's decision.

    Attributes:
        call_id: The call.
        tool: Its tool name.
        arguments: The raw argument text, as the model sent it.
        arguments_hash: The call's digest, what a decision must carry
            (`call_digest` over the tool name, call id and canonical arguments).
        summary: `tool(arg=…)`, truncated, for a UI.
        requested_at: When the call started waiting (workflow time, UTC).
        deadline: When it expires.
        approvers: Who may decide (`group:NAME`, `user:ID`); empty: anyone
            who can signal the conversation.
        signed: Whether only a signed decision counts (the tool has approvers,
            or the conversation requires signed decisions).
    """

    call_id: str
    tool: str
    arguments: str
    arguments_hash: str
    summary: str
    requested_at: datetime
    deadline: datetime
    approvers: list[str] = Field(default_factory=list[str])
    signed: bool = False


class PendingInteraction(BaseModel):
    """A call of an interaction tool waiting for an answer.

    Attributes:
        call_id: The call.
        tool: Its tool name.
        arguments: The raw argument text (the question).
        arguments_hash: What an answer must carry.
        answer_schema: JSON Schema the answer must satisfy (`None`: any).
        requested_at: When the call started waiting.
        deadline: When it expires.
    """

    call_id: str
    tool: str
    arguments: str
    arguments_hash: str
    answer_schema: dict[str, Any] | None = None
    requested_at: datetime
    deadline: datetime


class RejectedDecision(BaseModel):
    """A signal input that was recorded and never applied.

    Either a decision or answer that failed its checks, or any `decide` /
    `answer` / `send` / `resume` input that could not be decoded (no input,
    several inputs, a payload that is not JSON, another shape).

    Attributes:
        call_id: The call it named (`""` when it named none, e.g. an
            undecodable payload or a `send`).
        reason: Why it was rejected (at most 500 characters), e.g.
            `arguments hash does not match call 'r1'` or
            `undecodable decide signal: no input; expected one Decision`.
        decided_by: Who sent it, when the input said so.
        received_at: When the workflow received it.
        signal: The signal that carried it (`decide`, `answer`, `send`,
            `resume`); `""` in records made before this field existed.
    """

    call_id: str
    reason: str
    decided_by: str = ""
    received_at: datetime
    signal: str = ""


class PendingState(BaseModel):
    """What a conversation waits for (the `pending` query).

    Attributes:
        approvals: Calls waiting for a decision.
        interactions: Calls waiting for an answer.
        paused: The reason, when a `pause` signal tool waits for `resume`.
        rejected: Decisions and answers that failed their checks (latest 100).
        model_failed: Why the model turn failed, while the conversation waits
            for `retry`, a new message or `cancel`.
    """

    approvals: list[PendingApproval] = Field(default_factory=list[PendingApproval])
    interactions: list[PendingInteraction] = Field(default_factory=list[PendingInteraction])
    paused: str | None = None
    model_failed: ModelFailure | None = None
    rejected: list[RejectedDecision] = Field(default_factory=list[RejectedDecision])


class Answer(BaseModel):
    """An answer to an interaction tool call.

    Strict like `Decision`: each field has exactly its JSON type and unknown
    fields are refused.

    Attributes:
        call_id: The call answered.
        value: The answer (JSON), validated against the tool's answer schema.
        arguments_hash: The call's digest as the answerer saw it
            (`PendingInteraction.arguments_hash`, see `call_digest`).
        answered_by: Who answered.
        answered_at: When, as the answerer's clock says.
    """

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    call_id: str
    value: Any = None
    arguments_hash: str
    answered_by: str = ""
    answered_at: datetime | None = None


class SendMessage(BaseModel):
    """A user message for the conversation (the `send` signal).

    Attributes:
        text: The message.
        sent_by: Who sent it.
    """

    text: str
    sent_by: str = ""


class Resume(BaseModel):
    """Resume a conversation paused by the `pause` signal tool.

    Attributes:
        message: Given to the model as the output of the `pause` call.
        resumed_by: Who resumed it.
    """

    message: str = "resumed"
    resumed_by: str = ""


class DecisionReceipt(BaseModel):
    """What the `decide_now` / `answer_now` updates return.

    Attributes:
        call_id: The call.
        accepted: Always True (a rejected update raises instead).
        state: `"queued"`: the call will run or be answered on the next
            workflow task.
    """

    call_id: str
    accepted: bool = True
    state: str = "queued"


class PlannedCall(BaseModel):
    """One call of a model turn, planned on the worker (recorded in history).

    Attributes:
        call: The call.
        kind: The tool's kind, or `"unknown"`.
        failure: Set when the call is answered before it runs (unknown tool,
            invalid arguments, provider tool).
        needs_approval: Whether it waits for a decision.
        approval_deadline: Seconds it may wait (tool override), or `None`.
        approvers: Who may decide it (the tool's `approvers`); empty: anyone.
        arguments_hash: The call's digest, `call_digest(name, call_id, arguments)`
            (histories recorded before it hold a hash of the arguments alone).
        summary: `tool(arg=…)`, truncated, shown as the activity summary.
        timeout: Start-to-close seconds of one attempt (local tools).
        heartbeat_timeout: Heartbeat timeout in seconds (local tools).
        max_attempts: Attempts including the first (local tools).
        initial_interval: Seconds before the first retry.
        backoff_coefficient: Multiplier between retries.
        maximum_interval: Cap on the retry interval, seconds.
        non_retryable_error_types: Error type names never retried.
        action: The decoded action of a signal tool.
        answer_schema: The answer schema of an interaction tool.
    """

    call: ToolCall
    kind: Literal["local", "provider", "signal", "interaction", "unknown"]
    failure: Failure | None = None
    needs_approval: bool = False
    approval_deadline: float | None = None
    approvers: list[str] = Field(default_factory=list[str])
    arguments_hash: str
    summary: str
    timeout: float | None = None
    heartbeat_timeout: float | None = None
    max_attempts: int = 1
    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float = 60.0
    non_retryable_error_types: list[str] = Field(default_factory=list[str])
    action: SignalAction | None = None
    answer_schema: dict[str, Any] | None = None
    at_most_once: bool = False


class TranscriptSlice(BaseModel):
    """Argument of the `transcript_slice` query the model activity uses.

    Attributes:
        upto: Transcript items `[start, upto)` are returned.
        start: First item to return (default 0).
        max_bytes: Page size: return only as many items from `start` as fit
            in this many bytes of JSON (at least one), so a transcript over
            Temporal's 2 MB query-result limit is read in pages. `None`: all.
        known_digest: The digest of items `[0, start)` the caller already
            holds (`durable_tools.transcript_digest`; `EMPTY_DIGEST` for
            `start=0`). When set, the answer is a `TranscriptPage` (the items
            only if the workflow's prefix has this digest) instead of a list;
            `""`: a `TranscriptPage` whatever the prefix (a reader that holds
            nothing before `start`, e.g. `Conversations.history`); `None`
            (the default, what older callers send): a list, empty when
            `start` is before the run's `base`.

    `start` and `upto` are conversation-wide indices: a run continued as new
    holds items from its `base` on (`TranscriptPage.base`).
    """

    upto: int
    start: int = 0
    max_bytes: int | None = None
    known_digest: str | None = None


class RunSpan(BaseModel):
    """An earlier run of a conversation and the first transcript item it holds.

    Attributes:
        run_id: The run's id (a closed run: a worker replays it to answer
            `transcript_slice`).
        base: The conversation-wide index of the first item it holds; it
            holds every item up to the next run's `base` (and a few more).
    """

    run_id: str
    base: int = Field(ge=0)


class TranscriptPage(BaseModel):
    """Answer of `transcript_slice` to a caller that sent `known_digest`.

    Attributes:
        matched: Whether the workflow's items `[0, start)` have the caller's
            `known_digest` (always, for `known_digest=""`). When not,
            `items` is empty: with `start < base` the caller asks an earlier
            run (`earlier`), else its copy is stale (another conversation
            with this workflow id, or a bug) and it reads again from 0.
        items: Items from `start`, paged by `max_bytes` (at least one item
            when any is asked for and `matched`).
        digest: The digest of items `[0, start + len(items))` when `matched`,
            else of `[0, start)` (`""` when `start` is past the transcript).
        length: How many items the conversation's transcript has now (over
            every run).
        base: The conversation-wide index of the first item this run holds;
            the items before it are in earlier runs (0 in runs recorded
            before continue-as-new carried a bounded tail).
        earlier: When `start < base` (then `matched` is False): the earlier
            runs that hold the items before `base`, oldest first (at most
            `durable_tools.carry.MAX_EARLIER_RUNS`; ask the oldest one for
            older runs).
    """

    matched: bool
    items: list[TranscriptItem] = Field(default_factory=list[TranscriptItem])
    digest: str = ""
    length: int = 0
    base: int = 0
    earlier: list[RunSpan] = Field(default_factory=list[RunSpan])


class DeltaEntry(BaseModel):
    """One item of a `TranscriptDelta`: the item itself, or where the worker finds it.

    Exactly one field is set.

    Attributes:
        item: The item, for what no activity returned (user messages,
            outputs the workflow made: denials, expiries, signal tools).
        turn: The assistant message the model activity returned for this
            model turn (from 1).
        call_id: The output of this call, as its tool activity returned it.
    """

    item: TranscriptItem | None = None
    turn: int | None = None
    call_id: str | None = None


class TranscriptDelta(BaseModel):
    """The items appended since the previous model turn of the run, mostly by reference.

    A worker that holds the run's items `[0, start)` with digest
    `start_digest` (`durable_tools.transcript_digest`) and remembers what
    its own activities returned rebuilds items `[start, start + len(entries))`
    without a query; it uses them only when the whole prefix then has
    `digest`, and reads with the `transcript_slice` query otherwise.

    Attributes:
        start: Index of the first item of the delta.
        start_digest: Digest of items `[0, start)`.
        entries: One entry per item.
        digest: Digest of items `[0, start + len(entries))`.
    """

    start: int
    start_digest: str
    entries: list[DeltaEntry]
    digest: str


class ModelTurnRequest(BaseModel):
    """Input of the model activity (small: it never holds the transcript).

    Attributes:
        workflow_id: The conversation's workflow id.
        run_id: The run whose transcript to read.
        turn: The model turn number in the conversation (from 1).
        upto: How many transcript items the model sees.
        agent: The agent configuration of this turn, as the client asked
            for it; the activity resolves it against the worker's agents
            (`durable_tools.agents.resolve_agent`).
        known_digest: Digest of the descriptors the workflow already recorded;
            the activity returns descriptors only when they differ.
        transcript: The whole transcript, only when
            `ConversationOptions.transcript_in_activity_input` is set.
        agent_name: The name of the agent configuration in the run's input
            (`ConversationInput.agents`), set when `agent` is not: the
            configuration is recorded once per run, in the run's input, and
            the activity reads it with the `agent_config` query (once per run
            and worker: it is cached).
        delta: The items appended since the run's previous model turn, by
            reference where an activity returned them, so a worker that ran
            the previous turn needs no query (`None`: read by query).

    `agent` is set in a run's first request and after a handoff (the worker
    keeps it by `agent_name`), in requests recorded before configurations were
    read by name, and for loops embedded in another workflow (which cannot be
    queried by these names); `agent_name` otherwise.
    """

    workflow_id: str
    run_id: str
    turn: int
    upto: int
    agent: AgentConfig | None = None
    known_digest: str = ""
    transcript: list[TranscriptItem] | None = None
    agent_name: str = ""
    delta: TranscriptDelta | None = None


_MISSING = object()
_EMPTY_PLAN_DEFAULTS: dict[str, Any] = {
    name: field.get_default(call_default_factory=True)
    for name, field in PlannedCall.model_fields.items()
    if not field.is_required() and field.get_default(call_default_factory=True) in (None, [], False)
}
"""`PlannedCall` fields whose default is empty: left out of a recorded turn when empty."""


class ModelTurn(BaseModel):
    """Result of the model activity: the turn and the plan of its calls.

    Attributes:
        message: The model's turn.
        plans: One `PlannedCall` per tool call, in order.
        descriptors: The descriptors the model saw, when they changed.
        digest: Digest of the descriptors the model saw.
        model: The model the worker resolved for this turn (`""` in
            histories recorded before agents were resolved on the worker:
            then `AgentConfig.model`).
        toolkit: The toolkit the worker resolved; the turn's tool calls run
            in it (`""`: `AgentConfig.toolkit`).
        summary: A summary of the transcript's first items made for this
            turn by the agent's context policy (`durable_tools.context`);
            the workflow records it right before `message`. `None`: none made.
    """

    message: AssistantMessage
    plans: list[PlannedCall] = Field(default_factory=list[PlannedCall])
    descriptors: list[ToolDescriptor] | None = None
    digest: str = ""
    model: str = ""
    toolkit: str = ""
    summary: ContextSummary | None = None

    # Each call's arguments are recorded once (issue 12, "slim per-turn
    # records"): a plan whose call is the message's call of the same id is
    # serialized with `call_id` alone and gets its call back from the message
    # when decoded. Histories recorded before this hold whole calls: they
    # decode as they are.

    @model_serializer(mode="wrap")
    def _calls_once(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        calls = {call.call_id: call for call in self.message.tool_calls}
        plans = cast(list[dict[str, Any]], data.get("plans") or [])
        for plan, planned in zip(plans, self.plans, strict=True):
            if calls.get(planned.call.call_id) == planned.call:
                del plan["call"]
                plan["call_id"] = planned.call.call_id
                if planned.summary == summarize_call(planned.call):
                    del plan["summary"]  # made again from the call when decoded
            for name in [n for n, v in plan.items() if v is None or v == [] or v is False]:
                if _EMPTY_PLAN_DEFAULTS.get(name, _MISSING) == plan[name]:
                    del plan[name]  # decoded back to its default
        return data

    @model_validator(mode="before")
    @classmethod
    def _calls_from_message(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cast(dict[str, Any], data)
        plans, message = fields.get("plans"), fields.get("message")
        if not isinstance(plans, list) or not any(
            isinstance(p, dict) and "call" not in p for p in cast(list[Any], plans)
        ):
            return fields
        if isinstance(message, AssistantMessage):
            raw_calls: list[Any] = list(message.tool_calls)
        elif isinstance(message, dict):
            raw_calls = list(cast(dict[str, Any], message).get("tool_calls") or [])
        else:
            return fields  # validation reports the message itself
        calls: dict[Any, Any] = {}
        for call in raw_calls:
            key = (
                call.call_id
                if isinstance(call, ToolCall)
                else (cast(dict[str, Any], call).get("call_id") if isinstance(call, dict) else None)
            )
            calls.setdefault(key, call)
        resolved: list[Any] = []
        for plan in cast(list[Any], plans):
            if isinstance(plan, dict) and "call" not in plan:
                fields_of_plan = dict(cast(dict[str, Any], plan))
                call_id = fields_of_plan.pop("call_id", None)
                if isinstance(call_id, str) and call_id in calls:
                    fields_of_plan["call"] = call = calls[call_id]
                    if "summary" not in fields_of_plan:
                        try:
                            fields_of_plan["summary"] = summarize_call(
                                ToolCall.model_validate(call)
                            )
                        except ValidationError:
                            pass  # validation reports the call itself
                plan = fields_of_plan  # a plan naming no call fails validation
            resolved.append(plan)
        return {**fields, "plans": resolved}


class ModelRequest(BaseModel):
    """What a model adapter receives.

    Attributes:
        model: The model name from the agent configuration.
        instructions: System instructions.
        transcript: The reconciled transcript. Read it, do not change it,
            and copy it to keep it past the call: the model activity passes
            the worker's cached list itself, which later turns extend.
        tools: The descriptors to offer.
        turn: The model turn number (from 1).
        workflow_id: The conversation's workflow id.
        settings: Provider settings from the agent configuration
            (`AgentConfig.settings`: temperature, max_tokens, ...).
        purpose: `"turn"` (default): the conversation's model turn;
            `"summary"`: the context policy's summarizing call (its
            transcript is one user message holding the text to summarize,
            and no tools are offered).
    """

    model: str
    instructions: str = ""
    transcript: list[TranscriptItem]
    tools: list[ToolDescriptor]
    turn: int = 1
    workflow_id: str = ""
    settings: dict[str, Any] = Field(default_factory=dict[str, Any])
    purpose: Literal["turn", "summary"] = "turn"

    @field_validator("transcript", mode="wrap")
    @classmethod
    def _checked_once(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # A transcript the activity read was validated when it was decoded:
        # validating thousands of items again each turn made turns grow; so
        # did copying them. The activity makes a new one for each request.
        if isinstance(value, CheckedTranscript):
            return value
        return handler(value)


class CallReference(BaseModel):
    """A tool call named without its arguments (`ToolActivityInput.reference`).

    Attributes:
        call_id: The call's id.
        name: The tool name.
        digest: `durable_tools.approvals.call_digest(name, call_id, arguments)`,
            the planned call's `arguments_hash`: arguments found elsewhere are
            used only when they have this digest.
    """

    call_id: str
    name: str
    digest: str


class ToolActivityInput(BaseModel):
    """Input of a tool activity (activity type `tool.<name>`).

    Attributes:
        toolkit: Registered toolkit name.
        call: The call.
        workflow_id: The conversation's workflow id.
        idempotency_key: `"{workflow_id}/{call_id}"`, stable across retries,
            worker restarts and continue-as-new.
        max_result_bytes: Results larger than this (JSON bytes) become Failure
            `output_too_large` instead of an oversized payload.
        reference: The call without its arguments, set instead of `call`: the
            arguments are recorded once, in the model turn's result, and the
            activity takes them from what its worker planned or from the
            `tool_call` query, checked against `reference.digest`.
        summary: The call as `tool(arg=…)`, at most 120 characters: what
            `temporal workflow show` and Temporal's UI show of a tool
            activity's arguments (`""` in histories recorded before it,
            which gave it as the activity's summary).

    Exactly one of `call` and `reference` is set.
    """

    toolkit: str
    call: ToolCall | None = None
    workflow_id: str
    idempotency_key: str
    max_result_bytes: int = 1_500_000
    reference: CallReference | None = None
    summary: str = ""


class CarriedCall(BaseModel):
    """A call of the current turn that waited durably when its run continued as new.

    Attributes:
        plan: The call's plan, as the model activity made it.
        approval: Its pending approval (with the original `requested_at` and
            `deadline`), for a call waiting for a decision.
        decision: A decision already accepted for it (the next run applies it).
        interaction: Its pending question, for an interaction call.
        answer: An answer already accepted for it.
        wake_at: When its `sleep` ends (a sleep signal tool).
        pause_until: When its `pause` ends without a `resume` (`None`: never).
    """

    plan: PlannedCall
    approval: PendingApproval | None = None
    decision: Decision | None = None
    interaction: PendingInteraction | None = None
    answer: Answer | None = None
    wake_at: datetime | None = None
    pause_until: datetime | None = None


class CarriedTurn(BaseModel):
    """The part of a turn still waiting when its run continued as new at a wait.

    Attributes:
        toolkit: The toolkit the turn's calls run in.
        calls: The calls without an output yet, in the turn's order.
        superseded: Whether a new user message had superseded the waits.
        paused: The pause reason when a `pause` call waited.
        resume: A `resume` that had arrived for it.
    """

    toolkit: str
    calls: list[CarriedCall] = Field(default_factory=list[CarriedCall])
    superseded: bool = False
    paused: str | None = None
    resume: Resume | None = None


class CarriedState(BaseModel):
    """State carried across continue-as-new.

    Attributes:
        transcript: The newest items of the reconciled transcript, from
            conversation-wide index `base` (the whole transcript in runs
            recorded before the carry was bounded; `durable_tools.carry`).
        inbox: User messages not yet given to the model.
        agent: Current agent configuration name.
        turns: Model turns so far in the conversation.
        descriptors: Descriptors the model saw last (empty in runs recorded
            since `NO_DESCRIPTOR_CARRY_PATCH`: nothing reads them; `digest`
            is what the model activity compares).
        digest: Their digest.
        early_decisions: Decisions that arrived before their call was pending.
        early_answers: Answers that arrived before their call was pending.
        rejected: Rejected decisions (latest 100).
        runs: Runs so far (continue-as-new count + 1).
        usage: Tokens so far, per model name (`AgentConfig.model`).
        early_resume: A `resume` that arrived while nothing was paused; it
            applies to the next pause.
        stream: The event stream's retained events and publisher state
            (`durable_tools.events`); `None` in runs recorded before it.
        base: Conversation-wide index of `transcript[0]` (default 0).
        base_digest: Digest of the items `[0, base)`
            (`durable_tools.transcript_digest`; `""` when `base` is 0).
        earlier: The earlier runs holding the items before `base`, oldest
            first (the latest `durable_tools.carry.MAX_EARLIER_RUNS`).
        needs_model: Whether the model answers next although `transcript`
            is empty (the last item, before `base`, is not an assistant
            message). Read only while the run's transcript is empty.
        last_text: The last assistant text when no assistant message with
            text is in `transcript` (cut to `durable_tools.carry.
            MAX_LAST_TEXT_BYTES`): the reply a `turn_limit` result returns.
        delta_from: Conversation-wide index where the next model turn's
            `TranscriptDelta` starts (the items after the previous model
            turn), `None` when unknown.
        turn: The calls of the current turn that were waiting durably when
            the run continued as new at a wait (a new worker version); the
            next run answers them first.
        model_failed: The failure the conversation was waiting after
            (state `model_failed`) when the run continued as new.
        retry_requested: Whether a `retry` had arrived for it.
        idle_until: When the idle wait the run continued as new in ends
            (the idle timeout counts from the wait's start, not the run's).
    """

    transcript: list[TranscriptItem] = Field(default_factory=list[TranscriptItem])
    inbox: list[SendMessage] = Field(default_factory=list[SendMessage])
    agent: str
    turns: int = 0
    descriptors: list[ToolDescriptor] = Field(default_factory=list[ToolDescriptor])
    digest: str = ""
    early_decisions: dict[str, Decision] = Field(default_factory=dict[str, Decision])
    early_answers: dict[str, Answer] = Field(default_factory=dict[str, Answer])
    rejected: list[RejectedDecision] = Field(default_factory=list[RejectedDecision])
    runs: int = 1
    usage: dict[str, Usage] = Field(default_factory=dict[str, Usage])
    early_resume: Resume | None = None
    stream: WorkflowStreamState | None = None
    base: int = Field(default=0, ge=0)
    base_digest: str = ""
    earlier: list[RunSpan] = Field(default_factory=list[RunSpan])
    needs_model: bool = False
    last_text: str = ""
    delta_from: int | None = None
    turn: CarriedTurn | None = None
    model_failed: ModelFailure | None = None
    retry_requested: bool = False
    idle_until: datetime | None = None


class ConversationInput(BaseModel):
    """Input of `AgentWorkflow`.

    Attributes:
        agents: Agent configurations by name (at least the starting one).
        agent: Name of the configuration to start with.
        messages: Initial user messages.
        options: Limits and deadlines.
        state: Carried state after continue-as-new (`None` on the first run).
    """

    agents: dict[str, AgentConfig]
    agent: str
    messages: list[str] = Field(default_factory=list[str])
    options: ConversationOptions = Field(default_factory=ConversationOptions)
    state: CarriedState | None = None


class ConversationStatus(BaseModel):
    """The `status` query.

    Attributes:
        state: What the loop is doing: `starting` (a run's first workflow
            task, before its loop ran), `idle`, `model`, `tools`, `waiting`,
            `sleeping`, `paused`, `model_failed` (waiting for `retry`, a new
            message or `cancel`), `finished`, `cancelled`.
        agent: Current agent configuration name.
        turns: Model turns so far.
        runs: Workflow runs so far (continue-as-new + 1).
        pending_approvals: Calls waiting for a decision.
        pending_interactions: Calls waiting for an answer.
        running_tools: Tool activities in flight.
        transcript_items: Length of the conversation's transcript over every
            run (`Conversations.history` reads it across runs).
        reconciled: Whether every call in the run's transcript has its output.
        model_failed: Why the model turn failed, in state `model_failed`.
        usage: Tokens in and out per model name, over the whole conversation
            (every run; turns whose provider reports no usage count 0).
        unanswered_messages: Once the conversation has ended (`state`
            `finished`), the user messages that arrived after the model's last
            turn; they were never given to the model. Empty before.
    """

    state: str
    agent: str
    turns: int
    runs: int
    pending_approvals: int
    pending_interactions: int
    running_tools: int
    transcript_items: int
    reconciled: bool
    model_failed: ModelFailure | None = None
    usage: dict[str, Usage] = Field(default_factory=dict[str, Usage])
    unanswered_messages: list[SendMessage] = Field(default_factory=list[SendMessage])


class ConversationResult(BaseModel):
    """What `AgentWorkflow` returns.

    Attributes:
        status: `finished` (the `finish` tool), `idle_timeout` (no user message
            within `idle_timeout`) or `turn_limit`.
        output: The `finish` output, or the last assistant text.
        turns: Model turns in the whole conversation.
        transcript_items: Length of the final transcript over every run (read
            it with `Conversations.history`).
        usage: Tokens in and out per model name over the whole conversation.
        unanswered_messages: User messages that arrived after the model's
            last turn (e.g. while it called `finish`); the model never saw
            them. Kept here so they are not lost; a message sent after the
            run closed is refused by Temporal (`workflow execution already
            completed`).
    """

    status: Literal["finished", "idle_timeout", "turn_limit"]
    output: Any = None
    turns: int
    transcript_items: int
    usage: dict[str, Usage] = Field(default_factory=dict[str, Usage])
    unanswered_messages: list[SendMessage] = Field(default_factory=list[SendMessage])


class ToolActivityResult(BaseModel):
    """Result of a tool activity: exactly one tool result.

    Attributes:
        result: `Ok` or `Failure`.
        attempt: The activity attempt that produced it (1-based; 1 in
            histories recorded before the field existed).
    """

    result: ToolResult
    attempt: int = 1


class TurnOutcome(BaseModel):
    """What the `await_turn` update returns: where the conversation settled.

    It settles when the model has answered (`reply`), something waits for a
    person (`pending` has approvals or questions, or `paused`), the model
    failed (`pending.model_failed`), or the conversation ended.

    Attributes:
        state: The `status` state then (`idle`, `waiting`, `paused`,
            `model_failed`, `finished`, ...), or `continued`: the run
            continued as new before it settled, and the next run answers
            (`Conversations.wait_turn` asks it).
        reply: The model's last text when it answered (state `idle` or
            `finished`), else `None`.
        pending: What waits for a person (the `pending` query's value).
        turns: Model turns so far.
        run_id: The run that answered (`""` from workers before it).
    """

    state: str
    reply: str | None = None
    pending: PendingState
    turns: int
    run_id: str = ""


def conversation_input(
    agent: AgentConfig,
    *,
    message: str | None = None,
    handoffs: Sequence[AgentConfig] = (),
    options: ConversationOptions | None = None,
) -> ConversationInput:
    """The `AgentWorkflow` input for a new conversation.

    Args:
        agent: The agent configuration to start with.
        message: The first user message (default none: it waits for `send`).
        handoffs: Other configurations `handoff` may switch to.
        options: Limits and deadlines (default `ConversationOptions()`).

    Raises:
        ConfigurationError: Two agent configurations share a name.
    """
    agents: dict[str, AgentConfig] = {}
    for config in (agent, *handoffs):
        if config.name in agents:
            raise ConfigurationError(f"two agent configurations are named {config.name!r}")
        agents[config.name] = config
    return ConversationInput(
        agents=agents,
        agent=agent.name,
        messages=[message] if message else [],
        options=options or ConversationOptions(),
    )
