"""The conversation's event stream: what happened, in order, addressed by offset.

Each conversation workflow hosts a Temporal Workflow Stream
(`temporalio.contrib.workflow_streams`, experimental in temporalio 1.35): an
append-only log in the workflow, published to deterministically by workflow
code, and by activities through a signal (`activity_events.py`: tool
attempts, progress and model text deltas, batched and throttled), read by
long-polling updates and, once the conversation ended, by queries. Every
event is a `ConversationEvent` on the topic `EVENTS_TOPIC`; its `offset` is
its position in the conversation's log, stable across continue-as-new.

Read it with `Conversations.events(workflow_id, after=offset)` or
`durable-tools follow ID`. Retention is bounded: at continue-as-new the new
run keeps the latest `RETAINED_EVENTS` events (older offsets read from the
oldest retained one).

The kinds (`EventKind`) and their fields are listed in docs/observability.md:
messages, turns (with usage), model failures and retries, tool calls
(scheduled, attempt started, progress, failed, finished with the outcome
kind, attempts and duration), model text deltas, approvals (requested, counted toward a quorum,
decided, expired, rejected), a candidate policy's disagreements
(`policy_disagreement`, shadow mode), questions (asked, answered), pauses and
resumes, the conversation's end. Who did it is in `sent_by` (messages,
answers, resumes, retries, a cancel) or `decided_by` (decisions).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from durable_tools.policy_verdict import PolicyVerdict
from durable_tools.transcript import Usage

__all__ = [
    "EVENTS_TOPIC",
    "FOLLOW_CHECK_INTERVAL",
    "FOLLOW_WINDOW",
    "MAX_DELTA_TEXT",
    "MAX_EVENT_TEXT",
    "PROGRESS_INTERVAL",
    "RETAINED_EVENTS",
    "STARTED_DELAY",
    "TEXT_DELTA_INTERVAL",
    "ConversationEvent",
    "EventKind",
]

EVENTS_TOPIC: Final[str] = "conversation"
"""The Workflow Streams topic of conversation events."""

RETAINED_EVENTS: Final[int] = 64
"""Events a new run keeps at continue-as-new (the latest ones; about 15 KB carried).

A reader that is further behind resumes from the oldest retained event. The
carry is recorded twice per continue-as-new: 200 events made a run's last
turns cost 40% more history than its first ones (`bench/long_conversation.py`).
"""

MAX_EVENT_TEXT: Final[int] = 500
"""Characters of a message, model text, reason or progress an event carries."""

MAX_DELTA_TEXT: Final[int] = 4000
"""Characters of model text one `model_text_delta` event carries (longer batches split)."""

STARTED_DELAY: Final[float] = 1.0
"""Seconds a first tool attempt runs before `tool_attempt_started` is published.

A quicker call publishes nothing from its activity (each publish is a
signal: history bytes and a workflow task); its `tool_call_finished` says
how long it took. Retries (attempt 2 on) publish at once."""

PROGRESS_INTERVAL: Final[float] = 1.0
"""Most often, in seconds, a tool call's progress is published (the latest wins)."""

TEXT_DELTA_INTERVAL: Final[float] = 0.2
"""Most often, in seconds, a model turn's text deltas are published (joined)."""

FOLLOW_WINDOW: Final[float] = 30.0
"""Seconds after a reader's last poll that a conversation still counts as followed.

Text deltas are published only while the conversation is followed (the
workflow's `followed` query): a reader's long poll is waiting, or one ended
within this window. Nobody following, streamed text costs no signal."""

FOLLOW_CHECK_INTERVAL: Final[float] = 2.0
"""Seconds between two `followed` queries of a model turn that nobody followed yet."""

EventKind = Literal[
    "message_received",
    "turn_started",
    "turn_finished",
    "model_failed",
    "model_text_delta",
    "model_attempt_failed",
    "model_retry_requested",
    "budget_exceeded",
    "budget_raised",
    "conversation_paused",
    "conversation_resumed",
    "tool_call_scheduled",
    "tool_attempt_started",
    "tool_progress",
    "tool_attempt_failed",
    "tool_call_finished",
    "approval_requested",
    "approval_decided",
    "approval_counted",
    "approval_reminder",
    "approval_escalated",
    "approval_expired",
    "approval_rejected",
    "grant_revoked",
    "policy_disagreement",
    "policy_installed",
    "policy_reevaluated",
    "question_asked",
    "question_answered",
    "sub_agent_started",
    "sub_agent_finished",
    "conversation_finished",
]


class ConversationEvent(BaseModel):
    """One event of a conversation (see the module docstring for the kinds).

    Attributes:
        kind: What happened.
        at: When (the workflow's clock; the activity's for the events
            activities publish: `tool_attempt_started`, `tool_progress`,
            `tool_attempt_failed`, `model_text_delta`, `model_attempt_failed`).
        offset: Position in the conversation's stream (set when read).
        turn: The model turn (1-based) the event belongs to, when known.
        call_id: The tool call's id.
        tool: The tool's name.
        outcome: `ok` or the Failure kind of a call; `approved`/`denied`;
            how a conversation finished.
        attempt: The activity attempt (1-based): the one that started, sent
            progress or failed; the one that answered a finished call; the
            model attempt a text delta comes from (a new attempt restarts
            the text).
        max_attempts: The tool's most attempts (0: unlimited), with `attempt`.
        duration: Seconds from scheduling a tool call to its output
            (`tool_call_finished` of an executed call; the workflow's clock).
        reason: A failure's or rejection's one-line reason.
        decided_by: Who decided an approval (or sent a rejected decision).
        sent_by: Who did it, as the client said (cleaned; the inbox sends
            the signed-in identity): sent the message (`message_received`),
            answered (`question_answered`), resumed (`conversation_resumed`),
            asked for the retry (`model_retry_requested`), cancelled
            (`conversation_finished` with outcome `cancelled`, when the
            cancel request named someone: `Conversations.cancel(...,
            cancelled_by=...)`). Absent when nobody was named.
        operator: True on `message_received` of an operator's note
            (`SendMessage.operator`).
        agent: The agent configuration's name.
        model: The model name or spec.
        usage: Tokens of the turn.
        calls: Tool calls the model made in the turn.
        text: A user message, the model's text (bounded by `MAX_EVENT_TEXT`),
            a tool's progress as JSON (bounded the same), or the next piece of
            the model's text (`model_text_delta`, up to `MAX_DELTA_TEXT`),
            or an MCP server's question (`question_asked`).
        answer_schema: The schema an answer must satisfy (`question_asked`
            of a question an MCP server asked).
        policy: The approval policy's verdict (policy version, rule,
            outcome) on `approval_requested` of a call a policy gated and on
            `tool_call_finished` of a call a policy denied; the active
            verdict on `policy_disagreement` (absent: the tool's own
            `needs_approval` decided).
        workflow_id: The child conversation's workflow id
            (`sub_agent_started`, `sub_agent_finished`: a call of an agent
            tool runs a sub-agent there).
        candidate: On `policy_disagreement` (shadow mode): the candidate
            policy's verdict (absent: the tool's own `needs_approval`
            would have decided); `outcome` is then `ACTIVE -> CANDIDATE`
            (e.g. `run -> approve`, `approve(1) -> approve(2)`).

    A live policy change publishes `policy_installed` (`sent_by`: who
    installed it; `reason`: `policy NAME VERSION`) and, for each call that
    waited for approval, `policy_reevaluated` (`outcome`: `BEFORE -> AFTER`,
    e.g. `approve(1 finance) -> run`; `policy`: the new verdict).
    """

    model_config = ConfigDict(frozen=True)

    kind: EventKind
    at: datetime
    offset: int = -1
    turn: int | None = None
    call_id: str | None = None
    tool: str | None = None
    outcome: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    duration: float | None = None
    reason: str | None = None
    decided_by: str | None = None
    sent_by: str | None = None
    operator: bool | None = None
    agent: str | None = None
    model: str | None = None
    usage: Usage | None = None
    calls: int | None = None
    text: str | None = None
    answer_schema: dict[str, Any] | None = None
    policy: PolicyVerdict | None = None
    candidate: PolicyVerdict | None = None
    workflow_id: str | None = None

    @model_serializer(mode="wrap")
    def _without_nones(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Events are carried across continue-as-new: unset fields cost no bytes.
        dumped: dict[str, Any] = handler(self)
        return {k: v for k, v in dumped.items() if v is not None}
