"""Private wire types: the workflow's input and what it exchanges with its activities.

Not part of the public API (clients use `durable_tools.conversation` and
`durable_tools.client`); names and fields here may change between versions
as long as recorded histories still decode. Every type is a pydantic model
recorded in workflow history: the `AgentWorkflow` input (`ConversationInput`,
with the state carried across continue-as-new), the model activity's request
and result (`ModelTurnRequest`, `ModelTurn` with its `PlannedCall`s and the
`TranscriptDelta` it is sent), and the tool activity's input and result
(`durable_tools._tool_wire`, re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, Literal, cast

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from temporalio.contrib.workflow_streams import WorkflowStreamState

from durable_tools._delta_wire import DeltaEntry, TranscriptDelta
from durable_tools._tool_wire import (
    LOCAL_RESULT_BYTES,
    MAX_LOCAL_CALLS_PER_TURN,
    PAYLOAD_BUDGET_BYTES,
    RECORD_CONFIG,
    TOOL_ACTIVITY_PREFIX,
    CallReference,
    ToolActivityInput,
    ToolActivityResult,
    without_nones,
)
from durable_tools.approvals import Decision
from durable_tools.arguments import summarize_call
from durable_tools.budgets import Budget, BudgetState
from durable_tools.conversation import (
    AgentConfig,
    Answer,
    ConversationOptions,
    MessagesSupersede,
    ModelFailure,
    PendingApproval,
    PendingInteraction,
    RejectedDecision,
    Resume,
    RunSpan,
    SendMessage,
)
from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import ConfigurationError
from durable_tools.grants import Grant
from durable_tools.input_requests import InputProgress
from durable_tools.policy_document import InstalledPolicy, PolicyRef
from durable_tools.policy_verdict import PolicyDisagreement, PolicyVerdict
from durable_tools.results import Failure, ToolCall
from durable_tools.signals import SignalAction
from durable_tools.tool_tasks import TaskProgress
from durable_tools.transcript import AssistantMessage, ContextSummary, TranscriptItem, Usage
from durable_tools.webhooks import WebhookDelivery

__all__ = [
    "AGENT_CONFIG_QUERY",
    "MODEL_TURN_ACTIVITY",
    "POLICY_VERSION_QUERY",
    "TOOL_ACTIVITY_PREFIX",
    "TOOL_CALL_QUERY",
    "TRANSCRIPT_QUERY",
    "VERIFY_DECISION_ACTIVITY",
    "LOCAL_RESULT_BYTES",
    "MAX_LOCAL_CALLS_PER_TURN",
    "PAYLOAD_BUDGET_BYTES",
    "RECORD_CONFIG",
    "CallReference",
    "CarriedCall",
    "CarriedState",
    "CarriedTurn",
    "ConversationInput",
    "DeltaEntry",
    "ModelTurn",
    "ModelTurnRequest",
    "PlannedCall",
    "ToolActivityInput",
    "ToolActivityResult",
    "TranscriptDelta",
    "conversation_input",
]

MODEL_TURN_ACTIVITY: Final[str] = "model.turn"
"""Activity type of the model request."""

VERIFY_DECISION_ACTIVITY: Final[str] = "decision.verify-v1"
"""Activity type of the signature check (a local activity)."""

TRANSCRIPT_QUERY: Final[str] = "transcript_slice"
"""The query that reads transcript items (`TranscriptSlice` in, a page out)."""

AGENT_CONFIG_QUERY: Final[str] = "agent_config"
"""The query that reads an agent configuration of the run by name."""

TOOL_CALL_QUERY: Final[str] = "tool_call"
"""The query that reads a planned call's arguments by call id."""

POLICY_VERSION_QUERY: Final[str] = "policy_version"
"""The query that reads a policy document the run installed, by version (its digest)."""


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
        summary: `tool(arg=…)`, at most 120 characters, redacted by the
            worker: the tool activity's summary, what approvers read.
        timeout: Start-to-close seconds of one attempt (local tools).
        heartbeat_timeout: Heartbeat timeout in seconds (local tools).
        max_attempts: Attempts including the first (local tools).
        initial_interval: Seconds before the first retry.
        backoff_coefficient: Multiplier between retries.
        maximum_interval: Cap on the retry interval, seconds.
        non_retryable_error_types: Error type names never retried.
        action: The decoded action of a signal tool.
        answer_schema: The answer schema of an interaction tool.
        at_most_once: The call runs at most once (one attempt; a lost worker
            makes it Failure `interrupted`).
        local: Run the call as a Temporal local activity (`Tool.local`);
            `False` (the default, left out when recorded) in every history
            recorded before local activities, so those replay unchanged.
        policy: What the approval policy decided (`durable_tools.policies`):
            its version and rule; for `approve`, `approvers` holds its groups
            and the verdict its quorum. `None` (left out when recorded): no
            policy decided, the tool's own `needs_approval` did.
        shadow: What the agent's candidate policy (`Agent.shadow_policy`)
            would have decided, when it disagrees with the active one
            (docs/policies.md, "Shadow mode"); it changes nothing. `None`
            (left out when recorded): no candidate, or they agree.
        notify: The worker's webhooks (`App.webhooks`) by name, with the
            event kinds each is sent, for a call that waits for a person
            (`durable_tools.webhooks`); `None` (left out): none.
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
    local: bool = False
    policy: PolicyVerdict | None = None
    shadow: PolicyDisagreement | None = None
    notify: dict[str, list[str]] | None = None


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
        team: The conversation's team (`durable_tools.teams.TEAM`), which
            approval policies see as `conversation.team`; `None`: no team
            (and every request recorded before policies).
        policy: The installed policy's whole document, as requests
            recorded before workers loaded policies by version sent it
            (decoded, never sent now; `policy_ref` instead).
        policy_ref: The policy version installed in the conversation by a
            live change (`set_policy`; docs/policies.md "Live change"): it
            takes the agent's own policy's place. The worker loads the
            document by version (`activities/policy_versions.py`). `None`:
            none installed.

    `agent` is set in a run's first request and after a handoff (the worker
    keeps it by `agent_name`), in requests recorded before configurations were
    read by name, and for loops embedded in another workflow (which cannot be
    queried by these names); `agent_name` otherwise.
    """

    model_config = RECORD_CONFIG

    workflow_id: str
    run_id: str
    turn: int
    upto: int
    agent: AgentConfig | None = None
    known_digest: str = ""
    transcript: list[TranscriptItem] | None = None
    agent_name: str = ""
    delta: TranscriptDelta | None = None
    team: str | None = None
    policy: InstalledPolicy | None = None
    policy_ref: PolicyRef | None = None


_PLAN_DEFAULTS: Final[dict[str, Any]] = {
    name: field.get_default(call_default_factory=True)
    for name, field in PlannedCall.model_fields.items()
    if not field.is_required()
}
"""`PlannedCall`'s defaults: a recorded turn leaves out a field that has its default.

Never change one: a turn recorded without the field decodes to the default
of the code that reads it (histories recorded before held every field but
the empty ones, and decode as they are)."""


def _is_default(value: Any, default: Any) -> bool:
    """Whether a dumped field `value` is `default` (`1 == True` does not count)."""
    return value == default and isinstance(value, bool) == isinstance(default, bool)


_TURN_OPTIONAL: Final = (
    "descriptors", "summary", "messages_supersede", "cost_usd", "budget"
)  # fmt: skip
"""`ModelTurn` fields left out of a recorded turn when `None` (their default)."""


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
        messages_supersede: The resolved agent's `messages_supersede` (`None`:
            the agent sets none, or a history recorded before agents could).
        cost_usd: The turn's cost (its summary's too), priced by the worker's
            price table (`durable_tools.budgets`); `None`: not priced.
        budget: The resolved agent's `Agent.budget` (`None`: none).
    """

    model_config = RECORD_CONFIG

    message: AssistantMessage
    plans: list[PlannedCall] = Field(default_factory=list[PlannedCall])
    descriptors: list[ToolDescriptor] | None = None
    digest: str = ""
    model: str = ""
    toolkit: str = ""
    summary: ContextSummary | None = None
    messages_supersede: MessagesSupersede | None = None
    cost_usd: float | None = None
    budget: Budget | None = None

    # Each call's arguments are recorded once (issue 12, "slim per-turn
    # records"): a plan whose call is the message's call of the same id is
    # serialized with `call_id` alone and gets its call back from the message
    # when decoded. Histories recorded before this hold whole calls: they
    # decode as they are.

    @model_serializer(mode="wrap")
    def _calls_once(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        # Absent when `None` (descriptors unchanged, no summary, no budget...).
        without_nones(data, _TURN_OPTIONAL)
        calls = {call.call_id: call for call in self.message.tool_calls}
        plans = cast(list[dict[str, Any]], data.get("plans") or [])
        for plan, planned in zip(plans, self.plans, strict=True):
            if calls.get(planned.call.call_id) == planned.call:
                del plan["call"]
                plan["call_id"] = planned.call.call_id
                if planned.summary == summarize_call(planned.call):
                    del plan["summary"]  # made again from the call when decoded
            for name in [n for n in plan if n in _PLAN_DEFAULTS]:
                if _is_default(plan[name], _PLAN_DEFAULTS[name]):
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
        input_progress: Where a call that asked for input stands (its
            question is `interaction`). Left out otherwise.
        task_progress: Where a call that runs as a task stands (MCP
            Tasks: the task, its input so far). Left out otherwise.
    """

    plan: PlannedCall
    approval: PendingApproval | None = None
    decision: Decision | None = None
    interaction: PendingInteraction | None = None
    answer: Answer | None = None
    wake_at: datetime | None = None
    pause_until: datetime | None = None
    input_progress: InputProgress | None = None
    task_progress: TaskProgress | None = None

    @model_serializer(mode="wrap")
    def _without_input(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_nones(handler(self), ("input_progress", "task_progress"))


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
        messages_supersede: The agent's `messages_supersede` its last model
            turn reported (`None`: none).
        notifications: Webhook deliveries still in flight when the run
            continued as new: the next run starts them again (same event
            ids, so a receiver that got one already drops it).
        grants: The conversation's grants (`durable_tools.grants`): later
            matching calls run without waiting.
        budget: Budgets and spend (`durable_tools.budgets`); `None` in runs
            recorded before budgets, and when nothing was spent or limited.
        policy: The policy version a live change installed (`set_policy`),
            `None`: none.
        prior_calls: Tool name → calls the model made in the items before
            `base` (the runs' transcripts this state no longer carries):
            where a live change's re-evaluation starts `history.calls`.
        prior_ok: Tool name → those items' outputs that were not errors
            (`history.ran`).
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
    messages_supersede: MessagesSupersede | None = None
    budget: BudgetState | None = None
    policy: InstalledPolicy | None = None
    notifications: list[WebhookDelivery] = Field(default_factory=list[WebhookDelivery])
    grants: list[Grant] = Field(default_factory=list[Grant])
    prior_calls: dict[str, int] = Field(default_factory=dict[str, int])
    prior_ok: dict[str, int] = Field(default_factory=dict[str, int])


class ConversationInput(BaseModel):
    """Input of `AgentWorkflow`.

    Attributes:
        agents: Agent configurations by name (at least the starting one).
        agent: Name of the configuration to start with.
        messages: Initial user messages.
        options: Limits and deadlines.
        state: Carried state after continue-as-new (`None` on the first run).
    """

    model_config = RECORD_CONFIG

    agents: dict[str, AgentConfig]
    agent: str
    messages: list[str] = Field(default_factory=list[str])
    options: ConversationOptions = Field(default_factory=ConversationOptions)
    state: CarriedState | None = None


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
