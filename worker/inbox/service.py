"""What the inbox does with Temporal: find waiting conversations, read one, decide.

Every operation goes through `durable_tools.client.Conversations`. Decisions
and answers use the validated updates (`wait=True`) so a rejection comes back
at once, and the durable signals when Temporal refuses one more update on the
workflow (`RESOURCE_EXHAUSTED`: its 10 in-flight updates are taken). Every
failure a person can cause or meet (already decided, arguments changed,
expired, unknown call, conversation ended, no worker) becomes a `Conflict`
with a kind and a sentence, never a traceback.

- `send_decision` is the one function that sends a decision, signed with the
  inbox's decision key when it holds one (`durable_tools.approvals.sign_decision`).
- `InboxService.follow` reads a conversation's event stream for the SSE
  endpoint, from this process's one feed of that conversation (`feeds.py`:
  one long-poll update however many pages are open; resumable by offset); the
  list's stream compares `InboxService.listing_version`, one visibility query
  shared by every open page.
- `changes` is a version string of a conversation (`GET .../version`).

`InboxService` keeps deciding and acting here; it finds waiting conversations
with `listing.py` (`InboxListing`) and reads one with `reading.py`
(`InboxReading`); what they show is in `views.py`, their failures in
`conflicts.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from pydantic import ValidationError
from temporalio.client import (
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_tools.client import Conversations
from durable_tools.conversation import (
    DecisionReceipt,
    ModelFailure,
    PendingApproval,
    PendingInteraction,
    PendingState,
)
from durable_tools.decision_keys import SigningKey
from durable_tools.errors import DecisionRejected, RetryRejected
from durable_tools.grants import GrantScope
from durable_tools.input_requests import ElicitAction
from durable_tools.transcript import ToolCallOutput
from durable_tools.worker.inbox.auth import Identity, already_approved, may_decide
from durable_tools.worker.inbox.authz import Authorizer, TeamAuthorizer
from durable_tools.worker.inbox.conflicts import (
    QUERY_TIMEOUT,
    UPDATE_TIMEOUT,
    Conflict,
    no_worker,
    rpc_conflict,
)
from durable_tools.worker.inbox.feeds import STREAMS_PER_IDENTITY, EventFeeds
from durable_tools.worker.inbox.listing import InboxListing
from durable_tools.worker.inbox.rule_changes import InboxRuleChanges

__all__ = ["InboxService", "send_decision", "supersede_refusal"]

T = TypeVar("T")

# A rejected decision's call is looked for among this many newest items first.
_RECENT_ITEMS = 200


async def send_decision(
    conversations: Conversations,
    workflow_id: str,
    approval: PendingApproval,
    identity: Identity,
    *,
    approved: bool,
    reason: str,
    key: tuple[str, SigningKey] | None = None,
    wait: bool = True,
    grant: GrantScope | None = None,
) -> DecisionReceipt | None:
    """Send one decision, signed when the inbox holds a key.

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
        wait: Send the validated `decide_now` update (default) and return
            its receipt; `False`: the durable `decide` signal.
        grant: With an approval, the later calls it also approves
            (`durable_tools.grants`; signed with the rest).

    Returns:
        The workflow's receipt; `None` when sent as the signal.

    Raises:
        DecisionRejected: The workflow refused it (with `wait`).
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
        instance=approval.instance,
        wait=wait,
        grant=grant,
    )


def grant_of(
    grant: GrantScope | Sequence[str],
    current: PendingApproval | PendingInteraction | None,
    expires_after: float | None = None,
) -> GrantScope:
    """The scope to send: `grant` as given, or the pending call's values of the named fields.

    `expires_after` (seconds) goes with named fields only: a `GrantScope`
    carries its own.

    Raises:
        Conflict: `invalid_grant` (422): the call is not pending, a field is
            not among its arguments or not a JSON scalar, or the scope is refused.
    """
    if isinstance(grant, GrantScope):
        return grant
    if not isinstance(current, PendingApproval):
        raise Conflict("invalid_grant", "Only a pending approval can carry a grant.")
    try:
        document: Any = json.loads(current.arguments or "{}")
    except (ValueError, RecursionError):
        document = None
    fields = cast(dict[str, Any], document) if isinstance(document, dict) else None
    arguments: dict[str, Any] = {}
    for name in (f.strip().removeprefix("/") for f in grant if f.strip()):
        value = fields.get(name) if fields is not None else None
        if (
            fields is None
            or name not in fields
            or (value is not None and not isinstance(value, str | int | float))
        ):
            raise Conflict(
                "invalid_grant",
                f"{name[:80]!r} is not a field of this call with a text, number or "
                "true/false value.",
            )
        arguments["/" + name.replace("~", "~0").replace("/", "~1")] = value
    try:
        scope: dict[str, Any] = {"tool": current.tool, "arguments": arguments}
        if expires_after is not None:
            scope["expires_after"] = expires_after
        return GrantScope.model_validate(scope)
    except ValidationError as exc:
        problem = "; ".join(str(e["msg"]) for e in exc.errors())
        raise Conflict("invalid_grant", f"The grant is refused: {problem}") from None


def supersede_refusal(identity: Identity, pending: PendingState) -> str | None:
    """Why `identity` may not send a message that would supersede `pending`'s approvals.

    Args:
        identity: The authenticated person.
        pending: The conversation's `pending` query.

    Returns:
        A sentence for the page (naming the call and who may decide it), or
        `None` when the person may send: no approval waits, each one is
        theirs to decide (`may_decide`), or the conversation lets anyone
        supersede (`messages_supersede="anyone"`).
    """
    if pending.messages_supersede == "anyone":
        return None
    for approval in pending.approvals:
        if not may_decide(identity, approval):
            deciders = " or ".join(approval.approvers) or "an authenticated person"
            call = approval.summary or approval.tool
            return (
                f"A message would cancel the pending approval of {call} "
                f"(call {approval.call_id}), which only {deciders} may decide; "
                f"{identity.name or 'an anonymous person'} may not send one until it is decided."
            )
    return None


@dataclass
class InboxService(InboxListing, InboxRuleChanges):
    """The inbox's operations on one namespace.

    Attributes:
        conversations: The client API.
        decision_key: `(key_id, key)` decisions are signed with (`None`: unsigned).
        authorizer: What each identity may see and do (`authz.py`; default
            `TeamAuthorizer()`: teams from groups, untagged conversations
            visible to everyone). Every operation on a conversation asks it
            first; a conversation an identity may not view is `not_found`.
        streams_per_identity: Event streams (`follow`) one identity name may
            hold open in this process (default `STREAMS_PER_IDENTITY`); one
            more is `too_many_streams` (HTTP 429).
        feeds: The conversations' event feeds this process reads, one per
            conversation, shared by every stream (`feeds.py`).
    """

    conversations: Conversations
    decision_key: tuple[str, SigningKey] | None = None
    authorizer: Authorizer = field(default_factory=TeamAuthorizer)
    streams_per_identity: int = STREAMS_PER_IDENTITY
    feeds: EventFeeds = field(init=False)
    _limit: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16))
    _listing_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _listing: dict[str, tuple[float, str]] = field(default_factory=dict[str, tuple[float, str]])

    def __post_init__(self) -> None:
        self.feeds = EventFeeds(self.conversations, per_identity=self.streams_per_identity)

    async def decide(
        self,
        workflow_id: str,
        call_id: str,
        identity: Identity,
        *,
        approved: bool,
        arguments_hash: str,
        reason: str = "",
        grant: GrantScope | Sequence[str] | None = None,
        grant_for: float | None = None,
    ) -> DecisionReceipt | None:
        """Approve or deny a call, for the arguments hash the person saw.

        `grant`: with an approval, "for the rest of this conversation": a
        `GrantScope` (the API), or the names of top-level fields (`order`)
        whose values in the pending call later calls of its tool must share
        (the page's form; none: every call of the tool). `grant_for`: with
        field names, the seconds the grant lasts (`GrantScope.expires_after`;
        `None`: the rest of the conversation).

        Sends the validated `decide_now` update. When Temporal refuses it
        with `RESOURCE_EXHAUSTED` (the workflow's 10 in-flight updates are
        taken: other clients following its events, say), sends the durable
        `decide` signal instead: the decision is then accepted for delivery
        but not confirmed (the workflow checks it when it runs, and records
        a rejection as for any decision).

        Returns:
            The workflow's receipt; `None` when the decision went as the signal.

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
        await self.authorize(workflow_id, identity, "decide")
        current = await self._pending_call(workflow_id, call_id, interaction=False)
        if isinstance(current, PendingApproval):  # the wait a signed decision is bound to
            shown = shown.model_copy(update={"instance": current.instance})
        if isinstance(current, PendingApproval) and approved:
            counted = already_approved(identity, current.approved_by, current.quorum)
            if counted is not None:
                raise Conflict("not_allowed", counted)
        # Two arguments: `may_decide` is the seam deployments replace (approver groups).
        if not may_decide(identity, current or shown):
            raise Conflict("not_allowed", f"{identity.name} may not decide on call {call_id!r}")
        scope = grant_of(grant, current, grant_for) if approved and grant is not None else None

        def send(wait: bool) -> Awaitable[DecisionReceipt | None]:
            return send_decision(
                self.conversations,
                workflow_id,
                shown,
                identity,
                approved=approved,
                reason=reason,
                key=self.decision_key,
                wait=wait,
                grant=scope,
            )

        try:
            return await self._update_or_signal(send)
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
        action: ElicitAction = "accept",
    ) -> DecisionReceipt | None:
        """Answer a question, for the arguments hash the person saw.

        Sends the validated `answer_now` update, or the durable `answer`
        signal when the update capacity is exhausted (as `decide`).
        `action` `"decline"` or `"cancel"` (with `value` `None`) declines
        or dismisses a question an MCP server asked; the server is told
        which (`Conversations.answer`).

        Returns:
            The workflow's receipt; `None` when the answer went as the signal.

        Raises:
            Conflict: As `decide`, and `invalid_answer` for an answer that
                violates the answer schema.
        """
        await self.authorize(workflow_id, identity, "answer")
        current = await self._pending_call(workflow_id, call_id, interaction=True)
        if current is not None and not may_decide(identity, current):
            raise Conflict("not_allowed", f"{identity.name} may not answer call {call_id!r}")

        def send(wait: bool) -> Awaitable[DecisionReceipt | None]:
            return self.conversations.answer(
                workflow_id,
                call_id,
                value,
                arguments_hash=arguments_hash,
                answered_by=identity.name,
                wait=wait,
                action=action,
            )

        try:
            return await self._update_or_signal(send)
        except DecisionRejected as exc:
            raise await self._rejected(workflow_id, call_id, str(exc)) from exc

    async def send(self, workflow_id: str, identity: Identity, text: str) -> None:
        """Send an operator's note as the authenticated person (durable signal).

        The message goes as `SendMessage(operator=True, sent_by=identity.name)`:
        the transcript and the events name the sender, and the model reads it
        as an operator's note, never as the user's words. A message answers
        every pending approval `cancelled`, so while the conversation says
        only deciders may supersede them (`PendingState.messages_supersede`,
        from `ConversationOptions.messages_supersede`; the default), a person
        `may_decide` refuses for any pending approval may not send.

        Raises:
            Conflict: `not_allowed` (403) for such a person, `not_found`
                (also when `identity` may not send to it), `ended`, or
                `no_worker` when the conversation's pending approvals cannot
                be read (the check fails closed).
        """
        await self.authorize(workflow_id, identity, "send")
        pending: PendingState = await self._bounded(self.conversations.pending(workflow_id))
        problem = supersede_refusal(identity, pending)
        if problem is not None:
            raise Conflict("not_allowed", problem)
        await self._bounded(
            self.conversations.send(workflow_id, text, sent_by=identity.name, operator=True)
        )

    async def resume(self, workflow_id: str, identity: Identity, message: str) -> None:
        """Resume a paused conversation (durable signal).

        Raises:
            Conflict: `not_waiting` when it is not paused; `not_found` when
                `identity` may not resume it.
        """
        await self.authorize(workflow_id, identity, "resume")
        try:
            pending = await self._bounded(self.conversations.pending(workflow_id))
        except Conflict:
            raise
        if pending.paused is None:
            raise Conflict("not_waiting", "the conversation is not paused")
        await self._bounded(
            self.conversations.resume(workflow_id, message or "resumed", resumed_by=identity.name)
        )

    async def retry(self, workflow_id: str, identity: Identity) -> ModelFailure | None:
        """Retry a failed model turn (validated update).

        Returns:
            The failure retried, as the conversation reported it just before
            (`None` if it reported none); compare it with the failure after
            (`views.retry_outcome`) to tell whether the retry failed again.

        Raises:
            Conflict: `not_failed` when the conversation is not in
                `model_failed`; `not_found` when `identity` may not retry it.
        """
        await self.authorize(workflow_id, identity, "retry")
        before = await self._bounded(self.conversations.pending(workflow_id))
        try:
            await self._bounded(
                self.conversations.retry(workflow_id, requested_by=identity.name, wait=True)
            )
        except RetryRejected as exc:
            raise Conflict("not_failed", str(exc)) from exc
        return before.model_failed

    async def _update_or_signal(
        self, send: Callable[[bool], Awaitable[DecisionReceipt | None]]
    ) -> DecisionReceipt | None:
        """`send(True)`, the validated update; then `send(False)`, the signal, if it fails.

        Temporal refuses the update with `RESOURCE_EXHAUSTED` when the
        workflow's 10 in-flight updates are taken: the update was never
        admitted. Its RPC can also end cancelled or timed out (the SDK's own
        retries under load, or our deadline): whether it was admitted is then
        unknown, and the signal is sent too. That is safe: a second copy of a
        decision or answer is refused as already received (and recorded),
        never applied twice.
        """

        async def update() -> DecisionReceipt | None:
            try:
                return await send(True)
            except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
                raise _UpdatesExhausted() from exc
            except RPCError as exc:
                if exc.status in (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.CANCELLED):
                    raise _UpdatesExhausted() from exc
                raise

        try:
            return await self._bounded(update(), timeout=UPDATE_TIMEOUT)
        except _UpdatesExhausted:
            return await self._bounded(send(False))

    async def _bounded(self, operation: Awaitable[T], *, timeout: float = QUERY_TIMEOUT) -> T:
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await operation
        except TimeoutError as exc:
            raise no_worker(timeout) from exc
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            # An update cut short by the deadline raises this, not TimeoutError (was a 500).
            if deadline.expired():
                raise no_worker(timeout) from exc
            raise
        except RPCError as exc:
            raise rpc_conflict(exc, "the conversation") from exc
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
        if "cannot be declined" in reason or "no value" in reason:
            # a decline of an interaction tool's question, or a value with a decline or a link
            return Conflict("invalid_answer", f"The worker refused the answer: {reason}.")
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


class _UpdatesExhausted(Exception):
    """Temporal refused an update: the workflow's in-flight updates are taken."""


def _reason(output: ToolCallOutput) -> str:
    try:
        parsed = json.loads(output.content)
    except ValueError:
        return output.content
    if isinstance(parsed, dict):
        return str(parsed.get("reason", output.content))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return output.content
