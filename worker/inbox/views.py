"""What the inbox shows: inbox items, waiting conversations, one conversation's view."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from durable_tools.client import Conversations
from durable_tools.conversation import (
    ConversationStatus,
    ModelFailure,
    PendingApproval,
    PendingInteraction,
    PendingState,
)
from durable_tools.events import ConversationEvent
from durable_tools.grants import explain_grant
from durable_tools.input_requests import InputQuestion
from durable_tools.transcript import TranscriptItem
from durable_tools.worker.render import approval_policy_line, asked_text

__all__ = [
    "ConversationView",
    "InboxItem",
    "RetryOutcome",
    "WaitingConversation",
    "changes",
    "failure_mark",
    "items_of",
    "retry_outcome",
    "GrantLine",
    "grant_lines",
    "version_of",
]


class InboxItem(BaseModel):
    """One thing a conversation waits for a person to do.

    Attributes:
        kind: `approval`, `question`, `pause`, `model_failed`,
            `budget_exceeded` (raise the budget, or cancel) or `sub_agent`
            (a call runs a sub-agent, whose approvals and questions wait in
            its own conversation, `workflow_id`).
        call_id: The call (`""` for a pause or a model failure).
        tool: The tool name (`""` for a model failure).
        summary: A one-line summary.
        arguments: The call's arguments as the model sent them (raw text).
        arguments_hash: What a decision or answer must carry.
        answer_schema: The answer's JSON Schema (questions).
        requested_at: When it started waiting.
        deadline: When it expires.
        approvers: Who may decide (`group:NAME`, `user:NAME`; empty: anyone).
        signed: Whether only a signed decision counts.
        policy: Which approval policy rule gated it and why, one line (e.g.
            `needs finance approval: args.amount_cents > 5000, rule
            refund-large (policy refunds sha256:…)`); `""`: no policy did.
        quorum: Distinct approvers needed (approvals).
        approved_by: Who approved so far, while fewer than `quorum` did.
        asks: What a running call's MCP server asks, one line (its form's
            message, the link's host and message, or its sampling request's
            last message); `""` otherwise.
        url: The link an MCP server asks the person to open (URL
            elicitation: shown with `host`; the answer is "done").
        host: The link's host.
        workflow_id: The sub-agent's conversation (`sub_agent`); `""` otherwise.
    """

    kind: Literal["approval", "question", "pause", "model_failed", "budget_exceeded", "sub_agent"]
    call_id: str = ""
    tool: str = ""
    summary: str = ""
    arguments: str = ""
    arguments_hash: str = ""
    answer_schema: dict[str, Any] | None = None
    requested_at: datetime | None = None
    deadline: datetime | None = None
    approvers: list[str] = Field(default_factory=list[str])
    signed: bool = False
    policy: str = ""
    quorum: int = 1
    approved_by: list[str] = Field(default_factory=list[str])
    asks: str = ""
    url: str | None = None
    host: str | None = None
    workflow_id: str = ""


class WaitingConversation(BaseModel):
    """A conversation that waits for a person.

    Attributes:
        workflow_id: The conversation.
        agent: Its current agent configuration.
        state: Its loop state.
        started: When it started.
        items: What it waits for.
        problem: Why its `pending` query could not be read (no worker), if so.
    """

    workflow_id: str
    agent: str = ""
    state: str = ""
    started: datetime | None = None
    items: list[InboxItem] = Field(default_factory=list[InboxItem])
    problem: str = ""


class RunningLine(BaseModel):
    """A tool call in flight, with its latest progress (`ConversationView.running`).

    Attributes:
        call_id: The tool call's id.
        tool: The tool's name.
        attempt: The attempt that runs (1-based).
        progress: Its latest `tool_progress`, as the event's JSON text
            (bounded by `MAX_EVENT_TEXT`); `""`: none yet.
    """

    call_id: str
    tool: str
    attempt: int = 1
    progress: str = ""


RUNNING_EVENTS = 200
"""The most recent events the page reads for the calls in flight and their progress."""


def running_lines(events: list[ConversationEvent]) -> list[RunningLine]:
    """The tool calls started and not finished in `events` (in order), with their progress.

    A call counts as running from its `tool_attempt_started` (or
    `tool_progress`) until its `tool_call_finished`; a call whose start fell
    outside the events read shows once it reports progress.
    """
    running: dict[str, RunningLine] = {}
    for event in events:
        call_id = event.call_id
        if call_id is None:
            continue
        if event.kind == "tool_call_finished":
            running.pop(call_id, None)
        elif event.kind in ("tool_attempt_started", "tool_progress"):
            line = running.get(call_id) or RunningLine(call_id=call_id, tool=event.tool or "")
            attempt = event.attempt or line.attempt
            if attempt != line.attempt:  # a new attempt restarts its progress
                line = line.model_copy(update={"attempt": attempt, "progress": ""})
            if event.kind == "tool_progress":
                line = line.model_copy(update={"progress": event.text or ""})
            running[call_id] = line
    return list(running.values())


class GrantLine(BaseModel):
    """One of the conversation's grants as the page shows it.

    Attributes:
        id: The grant (`g1`).
        text: One line: who, when, what, the calls it ran, and how it ended
            (`; revoked by bo: order closed`, `; expired`) or lasts
            (`; until 2026-11-27 10:00 UTC`).
        in_force: Whether it still runs calls (at the reading's time).
    """

    id: str
    text: str
    in_force: bool


class ConversationView(BaseModel):
    """One conversation: its status, what it waits for and its transcript.

    Attributes:
        workflow_id: The conversation.
        status: The `status` query.
        items: What it waits for.
        transcript: The transcript.
        version: Changes whenever any of the above does (for polling).
        event_offset: The offset of the last event of the conversation's
            event stream read before the rest (`-1`: none or unknown): follow
            the events endpoint after it to miss no change.
        ended: How its workflow closed (`completed`, `cancelled`,
            `terminated`, `failed`, `timed out`); `""` while it runs. An
            ended conversation takes no more messages (a send is a 409
            `ended`), whatever its last `status.state` says.
        grants: The conversation's grants (`GrantLine`: its id, one line
            `grant g1 by ana at ...: refund where /order == "A-1"; ran r2`,
            whether it is still in force).
        may_decide: Whether the reader may decide its calls (and so revoke
            its grants: `Authorizer.may(..., "decide", ...)`).
        policy: The policy version a live change installed, in one line
            (`refunds sha256:... (installed by ops-lead at ...)`); `""`: none.
        may_set_policy: Whether the reader may install a policy version in
            it (`Authorizer.may(..., "set_policy", ...)`): the page shows
            the form only then.
        running: The tool calls in flight and their latest progress (an MCP
            task's status message, a tool's `emit`), from the last
            `RUNNING_EVENTS` events; empty when `status.running_tools` is 0.
    """

    workflow_id: str
    status: ConversationStatus
    items: list[InboxItem]
    transcript: list[TranscriptItem]
    version: str
    event_offset: int = -1
    ended: str = ""
    grants: list[GrantLine] = Field(default_factory=list[GrantLine])
    may_set_policy: bool = False
    may_decide: bool = False
    policy: str = ""
    running: list[RunningLine] = Field(default_factory=list[RunningLine])


def items_of(pending: PendingState) -> list[InboxItem]:
    """The `pending` query's content as inbox items."""
    items = [_approval_item(a) for a in pending.approvals]
    items += [_question_item(i) for i in pending.interactions]
    if pending.paused is not None:
        items.append(InboxItem(kind="pause", tool="pause", summary=pending.paused or "paused"))
    if pending.model_failed is not None:
        items.append(_model_failed_item(pending.model_failed))
    stop = pending.budget_exceeded
    if stop is not None:
        summary = f"{stop.what_waits()} waits: {stop.message}"
        items.append(InboxItem(kind="budget_exceeded", summary=summary, requested_at=stop.since))
    items += [
        InboxItem(
            kind="sub_agent",
            call_id=sub.call_id,
            tool=sub.tool,
            summary=f"runs agent {sub.agent}: its approvals and questions wait in its own "
            f"conversation, {sub.workflow_id}",
            requested_at=sub.started_at,
            workflow_id=sub.workflow_id,
        )
        for sub in pending.sub_agents
    ]
    return items


def _approval_item(approval: PendingApproval) -> InboxItem:
    return InboxItem(
        kind="approval",
        call_id=approval.call_id,
        tool=approval.tool,
        summary=approval.summary,
        arguments=approval.arguments,
        arguments_hash=approval.arguments_hash,
        requested_at=approval.requested_at,
        deadline=approval.deadline,
        approvers=list(approval.approvers),
        signed=approval.signed,
        policy=approval_policy_line(approval),
        quorum=approval.quorum,
        approved_by=list(approval.approved_by),
        **_asks(approval.input_request),
    )


def _asks(asked: InputQuestion | None) -> dict[str, Any]:
    """The `InboxItem` fields of what a running call's MCP server asks."""
    if asked is None:
        return {}
    url = asked.url
    # The worker refused other schemes; checked again before a link is rendered.
    linkable = url is not None and url.lower().startswith(("https://", "http://"))
    return {"asks": asked_text(asked), "url": url if linkable else None, "host": asked.host}


def _question_item(interaction: PendingInteraction) -> InboxItem:
    question = ""
    try:
        parsed = json.loads(interaction.arguments)
        if isinstance(parsed, dict):
            question = str(parsed.get("question", "") or "")  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    except ValueError:
        pass
    asked = interaction.input_request
    if asked is not None:  # a running MCP tool's server asks
        question = asked_text(asked)
    return InboxItem(
        kind="question",
        call_id=interaction.call_id,
        tool=interaction.tool,
        summary=question or f"{interaction.tool}({interaction.arguments[:80]})",
        arguments=interaction.arguments,
        arguments_hash=interaction.arguments_hash,
        answer_schema=interaction.answer_schema,
        requested_at=interaction.requested_at,
        deadline=interaction.deadline,
        **_asks(asked),
    )


def _failure_text(failure: ModelFailure) -> str:
    kind = f"{failure.type}: " if failure.type else ""
    return f"model turn {failure.turn} failed: {kind}{failure.message}"


def _model_failed_item(failure: ModelFailure) -> InboxItem:
    return InboxItem(
        kind="model_failed", summary=_failure_text(failure), requested_at=failure.failed_at
    )


def failure_mark(failure: ModelFailure) -> str:
    """Which model failure this is: its turn and time, e.g. `3@2026-11-22T15:40:00+00:00`.

    A retry's outcome is told by comparing the mark of the failure retried
    with the conversation's failure after it (`retry_outcome`).
    """
    return f"{failure.turn}@{failure.failed_at.isoformat()}"


class RetryOutcome(BaseModel):
    """What the page says after a person retried a failed model turn.

    Attributes:
        message: The sentence.
        failed: Whether the retry failed again (shown as an alert, not a notice).
    """

    message: str
    failed: bool = False


def retry_outcome(view: ConversationView, retried: str) -> RetryOutcome:
    """The outcome of a retry, from the conversation as it is now.

    The retried turn runs after the `retry_now` update returns and may fail
    again at once; a failure other than the one retried (another turn or a
    later time) means it did.

    Args:
        view: The conversation now.
        retried: `failure_mark` of the failure that was retried (`""`: unknown).

    Returns:
        `failed` with the new failure; "Retrying" while the old failure or the
        model turn is still in place; else that the retried turn succeeded.
    """
    failure = view.status.model_failed
    if failure is not None and failure_mark(failure) != retried:
        return RetryOutcome(
            message=f"The retry failed again: {_failure_text(failure)}", failed=True
        )
    if failure is not None or view.status.state in ("model", "starting"):
        return RetryOutcome(message="Retrying the model turn.")
    return RetryOutcome(message="Retried the model turn: it succeeded.")


async def changes(conversations: Conversations, workflow_id: str) -> str:
    """A version string of a conversation that changes whenever its status or pending does.

    For API clients that poll (`GET /api/conversations/{id}/version`); the
    pages follow the event stream instead (`InboxService.follow`).
    """
    status = await conversations.status(workflow_id)
    pending = await conversations.pending(workflow_id)
    return version_of(status, pending)


def version_of(status: ConversationStatus, pending: PendingState) -> str:
    """A hash of the status and pending state (`ConversationView.version`)."""
    text = status.model_dump_json() + pending.model_dump_json(exclude={"rejected"})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def grant_lines(pending: PendingState, now: datetime | None = None) -> list[GrantLine]:
    """The conversation's grants, one line each, with the calls they ran and their state.

    Args:
        pending: The `pending` query's answer.
        now: The reading's time (default: the current time, UTC).
    """
    now = now or datetime.now(UTC)
    lines: list[GrantLine] = []
    for grant in pending.grants:
        line = explain_grant(grant) + (f"; ran {', '.join(grant.uses)}" if grant.uses else "")
        if grant.revoked_at is not None:
            why = f": {grant.revoke_reason}" if grant.revoke_reason else ""
            line += f"; revoked by {grant.revoked_by or 'someone'}{why}"
        elif grant.expires_at is not None:
            ends = grant.expires_at.strftime("%Y-%m-%d %H:%M UTC")
            line += "; expired" if grant.expires_at <= now else f"; until {ends}"
        lines.append(GrantLine(id=grant.id, text=line, in_force=grant.in_force(now)))
    return lines
