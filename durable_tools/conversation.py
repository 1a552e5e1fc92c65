"""The conversation protocol: what clients and UIs send to and read from a conversation.

Every signal, update and query of `AgentWorkflow` that a client uses takes
one of these pydantic models and returns one, so fields can be added without
breaking recorded histories (Temporal's samples-python habit): the agent a
client asks for (`AgentConfig`) and the conversation's limits
(`ConversationOptions`), messages, decisions' receipts, answers, `resume` and
`retry`, and the `status`, `pending`, `await_turn` and transcript answers.
`durable_tools.client.Conversations` and the inbox are built on them.

The workflow's own input and the activities' wire types (model-turn requests,
planned calls, transcript deltas, the state carried across continue-as-new)
are private: `durable_tools._wire`. The model turn's retry settings and
failure (`durable_tools.model_failures`) and the transcript's pages
(`durable_tools.transcript_pages`) live in their own modules and are
re-exported here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from durable_tools.budgets import Budget, BudgetExceeded, BudgetState
from durable_tools.context import ContextPolicy
from durable_tools.escalation import EscalationState
from durable_tools.grants import Grant
from durable_tools.input_requests import ElicitAction, InputQuestion
from durable_tools.model_failures import (
    AGENT_REFUSED,
    MAX_FAILURE_MESSAGE_CHARS,
    ModelFailure,
    ModelRetry,
    RetryRequest,
)
from durable_tools.policy_document import PolicyRef
from durable_tools.policy_verdict import PolicyVerdict
from durable_tools.transcript import Usage
from durable_tools.transcript_pages import RunSpan, TranscriptPage, TranscriptSlice

__all__ = [
    "AGENT_REFUSED",
    "CANCELLED_BY",
    "MAX_FAILURE_MESSAGE_CHARS",
    "DEFAULT_APPROVAL_DEADLINE",
    "DEFAULT_IDLE_TIMEOUT",
    "AgentConfig",
    "Answer",
    "ConversationOptions",
    "ConversationResult",
    "ConversationStatus",
    "DecisionReceipt",
    "MessagesSupersede",
    "ModelFailure",
    "ModelRetry",
    "PendingApproval",
    "PendingInteraction",
    "PendingState",
    "RejectedDecision",
    "Resume",
    "RetryRequest",
    "RunSpan",
    "RunningSubAgent",
    "SendMessage",
    "TranscriptPage",
    "TranscriptSlice",
    "TurnOutcome",
]

CANCELLED_BY: Final = "cancelled by "
"""How a cancel request's reason names who cancelled (`Conversations.cancel(...,
cancelled_by="ana")` sends the reason `cancelled by ana`, Temporal records it
in the `WorkflowExecutionCancelRequested` event and the workflow reads it
with `workflow.cancellation_reason()`)."""

MessagesSupersede = Literal["anyone", "deciders"]
"""Who may supersede a pending approval by sending a message
(`ConversationOptions.messages_supersede`)."""

DEFAULT_APPROVAL_DEADLINE: float = 7 * 24 * 3600.0
"""Seconds an approval or interaction may wait before it expires (7 days)."""


DEFAULT_IDLE_TIMEOUT: float = 7 * 24 * 3600.0
"""Seconds a conversation waits for the next user message before it ends (7 days)."""


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
        messages_supersede: Who may supersede pending approvals by sending a
            message (a new message answers every pending approval
            `cancelled`): `"deciders"` (the default), only a person who may
            decide every pending approval; `"anyone"`, anyone who may send.
            The workflow reports it (`PendingState.messages_supersede`) and
            the inbox enforces it with its identities (`may_decide`); the
            workflow itself cannot, as a message's sender is not signed.
        budget: What the conversation may spend (tokens, USD) before the
            loop stops ahead of a model call and waits in state
            `budget_exceeded` (docs/policies.md, "Budgets"). Default `None`:
            no limit (an agent's own `Agent.budget` still applies).
        finish_on_reply: End the conversation (status `finished`) when the
            model replies with text and no tool call; the text is the
            output. Sub-agents run with it (an agent tool's call is
            answered when the sub-agent is done). Default False: such a
            reply waits for the next user message.
        sub_agent_depth: How many agent-tool calls started this conversation
            (0: a client did; a sub-agent's is its parent's + 1). At
            `durable_tools.agent_tools.MAX_SUB_AGENT_DEPTH` its own agent
            tools' calls are refused (`sub_agent_failed`).
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
    messages_supersede: MessagesSupersede = "deciders"
    budget: Budget | None = None
    finish_on_reply: bool = False
    sub_agent_depth: int = Field(default=0, ge=0)


class RunningSubAgent(BaseModel):
    """A tool call that runs a sub-agent (an agent tool) as a child conversation.

    Its approvals and questions are the child's: decide them with the
    child's workflow id (`Conversations.approve(workflow_id, ...)`).

    Attributes:
        call_id: The parent's tool call.
        tool: The agent tool's name.
        agent: The agent it runs.
        workflow_id: The child conversation's workflow id.
        started_at: When the child was started (workflow time, UTC).
    """

    call_id: str
    tool: str
    agent: str
    workflow_id: str
    started_at: datetime


class PendingApproval(BaseModel):
    """A tool call waiting for a person's decision.

    Attributes:
        call_id: The call.
        tool: Its tool name.
        arguments: The raw argument text, as the model sent it.
        arguments_hash: The call's digest, what a decision must carry
            (`call_digest` over the tool name, call id and canonical arguments).
        summary: `tool(arg=…)`, at most 120 characters, secrets redacted, for a UI.
        requested_at: When the call started waiting (workflow time, UTC).
        deadline: When it expires.
        approvers: Who may decide (`group:NAME`, `user:ID`); empty: anyone
            who can signal the conversation.
        signed: Whether only a signed decision counts (the tool has approvers,
            or the conversation requires signed decisions).
        instance: This wait's id (`durable_tools.approvals.pending_instance`:
            the conversation's first run id and `requested_at`), which a
            signed decision must carry (`Decision.instance`) and was made
            within (`requested_at` to `deadline`, ± 5 minutes); empty in
            conversations started before decisions were bound to their wait.
        policy: The approval policy's verdict that gated the call (policy,
            version, rule, condition; `durable_tools.policy_verdict`), or
            `None` when the tool's own `needs_approval` did.
        quorum: Distinct approvers needed before the call runs (default 1).
        approved_by: Who approved so far, each once, while fewer than `quorum` did.
        escalation: When it is reminded and escalated, and whether it was
            (`durable_tools.escalation`); `None`: its rule says neither.
        input_request: Set when a running call's MCP server asks to sample
            the conversation's model (`kind="sampling"`): what it asks;
            `arguments_hash` is then this request's digest.
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
    instance: str = ""
    policy: PolicyVerdict | None = None
    quorum: int = 1
    approved_by: list[str] = Field(default_factory=list[str])
    input_request: InputQuestion | None = None
    escalation: EscalationState | None = None


class PendingInteraction(BaseModel):
    """A call waiting for an answer: an interaction tool's, or a tool's that asked.

    Attributes:
        call_id: The call.
        tool: Its tool name.
        arguments: The raw argument text (the question).
        arguments_hash: What an answer must carry (for `input_request`, the
            digest of this very question: `input_requests.question_digest`).
        answer_schema: JSON Schema the answer must satisfy (`None`: any).
        requested_at: When the call started waiting.
        deadline: When it expires.
        input_request: Set when a running tool asked (an MCP server's
            input-required result): the server's message and which request
            of which round this is. Such a question may also be declined or
            cancelled (`Answer.action`).
    """

    call_id: str
    tool: str
    arguments: str
    arguments_hash: str
    answer_schema: dict[str, Any] | None = None
    requested_at: datetime
    deadline: datetime
    input_request: InputQuestion | None = None


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
        budget_exceeded: Why the next model call waits (state
            `budget_exceeded`) for `raise_budget` or `cancel`.
        messages_supersede: Who may supersede the pending approvals by
            sending a message (`ConversationOptions.messages_supersede`);
            `"deciders"` from workers before it.
        grants: The conversation's grants (`durable_tools.grants`): who
            approved which later calls, when, and the calls they ran.
        sub_agents: Calls that run a sub-agent now, with the child
            conversation's workflow id, where the sub-agent's own approvals
            and questions wait.
    """

    approvals: list[PendingApproval] = Field(default_factory=list[PendingApproval])
    interactions: list[PendingInteraction] = Field(default_factory=list[PendingInteraction])
    paused: str | None = None
    model_failed: ModelFailure | None = None
    budget_exceeded: BudgetExceeded | None = None
    rejected: list[RejectedDecision] = Field(default_factory=list[RejectedDecision])
    messages_supersede: MessagesSupersede = "deciders"
    grants: list[Grant] = Field(default_factory=list[Grant])
    sub_agents: list[RunningSubAgent] = Field(default_factory=list[RunningSubAgent])


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
        action: `accept` (default: `value` is the answer), or `decline` /
            `cancel` of a question a tool asked (`PendingInteraction.input_request`;
            `value` must then be `null`). Left out when `accept`, so workers
            that predate it read such answers.
    """

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    call_id: str
    value: Any = None
    arguments_hash: str
    answered_by: str = ""
    answered_at: datetime | None = None
    action: ElicitAction = "accept"

    @model_serializer(mode="wrap")
    def _accept_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if dumped.get("action") == "accept":
            dumped.pop("action")
        return dumped


class SendMessage(BaseModel):
    """A message for the conversation (the `send` signal): the user's, or an operator's note.

    Attributes:
        text: The message.
        sent_by: Who sent it (kept in the transcript's `UserMessage.sent_by`
            and the `message_received` event; cleaned, at most 200
            characters).
        operator: An operator's note, not the user's words (default False):
            the model receives it marked as one (`UserMessage.as_model_text`).
            The inbox sends every message as an operator's note.
    """

    text: str
    sent_by: str = ""
    operator: bool = False


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


class ConversationStatus(BaseModel):
    """The `status` query.

    Attributes:
        state: What the loop is doing: `starting` (a run's first workflow
            task, before its loop ran), `idle`, `model`, `tools`, `waiting`,
            `sleeping`, `paused`, `model_failed` (waiting for `retry`, a new
            message or `cancel`), `budget_exceeded` (waiting for
            `raise_budget` or `cancel`), `finished`, `cancelled`.
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
        cost_usd: USD spent over the whole conversation, priced by the
            workers' price tables when each turn ran (`App.prices`).
        budget: Limits and spend, per conversation and per agent
            (`None`: nothing limited or spent yet).
        budget_exceeded: Why the next model call waits, in state
            `budget_exceeded`.
        unanswered_messages: Once the conversation has ended (`state`
            `finished`), the user messages that arrived after the model's last
            turn; they were never given to the model. Empty before.
        policy: The policy version a live change installed (`set_policy`):
            name, version, who, when. `None`: the agent's own policy applies.
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
    cost_usd: float = 0.0
    budget: BudgetState | None = None
    budget_exceeded: BudgetExceeded | None = None
    unanswered_messages: list[SendMessage] = Field(default_factory=list[SendMessage])
    policy: PolicyRef | None = None


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
        cost_usd: USD spent over the whole conversation (`App.prices`).
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
    cost_usd: float = 0.0
    unanswered_messages: list[SendMessage] = Field(default_factory=list[SendMessage])


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
