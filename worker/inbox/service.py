"""What the inbox does with Temporal: find waiting conversations, read one, decide.

Every operation goes through `durable_tools.client.Conversations`. Decisions
and answers use the validated updates (`wait=True`) so a rejection comes back
at once; every failure a person can cause or meet (already decided, arguments
changed, expired, unknown call, conversation ended, no worker) becomes a
`Conflict` with a kind and a sentence, never a traceback.

- `send_decision` is the one function that sends a decision, signed with the
  inbox's decision key when it holds one (`durable_tools.approvals.sign_decision`).
- `InboxService.follow` reads a conversation's event stream
  (`Conversations.events`, resumable by offset) for the SSE endpoint; the
  list's stream compares `InboxService.listing_version`, one visibility query
  shared by every open page.
- `changes` is a version string of a conversation (`GET .../version`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncGenerator, Awaitable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field
from temporalio.client import (
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient
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
from durable_tools.events import ConversationEvent
from durable_tools.transcript import ToolCallOutput, TranscriptItem
from durable_tools.worker.inbox.auth import Identity, may_decide
from durable_tools.workflows.agent_workflow import PENDING_COUNT, PENDING_KINDS

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
    "signature_required",
    "signature_rejected",
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
# A rejected decision's call is looked for among this many newest items first.
_RECENT_ITEMS = 200
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
        if self.kind in ("not_allowed", "signature_required", "signature_rejected"):
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
        approvers: Who may decide (`group:NAME`, `user:NAME`; empty: anyone).
        signed: Whether only a signed decision counts.
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
    approvers: list[str] = Field(default_factory=list[str])
    signed: bool = False


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
        event_offset: The offset of the last event of the conversation's
            event stream read before the rest (`-1`: none or unknown): follow
            the events endpoint after it to miss no change.
    """

    workflow_id: str
    status: ConversationStatus
    items: list[InboxItem]
    transcript: list[TranscriptItem]
    version: str
    event_offset: int = -1


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
        approvers=list(approval.approvers),
        signed=approval.signed,
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
    key: tuple[str, bytes] | None = None,
) -> DecisionReceipt | None:
    """Send one decision through the validated update, signed when the inbox holds a key.

    With `key`, the decision is signed (HMAC-SHA256, `sign_decision`) for the
    digest of what the page showed (`approval.arguments_hash`), the
    authenticated `identity.name` as `decided_by` and `identity.groups` as the
    groups the inbox asserts; the worker verifies it with its decision keys
    and checks the tool's approvers against those groups.

    Args:
        conversations: The client API.
        workflow_id: The conversation.
        approval: The call as the page showed it (`call_id`, `arguments_hash`).
        identity: The authenticated person.
        approved: The verdict.
        reason: Why (a denial's reason reaches the model).
        key: `(key_id, key)` to sign with, or `None` to send it unsigned.

    Returns:
        The workflow's receipt.

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
        groups=identity.groups if key is not None else (),
        sign_with=key,
        wait=True,
    )


async def changes(conversations: Conversations, workflow_id: str) -> str:
    """A version string of a conversation that changes whenever its status or pending does.

    For API clients that poll (`GET /api/conversations/{id}/version`); the
    pages follow the event stream instead (`InboxService.follow`).
    """
    status = await conversations.status(workflow_id)
    pending = await conversations.pending(workflow_id)
    return _version(status, pending)


def _version(status: ConversationStatus, pending: PendingState) -> str:
    text = status.model_dump_json() + pending.model_dump_json(exclude={"rejected"})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _End:
    """The event stream ended (the conversation ended and its last events were read)."""


@dataclass
class InboxService:
    """The inbox's operations on one namespace.

    Attributes:
        conversations: The client API.
        decision_key: `(key_id, key)` decisions are signed with (`None`: unsigned).
    """

    conversations: Conversations
    decision_key: tuple[str, bytes] | None = None
    _limit: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16))
    _listing_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _listing: tuple[float, str] | None = None

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

    async def listing_version(self, max_age: float) -> str:
        """A string that changes when the set of waiting conversations does.

        One visibility query (`INBOX_QUERY`: ids, runs, pending counts and
        kinds; no per-conversation queries), shared by every caller: a result
        younger than `max_age` seconds is reused, so any number of open pages
        cost one visibility query per `max_age`.

        Raises:
            Conflict: `unavailable` when Temporal refuses the query.
        """
        loop = asyncio.get_running_loop()
        async with self._listing_lock:
            if self._listing is not None and loop.time() - self._listing[0] < max_age:
                return self._listing[1]
            rows: list[tuple[str, str, int, list[str]]] = []
            try:
                async for execution in self.conversations.client.list_workflows(
                    INBOX_QUERY, limit=_MAX_CONVERSATIONS
                ):
                    attributes = execution.typed_search_attributes
                    rows.append(
                        (
                            execution.id,
                            execution.run_id,
                            attributes.get(PENDING_COUNT) or 0,
                            sorted(attributes.get(PENDING_KINDS) or []),
                        )
                    )
            except RPCError as exc:
                raise _rpc_conflict(exc, "the inbox") from exc
            text = json.dumps(sorted(rows))
            version = hashlib.sha256(text.encode()).hexdigest()[:16]
            self._listing = (loop.time(), version)
            return version

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
                offset = await self._event_offset(workflow_id)
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
            event_offset=offset,
        )

    async def _event_offset(self, workflow_id: str) -> int:
        """The offset of the stream's last event (`-1` when it has none or cannot say)."""
        stream = WorkflowStreamClient.create(self.conversations.client, workflow_id)
        try:
            return await stream.get_offset() - 1
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError):
            return -1

    async def version(self, workflow_id: str) -> str:
        """`changes(...)`, with failures as `Conflict`."""
        try:
            async with asyncio.timeout(_QUERY_TIMEOUT):
                return await changes(self.conversations, workflow_id)
        except TimeoutError as exc:
            raise _no_worker() from exc
        except RPCError as exc:
            raise _rpc_conflict(exc, f"conversation {workflow_id!r}") from exc

    async def follow(
        self, workflow_id: str, *, after: int = -1, keepalive: float = 15.0
    ) -> AsyncGenerator[ConversationEvent | None]:
        """The conversation's events after offset `after`, as they happen.

        Checks first that the conversation exists (so a missing one is a
        `Conflict` before anything is streamed), then reads
        `Conversations.events(workflow_id, after=after)`: one long-poll update
        per batch of events while the conversation runs, queries once it
        ended. The iterator yields `None` when no event came for `keepalive`
        seconds (a comment line keeps proxies from closing the connection)
        and ends after the conversation's last event.

        Args:
            workflow_id: The conversation.
            after: The offset of the last event already seen (`-1`: all).
            keepalive: Seconds without an event before a `None`.

        Returns:
            The async generator (close it with `aclose()`).

        Raises:
            Conflict: `not_found`, `unavailable` (before streaming); the
                iterator raises `unavailable` or `no_worker` when the stream
                fails later.
        """
        try:
            async with asyncio.timeout(_QUERY_TIMEOUT):
                await self.conversations.client.get_workflow_handle(workflow_id).describe()
        except TimeoutError as exc:
            raise Conflict("unavailable", "Temporal did not answer within 10 s.") from exc
        except RPCError as exc:
            raise _rpc_conflict(exc, f"conversation {workflow_id!r}") from exc
        return self._follow(workflow_id, after, keepalive)

    async def _follow(
        self, workflow_id: str, after: int, keepalive: float
    ) -> AsyncGenerator[ConversationEvent | None]:
        queue: asyncio.Queue[ConversationEvent | _End | BaseException] = asyncio.Queue(256)

        async def pump() -> None:
            try:
                async for event in self.conversations.events(workflow_id, after=after):
                    await queue.put(event)
                await queue.put(_End())
            except Exception as exc:  # reported to the reader as a Conflict
                await queue.put(exc)

        task = asyncio.create_task(pump())
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), keepalive)
                except TimeoutError:
                    yield None
                    continue
                if isinstance(item, _End):
                    return
                if isinstance(item, BaseException):
                    raise _stream_conflict(item) from item
                yield item
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

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
                    key=self.decision_key,
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
        if "needs a signed decision" in reason:
            return Conflict(
                "signature_required",
                f"Call {call_id} needs a signed decision and this inbox holds no decision key "
                "(DURABLE_TOOLS_INBOX_DECISION_KEY); ask its operator.",
            )
        if "signature rejected" in reason or "signature could not be verified" in reason:
            return Conflict(
                "signature_rejected",
                f"The worker refused this inbox's signature on call {call_id} ({reason}); "
                "the inbox's decision key is not one the worker holds.",
            )
        if "is not among the approvers" in reason:
            return Conflict("not_allowed", f"The worker refused the decision: {reason}.")
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
        """The call's output: looked for among the newest items first.

        A call someone just tried to decide ended lately, so its output is
        almost always among the last `_RECENT_ITEMS`; only otherwise is the
        whole transcript read (its older items come from earlier runs).
        """
        try:
            length = (await self._bounded(self.conversations.status(workflow_id))).transcript_items
            recent = max(0, length - _RECENT_ITEMS)
            for start, limit in ((recent, None), (0, recent)):
                items = await self._bounded(
                    self.conversations.history(workflow_id, start=start, limit=limit)
                )
                for item in items:
                    if isinstance(item, ToolCallOutput) and item.call_id == call_id:
                        return item
                if not recent:
                    break
        except Conflict:
            return None
        return None


def _reason(output: ToolCallOutput) -> str:
    try:
        parsed = json.loads(output.content)
    except ValueError:
        return output.content
    if isinstance(parsed, dict):
        return str(parsed.get("reason", output.content))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return output.content


def _stream_conflict(exc: BaseException) -> Conflict:
    if isinstance(exc, Conflict):
        return exc
    if isinstance(exc, RPCError):
        return _rpc_conflict(exc, "the event stream")
    if isinstance(exc, WorkflowUpdateFailedError):
        return Conflict("unavailable", f"the event stream failed: {exc.cause or exc}")
    return Conflict("unavailable", f"the event stream failed: {type(exc).__name__}: {exc}")


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
