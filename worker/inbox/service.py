"""What the inbox does with Temporal: find waiting conversations, read one, decide.

Every operation goes through `durable_tools.client.Conversations`. Decisions
and answers use the validated updates (`wait=True`) so a rejection comes back
at once; every failure a person can cause or meet (already decided, arguments
changed, expired, unknown call, conversation ended, no worker) becomes a
`Conflict` with a kind and a sentence, never a traceback.

Two seams for work in flight elsewhere:

- `send_decision` is the one function that sends a decision: signing (the
  trust work) plugs in there.
- `changes` is the one function that tells that a conversation changed: the
  pages poll it and `InboxService.watch` (the SSE endpoint) loops over it
  today; the event stream (`Conversations.events`) replaces its body.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field
from temporalio.client import (
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_tools.client import Conversations
from durable_tools.conversation import (
    ConversationStatus,
    DecisionReceipt,
    ModelFailure,
    PendingApproval,
    PendingInteraction,
    PendingState,
)
from durable_tools.errors import DecisionRejected, RetryRejected
from durable_tools.transcript import ToolCallOutput, TranscriptItem
from durable_tools.worker.inbox.auth import Identity, may_decide
from durable_tools.workflows.agent_workflow import PENDING_KINDS

__all__ = [
    "Conflict",
    "ConflictKind",
    "INBOX_QUERY",
    "ConversationView",
    "InboxItem",
    "InboxService",
    "WaitingConversation",
    "changes",
    "send_decision",
]

ConflictKind = Literal[
    "already_decided",
    "arguments_changed",
    "expired",
    "not_waiting",
    "unknown_call",
    "invalid_answer",
    "not_failed",
    "not_allowed",
    "ended",
    "not_found",
    "no_worker",
    "unavailable",
]

T = TypeVar("T")

INBOX_QUERY = (
    "(DurableToolsPendingCount > 0 OR DurableToolsPendingKinds = 'pause') "
    "AND ExecutionStatus = 'Running'"
)
"""Visibility query of the inbox: `durable-tools pending`'s, and pauses (which the
workflow lists in `DurableToolsPendingKinds` without counting them)."""

_QUERY_TIMEOUT = 10.0
_LIST_QUERY_TIMEOUT = 3.0
"""Seconds the list waits for one conversation's queries: a query to a conversation
whose worker is gone waits for its whole timeout, and the page waits for the slowest."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_CONVERSATIONS = 500


class Conflict(Exception):
    """An operation a person asked for that cannot happen, said in one sentence.

    Args:
        kind: What went wrong (`already_decided`, `arguments_changed`, ...).
        message: The sentence to show.
    """

    def __init__(self, kind: ConflictKind, message: str) -> None:
        super().__init__(message)
        self.kind: ConflictKind = kind
        self.message = message

    @property
    def status_code(self) -> int:
        """The HTTP status the API answers with."""
        if self.kind == "not_allowed":
            return 403
        if self.kind == "not_found":
            return 404
        if self.kind in ("no_worker", "unavailable"):
            return 503
        if self.kind == "invalid_answer":
            return 422
        return 409


class InboxItem(BaseModel):
    """One thing a conversation waits for a person to do.

    Attributes:
        kind: `approval`, `question`, `pause` or `model_failed`.
        call_id: The call (`""` for a pause or a model failure).
        tool: The tool name (`""` for a model failure).
        summary: A one-line summary.
        arguments: The call's arguments as the model sent them (raw text).
        arguments_hash: What a decision or answer must carry.
        answer_schema: The answer's JSON Schema (questions).
        requested_at: When it started waiting.
        deadline: When it expires.
    """

    kind: Literal["approval", "question", "pause", "model_failed"]
    call_id: str = ""
    tool: str = ""
    summary: str = ""
    arguments: str = ""
    arguments_hash: str = ""
    answer_schema: dict[str, Any] | None = None
    requested_at: datetime | None = None
    deadline: datetime | None = None


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


class ConversationView(BaseModel):
    """One conversation: its status, what it waits for and its transcript.

    Attributes:
        workflow_id: The conversation.
        status: The `status` query.
        items: What it waits for.
        transcript: The transcript.
        version: Changes whenever any of the above does (for polling).
    """

    workflow_id: str
    status: ConversationStatus
    items: list[InboxItem]
    transcript: list[TranscriptItem]
    version: str


def items_of(pending: PendingState) -> list[InboxItem]:
    """The `pending` query's content as inbox items."""
    items = [_approval_item(a) for a in pending.approvals]
    items += [_question_item(i) for i in pending.interactions]
    if pending.paused is not None:
        items.append(InboxItem(kind="pause", tool="pause", summary=pending.paused or "paused"))
    if pending.model_failed is not None:
        items.append(_model_failed_item(pending.model_failed))
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
    )


def _question_item(interaction: PendingInteraction) -> InboxItem:
    question = ""
    try:
        parsed = json.loads(interaction.arguments)
        if isinstance(parsed, dict):
            question = str(parsed.get("question", "") or "")  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    except ValueError:
        pass
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
    )


def _model_failed_item(failure: ModelFailure) -> InboxItem:
    kind = f"{failure.type}: " if failure.type else ""
    return InboxItem(
        kind="model_failed",
        summary=f"model turn {failure.turn} failed: {kind}{failure.message}",
        requested_at=failure.failed_at,
    )


async def send_decision(
    conversations: Conversations,
    workflow_id: str,
    approval: PendingApproval,
    identity: Identity,
    *,
    approved: bool,
    reason: str,
) -> DecisionReceipt | None:
    """Send one decision through the validated update.

    The seam for decision signing: when the trust work's signatures are
    configured, the decision is signed here, for the digest of what the page
    showed (`approval.arguments_hash`) and `identity.name`.

    Raises:
        DecisionRejected: The workflow refused it.
    """
    return await conversations.decide(
        workflow_id,
        approval.call_id,
        approved=approved,
        arguments_hash=approval.arguments_hash,
        decided_by=identity.name,
        reason=reason,
        wait=True,
    )


async def changes(conversations: Conversations, workflow_id: str) -> str:
    """A version string of a conversation that changes whenever it does.

    The seam for the event stream: pages poll this today; the SSE endpoint
    built on `Conversations.events` replaces it.
    """
    status = await conversations.status(workflow_id)
    pending = await conversations.pending(workflow_id)
    return _version(status, pending)


def _version(status: ConversationStatus, pending: PendingState) -> str:
    text = status.model_dump_json() + pending.model_dump_json(exclude={"rejected"})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class InboxService:
    """The inbox's operations on one namespace.

    Attributes:
        conversations: The client API.
    """

    conversations: Conversations
    _limit: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16))

    async def waiting(self) -> list[WaitingConversation]:
        """Every running conversation waiting for a person, newest first.

        Found with Temporal visibility (`INBOX_QUERY`), then each one's
        `pending` and `status` queries.
        """
        client = self.conversations.client
        found: list[WaitingConversation] = []
        try:
            async for execution in client.list_workflows(INBOX_QUERY, limit=_MAX_CONVERSATIONS):
                attributes = execution.typed_search_attributes
                found.append(
                    WaitingConversation(
                        workflow_id=execution.id,
                        started=execution.start_time,
                        state=",".join(attributes.get(PENDING_KINDS) or []),
                    )
                )
        except RPCError as exc:
            raise _rpc_conflict(exc, "the inbox") from exc
        await asyncio.gather(*(self._fill(w) for w in found))
        found.sort(key=lambda w: w.started or _EPOCH, reverse=True)
        return found

    async def _fill(self, waiting: WaitingConversation) -> None:
        async with self._limit:
            try:
                async with asyncio.timeout(_LIST_QUERY_TIMEOUT):
                    pending = await self.conversations.pending(waiting.workflow_id)
                    status = await self.conversations.status(waiting.workflow_id)
            except (TimeoutError, RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
                waiting.problem = (
                    f"no worker answered its queries within {_LIST_QUERY_TIMEOUT:g} s "
                    f"(waiting for: {waiting.state or 'unknown'})"
                )
                return
        waiting.items = items_of(pending)
        waiting.agent = status.agent
        waiting.state = status.state
        waiting.problem = ""

    async def conversation(self, workflow_id: str) -> ConversationView:
        """One conversation's status, pending items and transcript.

        Raises:
            Conflict: `not_found` or `ended` (no running conversation), `no_worker`.
        """
        try:
            async with asyncio.timeout(_QUERY_TIMEOUT):
                status = await self.conversations.status(workflow_id)
                pending = await self.conversations.pending(workflow_id)
                transcript = await self.conversations.history(workflow_id)
        except TimeoutError as exc:
            raise _no_worker() from exc
        except RPCError as exc:
            raise _rpc_conflict(exc, f"conversation {workflow_id!r}") from exc
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
            raise Conflict("unavailable", f"the conversation's query failed: {exc}") from exc
        return ConversationView(
            workflow_id=workflow_id,
            status=status,
            items=items_of(pending),
            transcript=transcript,
            version=_version(status, pending),
        )

    async def version(self, workflow_id: str) -> str:
        """`changes(...)`, with failures as `Conflict`."""
        try:
            async with asyncio.timeout(_QUERY_TIMEOUT):
                return await changes(self.conversations, workflow_id)
        except TimeoutError as exc:
            raise _no_worker() from exc
        except RPCError as exc:
            raise _rpc_conflict(exc, f"conversation {workflow_id!r}") from exc

    async def watch(self, workflow_id: str, *, interval: float = 1.0) -> AsyncIterator[str]:
        """Yield the conversation's version now and each time it changes (forever).

        Checks `changes` every `interval` seconds until the event stream lands.

        Raises:
            Conflict: As `version`.
        """
        last = ""
        while True:
            version = await self.version(workflow_id)
            if version != last:
                last = version
                yield version
            await asyncio.sleep(interval)

    async def decide(
        self,
        workflow_id: str,
        call_id: str,
        identity: Identity,
        *,
        approved: bool,
        arguments_hash: str,
        reason: str = "",
    ) -> DecisionReceipt | None:
        """Approve or deny a call, for the arguments hash the person saw.

        Raises:
            Conflict: Not allowed, already decided, arguments changed, expired,
                unknown call, conversation ended, no worker.
        """
        shown = PendingApproval(
            call_id=call_id,
            tool="",
            arguments="",
            arguments_hash=arguments_hash,
            summary="",
            requested_at=datetime.min,
            deadline=datetime.min,
        )
        current = await self._pending_call(workflow_id, call_id, interaction=False)
        if not may_decide(identity, current or shown):
            raise Conflict("not_allowed", f"{identity.name} may not decide on call {call_id!r}")
        try:
            return await self._bounded(
                send_decision(
                    self.conversations,
                    workflow_id,
                    shown,
                    identity,
                    approved=approved,
                    reason=reason,
                )
            )
        except DecisionRejected as exc:
            raise await self._rejected(workflow_id, call_id, str(exc)) from exc

    async def answer(
        self,
        workflow_id: str,
        call_id: str,
        identity: Identity,
        *,
        value: Any,
        arguments_hash: str,
    ) -> DecisionReceipt | None:
        """Answer a question, for the arguments hash the person saw.

        Raises:
            Conflict: As `decide`, and `invalid_answer` for an answer that
                violates the answer schema.
        """
        current = await self._pending_call(workflow_id, call_id, interaction=True)
        if current is not None and not may_decide(identity, current):
            raise Conflict("not_allowed", f"{identity.name} may not answer call {call_id!r}")
        try:
            return await self._bounded(
                self.conversations.answer(
                    workflow_id,
                    call_id,
                    value,
                    arguments_hash=arguments_hash,
                    answered_by=identity.name,
                    wait=True,
                )
            )
        except DecisionRejected as exc:
            raise await self._rejected(workflow_id, call_id, str(exc)) from exc

    async def send(self, workflow_id: str, identity: Identity, text: str) -> None:
        """Send a user message (durable signal)."""
        await self._bounded(self.conversations.send(workflow_id, text, sent_by=identity.name))

    async def resume(self, workflow_id: str, identity: Identity, message: str) -> None:
        """Resume a paused conversation (durable signal).

        Raises:
            Conflict: `not_waiting` when it is not paused.
        """
        try:
            pending = await self._bounded(self.conversations.pending(workflow_id))
        except Conflict:
            raise
        if pending.paused is None:
            raise Conflict("not_waiting", "the conversation is not paused")
        await self._bounded(
            self.conversations.resume(workflow_id, message or "resumed", resumed_by=identity.name)
        )

    async def retry(self, workflow_id: str, identity: Identity) -> None:
        """Retry a failed model turn (validated update).

        Raises:
            Conflict: `not_failed` when the conversation is not in `model_failed`.
        """
        try:
            await self._bounded(
                self.conversations.retry(workflow_id, requested_by=identity.name, wait=True)
            )
        except RetryRejected as exc:
            raise Conflict("not_failed", str(exc)) from exc

    async def _bounded(self, operation: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(_QUERY_TIMEOUT):
                return await operation
        except TimeoutError as exc:
            raise _no_worker() from exc
        except RPCError as exc:
            raise _rpc_conflict(exc, "the conversation") from exc
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
            raise Conflict("unavailable", f"the conversation's query failed: {exc}") from exc
        except WorkflowUpdateFailedError as exc:
            raise Conflict("unavailable", f"the update failed: {exc.cause or exc}") from exc

    async def _pending_call(
        self, workflow_id: str, call_id: str, *, interaction: bool
    ) -> PendingApproval | PendingInteraction | None:
        pending: PendingState = await self._bounded(self.conversations.pending(workflow_id))
        calls: Sequence[PendingApproval | PendingInteraction] = (
            pending.interactions if interaction else pending.approvals
        )
        return next((c for c in calls if c.call_id == call_id), None)

    async def _rejected(self, workflow_id: str, call_id: str, reason: str) -> Conflict:
        """The rejection as a `Conflict`, told apart with the call's output if it has one."""
        if "already received" in reason:
            return Conflict("already_decided", f"Someone already decided on call {call_id}.")
        if "arguments hash does not match" in reason:
            return Conflict(
                "arguments_changed",
                f"The arguments of call {call_id} are not the ones this page showed; "
                "reload and look again.",
            )
        if "does not match the answer schema" in reason or "answer schema" in reason:
            return Conflict("invalid_answer", reason)
        if "unknown call id" in reason:
            return Conflict("unknown_call", f"Call {call_id} is unknown to this conversation.")
        output = await self._output_of(workflow_id, call_id)
        if output is not None and output.failure_kind == "expired":
            return Conflict(
                "expired", f"Call {call_id} expired before a decision: {_reason(output)}"
            )
        if output is not None and output.failure_kind is None:
            return Conflict(
                "already_decided", f"Someone already decided on call {call_id}: it was approved."
            )
        if output is not None and output.failure_kind == "denied":
            return Conflict(
                "already_decided",
                f"Someone already decided on call {call_id}: {_reason(output)}.",
            )
        if output is not None:
            return Conflict(
                "not_waiting",
                f"Call {call_id} is no longer waiting (it ended {output.failure_kind}).",
            )
        return Conflict("not_waiting", f"Call {call_id} is no longer waiting: {reason}")

    async def _output_of(self, workflow_id: str, call_id: str) -> ToolCallOutput | None:
        try:
            items = await self._bounded(self.conversations.history(workflow_id))
        except Conflict:
            return None
        for item in items:
            if isinstance(item, ToolCallOutput) and item.call_id == call_id:
                return item
        return None


def _reason(output: ToolCallOutput) -> str:
    try:
        parsed = json.loads(output.content)
    except ValueError:
        return output.content
    if isinstance(parsed, dict):
        return str(parsed.get("reason", output.content))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return output.content


def _no_worker() -> Conflict:
    return Conflict(
        "no_worker",
        f"No worker answered within {_QUERY_TIMEOUT:g} s; is a durable-tools worker running?",
    )


def _rpc_conflict(exc: RPCError, what: str) -> Conflict:
    lowered = exc.message.lower()
    if exc.status == RPCStatusCode.NOT_FOUND:
        if "completed" in lowered or "closed" in lowered or "already" in lowered:
            return Conflict("ended", f"{what} has already ended.")
        return Conflict("not_found", f"{what} does not exist.")
    return Conflict(
        "unavailable", f"Temporal refused the request ({exc.status.name}): {exc.message}"
    )
