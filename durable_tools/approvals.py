"""Approval of tool calls: decisions bound to what a person saw, signed, by approvers.

A decision is bound to its call by `call_digest`: SHA-256 over one RFC 8785
(JSON Canonicalization Scheme) document holding the tool name, the call id
and the call's arguments, so an approval shown for one call can never approve
another call, another tool or other arguments (fail closed). A decision may
be signed (`sign_decision`): HMAC-SHA256 with a key the worker holds, or
Ed25519 with a private key only the signing service holds
(`durable_tools.decision_keys`), over the workflow id, the pending instance
(the conversation's first run id and when the call started waiting:
`pending_instance`), call id, digest, verdict, reason, `decided_by`,
`decided_at` and the groups the signing service asserts; the worker checks it
(`verify_signature`), the instance and time (`instance_problem`) and the
tool's approvers (`approver_problem`). A signed decision captured once
therefore approves nothing else: not another run under a reused workflow
id, not the same call id asked again, not after its deadline.

Whether a decision is bound to its call (`digest_problem`) and what it does
(`decision_outcome`: run, or the `denied` Failure the model reads) are
written once, here, and applied by every path: the durable loop,
`Toolkit.run`, and `plan_approvals` (a pure split of a turn's calls, for
code that runs tools outside the loop).

The digests themselves (`call_digest`, `arguments_hash`, `canonical_json`)
are `durable_tools.call_digest`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from durable_tools.call_digest import arguments_hash, call_digest, canonical_json
from durable_tools.decision_keys import SigningKey, VerifyingKey, sign_bytes, verify_bytes
from durable_tools.grants import GrantScope
from durable_tools.results import Failure, ToolCall, denied

__all__ = [
    "DECISION_CLOCK_SKEW",
    "ApprovalPlan",
    "BoundToCall",
    "Decision",
    "DecisionCheck",
    "DecisionVerdict",
    "approver_problem",
    "decision_outcome",
    "digest_problem",
    "instance_problem",
    "pending_instance",
    "arguments_hash",
    "call_digest",
    "canonical_json",
    "check_decision",
    "decision_payload",
    "plan_approvals",
    "sign_decision",
    "verify_signature",
]


_STRICT = ConfigDict(frozen=True, strict=True, extra="forbid")


class Decision(BaseModel):
    """A decision on an approval-gated tool call.

    Strict: every field has exactly its JSON type (`approved` is a JSON
    boolean; `"yes"` and `1` are refused) and unknown fields are refused, so
    a client's typo never becomes a coerced approval.

    Attributes:
        call_id: The call decided on.
        approved: True to run the call, False to deny it.
        arguments_hash: The call's digest as the decider saw it
            (`PendingApproval.arguments_hash`, computed by `call_digest` over
            the tool name, call id and canonical arguments); a decision whose
            digest does not match the call is rejected.
        decided_by: Who decided (user id, e-mail, service name). Unsigned,
            it is a claim; signed, the signing service vouches for it.
        decided_at: When, as the decider's clock says (signed with the rest).
        reason: Why; for a denial it becomes the reason the model sees
            (signed with the rest when `instance` is set).
        groups: Groups of `decided_by` that the signing service asserts
            (e.g. `["finance"]`), checked against the tool's approvers.
        instance: The pending instance decided on
            (`PendingApproval.instance`); signed, and required of a signed
            decision on a call that has one.
        key_id: The id of the key that signed it (`""`: unsigned).
        signature: Base64 HMAC-SHA256 or Ed25519 signature of
            `decision_payload` (`""`: unsigned).
        grant: With an approval: also approve later calls of this tool in
            this conversation whose arguments match (`durable_tools.grants`;
            signed with the rest). Left out when `None`.
    """

    model_config = _STRICT

    call_id: str
    approved: bool
    arguments_hash: str
    decided_by: str = ""
    decided_at: datetime | None = None
    reason: str = ""
    groups: list[str] = Field(default_factory=list[str])
    instance: str = ""
    key_id: str = ""
    signature: str = ""
    grant: GrantScope | None = None

    @model_serializer(mode="wrap")
    def _without_grant(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Decisions without a grant keep the shape older workers decode.
        dumped: dict[str, Any] = handler(self)
        if dumped.get("grant") is None:
            dumped.pop("grant", None)
        return dumped


class DecisionCheck(BaseModel):
    """Input of the `verify_decision` local activity.

    Attributes:
        workflow_id: The conversation the decision was sent to.
        decision: The decision to verify.
    """

    workflow_id: str
    decision: Decision


class DecisionVerdict(BaseModel):
    """Result of the `verify_decision` local activity (recorded in history).

    Attributes:
        valid: The signature verifies with one of the worker's keys.
        reason: Why not, when not valid.
    """

    valid: bool
    reason: str = ""


def _timestamp(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="microseconds")


DECISION_CLOCK_SKEW: Final = timedelta(minutes=5)
"""How far a signed decision's `decided_at` may lie outside its call's wait
(`requested_at` to `deadline`): the signing service's clock against the
workflow's (`instance_problem`)."""


def pending_instance(first_run_id: str, requested_at: datetime) -> str:
    """The id of one wait for a decision: `FIRST_RUN_ID@REQUESTED_AT` (UTC, microseconds).

    The conversation's first run id (`workflow.info().first_execution_run_id`,
    the same across continue-as-new, new when a workflow id is reused) and
    when the call started waiting tell apart every wait of every conversation
    that ever had this workflow id, even when call ids repeat.

    Args:
        first_run_id: The first run id of the conversation.
        requested_at: When the call started waiting.

    Returns:
        The instance id (`PendingApproval.instance`).
    """
    return f"{first_run_id}@{_timestamp(requested_at)}"


def instance_problem(
    decision: Decision,
    *,
    instance: str,
    requested_at: datetime,
    deadline: datetime,
    skew: timedelta = DECISION_CLOCK_SKEW,
    run_bound: bool = False,
) -> str | None:
    """Why a signed decision is not for this wait, or `None` (pure: the workflow applies it).

    Args:
        decision: The decision (its signature is checked elsewhere, over
            the fields checked here).
        instance: The pending approval's `instance`.
        requested_at: When the call started waiting.
        deadline: When the wait expires.
        skew: Allowed clock difference (default `DECISION_CLOCK_SKEW`).
        run_bound: Whether a decision may name the conversation's first run
            id alone (the part of `instance` before `@`) and be made before
            the call waited: a conversation that accepts early decisions
            (`ConversationOptions.accept_early_decisions`), whose signer
            cannot know when the call will wait. Default False.

    Returns:
        `None` if it names this instance and was made within
        `[requested_at - skew, deadline + skew]` (run-bound: names the run
        and was made before `deadline + skew`), else why not (one line).
    """
    if run_bound and decision.instance and decision.instance == instance.partition("@")[0]:
        requested_at = datetime.min.replace(tzinfo=UTC) + skew
    elif decision.instance != instance:
        named = decision.instance[:120] or "none"
        return (
            f"the decision was signed for another wait ({named!r}), not this one ({instance!r}): "
            "a captured decision cannot be replayed"
        )
    if decision.decided_at is None:
        return "a signed decision needs its decided_at"
    decided = _aware(decision.decided_at)
    if not _aware(requested_at) - skew <= decided <= _aware(deadline) + skew:
        return (
            f"decided_at {_timestamp(decided)} is outside the call's wait "
            f"({_timestamp(requested_at)} to {_timestamp(deadline)}, ± {skew.total_seconds():g} s)"
        )
    return None


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def decision_payload(workflow_id: str, decision: Decision) -> bytes:
    """The bytes a decision's signature covers (RFC 8785 canonical JSON).

    `{"approved", "arguments_hash", "call_id", "decided_at", "decided_by",
    "groups", "instance", "reason", "workflow_id"}`, with `decided_at` in UTC
    to the microsecond. The workflow id and the instance are included because
    call ids (`call_1`) repeat across conversations and across the runs of a
    reused workflow id; the verdict is included so a signed denial can never
    be turned into an approval, and the reason because the model reads it.
    A decision without `instance` (signed before decisions were bound to
    their wait) covers neither `instance` nor `reason`.

    Args:
        workflow_id: The conversation.
        decision: The decision (its `key_id` and `signature` are not covered).

    Returns:
        The canonical bytes.
    """
    covered: dict[str, Any] = {
        "workflow_id": workflow_id,
        "call_id": decision.call_id,
        "arguments_hash": decision.arguments_hash,
        "approved": decision.approved,
        "decided_by": decision.decided_by,
        "decided_at": _timestamp(decision.decided_at),
        "groups": sorted(decision.groups),
    }
    if decision.instance:
        covered.update(instance=decision.instance, reason=decision.reason)
    if decision.grant is not None:
        covered["grant"] = decision.grant.model_dump(mode="json")
    return canonical_json(covered)


def sign_decision(
    key_id: str,
    key: SigningKey,
    *,
    workflow_id: str,
    instance: str,
    call_id: str,
    arguments_hash: str,
    approved: bool,
    decided_by: str,
    groups: Iterable[str] = (),
    decided_at: datetime | None = None,
    reason: str = "",
    grant: GrantScope | None = None,
) -> Decision:
    """Make a signed decision, as an approving service would.

    Args:
        key_id: The key's id, as the worker knows it (`App(decision_keys=...)`).
        key: An HMAC secret (at least 32 random bytes, which the worker holds
            too) or an Ed25519 private key (the worker holds its public key;
            `durable_tools.decision_keys`).
        workflow_id: The conversation.
        instance: The wait decided on (`PendingApproval.instance`; empty
            only for a wait of a conversation started before decisions were
            bound, whose signature then covers neither instance nor reason).
        call_id: The call.
        arguments_hash: The call's digest the person saw.
        approved: The verdict.
        decided_by: The person, as the service authenticated them.
        groups: Groups of that person the service asserts (e.g. `["finance"]`).
        decided_at: When (default now, UTC); the workflow refuses a time
            outside the call's wait (`instance_problem`).
        reason: Why (signed; a denial's reason is what the model reads).
        grant: With an approval, the later calls it also approves (signed).

    Returns:
        The signed `Decision`, ready for `Conversations.send_decision` or
        the `decide` signal.

    Raises:
        ConfigurationError: An HMAC key is shorter than 32 bytes.

    Example:
        ```python
        decision = sign_decision("k1", key, workflow_id="ticket-42",
                                 instance=approval.instance, call_id="call_2",
                                 arguments_hash=approval.arguments_hash, approved=True,
                                 decided_by="ana", groups=["finance"])
        await conversations.send_decision("ticket-42", decision)
        ```
    """
    unsigned = Decision(
        call_id=call_id,
        approved=approved,
        arguments_hash=arguments_hash,
        decided_by=decided_by,
        decided_at=decided_at or datetime.now(UTC),
        reason=reason,
        groups=sorted(set(groups)),
        instance=instance,
        key_id=key_id,
        grant=grant,
    )
    signature = sign_bytes(key, decision_payload(workflow_id, unsigned))
    return unsigned.model_copy(update={"signature": signature})


def verify_signature(
    decision: Decision, workflow_id: str, keys: Mapping[str, VerifyingKey]
) -> str | None:
    """Check a decision's signature with the worker's keys.

    Args:
        decision: The decision received.
        workflow_id: The conversation it was sent to.
        keys: The worker's keys by key id (several at once during a
            rotation): HMAC secrets or Ed25519 public keys.

    Returns:
        `None` if it verifies, else the reason it does not.
    """
    if not decision.signature:
        return "the decision is not signed"
    if not keys:
        return "no decision keys are configured on the worker"
    key = keys.get(decision.key_id)
    if key is None:
        return f"unknown key id {decision.key_id[:100]!r}"
    if not verify_bytes(key, decision_payload(workflow_id, decision), decision.signature):
        return f"invalid signature (key id {decision.key_id[:100]!r})"
    return None


def approver_problem(decision: Decision, approvers: Sequence[str]) -> str | None:
    """Check the decider against a tool's approvers.

    An approver is `group:NAME` (any member of the group, as the decision's
    signed `groups` assert) or `user:ID` / `ID` (that `decided_by`).

    Args:
        decision: The decision (its identity is trusted only once signed).
        approvers: The tool's approvers; empty means anyone.

    Returns:
        `None` if the decider may decide, else why not.
    """
    if not approvers:
        return None
    for approver in approvers:
        kind, sep, name = approver.partition(":")
        if sep and kind == "group":
            if name in decision.groups:
                return None
        elif (name if sep and kind == "user" else approver) == decision.decided_by:
            return None
    groups = ", ".join(decision.groups) or "none"
    return (
        f"{decision.decided_by[:100]!r} (groups: {groups[:200]}) is not among the approvers "
        f"of this call: {', '.join(approvers)}"
    )


class BoundToCall(Protocol):
    """What names the call it answers: a `Decision`, or an interaction's `Answer`."""

    @property
    def call_id(self) -> str:
        """The call it answers."""
        ...

    @property
    def arguments_hash(self) -> str:
        """The call's digest as the person saw it (`call_digest`)."""
        ...


def digest_problem(call_id: str, digest: str, decision: BoundToCall) -> str | None:
    """Why `decision` is not bound to the call `call_id` whose digest is `digest`, or `None`.

    The one check every path applies (the loop against the digest it
    recorded when the call was planned, for decisions and for answers to
    interaction calls; `Toolkit.run` and `plan_approvals` against
    `call_digest` of the call): DESIGN.md invariant 3.

    Args:
        call_id: The pending call's id.
        digest: Its `call_digest` (tool name, call id, canonical arguments).
        decision: The decision (or answer) that claims to answer it.

    Returns:
        `None` if it applies, else the reason it is rejected (one line).
    """
    if decision.call_id != call_id:
        return f"decision is for call {decision.call_id!r}, not {call_id!r}"
    if decision.arguments_hash != digest:
        return (
            f"arguments hash does not match call {call_id!r}: the digest covers the "
            "tool name, the call id and the arguments shown"
        )
    return None


def check_decision(call: ToolCall, decision: Decision) -> str | None:
    """Check that a decision is bound to `call` (`digest_problem` with the call's digest).

    Args:
        call: The pending call.
        decision: The decision that claims to answer it.

    Returns:
        `None` if it applies, else the reason it is rejected.
    """
    return digest_problem(
        call.call_id, call_digest(call.name, call.call_id, call.arguments), decision
    )


def decision_outcome(call: ToolCall, decision: Decision) -> Failure | None:
    """What a decision bound to `call` does: `None` runs it, else the `denied` Failure.

    The denial's reason (what the model reads) names the decider and the
    reason given: `denied by ana: over the limit`.
    """
    if decision.approved:
        return None
    who = f" by {decision.decided_by}" if decision.decided_by else ""
    return denied(call, f"denied{who}: {decision.reason or 'no reason given'}")


class ApprovalPlan(BaseModel):
    """How a turn's calls stand with respect to approval.

    Attributes:
        approved: Calls that may run (no approval needed, or approved).
        rejected: `denied` failures for calls a decision denied.
        pending: Calls still waiting for a decision.
        invalid_decisions: Decisions that named a call of the turn but failed
            `check_decision`, with the reason; the call stays pending.
    """

    approved: list[ToolCall] = Field(default_factory=list[ToolCall])
    rejected: list[Failure] = Field(default_factory=list[Failure])
    pending: list[ToolCall] = Field(default_factory=list[ToolCall])
    invalid_decisions: list[tuple[Decision, str]] = Field(
        default_factory=list[tuple[Decision, str]]
    )


def plan_approvals(
    calls: Sequence[ToolCall],
    requires_approval: Callable[[ToolCall], bool],
    decisions: Mapping[str, Decision],
) -> ApprovalPlan:
    """Split a turn's calls by approval state.

    Args:
        calls: The turn's calls.
        requires_approval: Whether a call needs a decision (e.g. the tool's
            `needs_approval` evaluated on the parsed input).
        decisions: Decisions known so far, by call id.

    Returns:
        An `ApprovalPlan`. A decision whose arguments hash does not match its
        call is listed in `invalid_decisions` and the call stays pending
        (fail closed: a forged or stale decision neither runs nor denies).
    """
    plan = ApprovalPlan()
    for call in calls:
        if not requires_approval(call):
            plan.approved.append(call)
            continue
        decision = decisions.get(call.call_id)
        problem = check_decision(call, decision) if decision is not None else None
        if decision is None or problem is not None:
            if decision is not None and problem is not None:
                plan.invalid_decisions.append((decision, problem))
            plan.pending.append(call)
        else:
            refusal = decision_outcome(call, decision)
            if refusal is None:
                plan.approved.append(call)
            else:
                plan.rejected.append(refusal)
    return plan
