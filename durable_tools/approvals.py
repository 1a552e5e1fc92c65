"""Approval of tool calls: decisions bound to their call, and the pure planning step.

A decision is bound to a call by its call id *and* a SHA-256 hash of the call's
canonical arguments, so an approval shown for one set of arguments can never
approve another (fail closed). `plan_approvals` is the pure part of the durable
loop's approval handling: given a turn's calls and the decisions known so far,
it splits the calls into approved, rejected (with `denied` results) and pending.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from durable_tools.arguments import ArgumentsError, parse_arguments
from durable_tools.results import Failure, ToolCall, denied

__all__ = [
    "ApprovalPlan",
    "Decision",
    "arguments_hash",
    "check_decision",
    "plan_approvals",
]


def arguments_hash(arguments: str | Mapping[str, Any]) -> str:
    """SHA-256 of a call's canonical arguments.

    Canonical form: the parsed JSON object re-encoded with sorted keys, no
    whitespace and UTF-8 text (`json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)`), so formatting differences do not change the hash.
    Unparseable argument text is hashed as it is.

    Args:
        arguments: The raw argument text or a decoded mapping.

    Returns:
        64 lowercase hex characters.
    """
    try:
        canonical = json.dumps(
            parse_arguments(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except ArgumentsError:
        canonical = arguments if isinstance(arguments, str) else repr(arguments)
    return hashlib.sha256(canonical.encode("utf-8", errors="surrogatepass")).hexdigest()


class Decision(BaseModel):
    """A decision on an approval-gated tool call.

    Attributes:
        call_id: The call decided on.
        approved: True to run the call, False to deny it.
        arguments_hash: `arguments_hash` of the arguments the decider saw;
            a decision whose hash does not match the call is rejected.
        decided_by: Who decided (user id, e-mail, service name).
        decided_at: When, as the decider's clock says (informational).
        reason: Why; for a denial it becomes the reason the model sees.
    """

    model_config = ConfigDict(frozen=True)

    call_id: str
    approved: bool
    arguments_hash: str
    decided_by: str = ""
    decided_at: datetime | None = None
    reason: str = ""


def check_decision(call: ToolCall, decision: Decision) -> str | None:
    """Check that a decision is bound to `call`.

    Args:
        call: The pending call.
        decision: The decision that claims to answer it.

    Returns:
        `None` if it applies, else the reason it is rejected.
    """
    if decision.call_id != call.call_id:
        return f"decision is for call {decision.call_id!r}, not {call.call_id!r}"
    if decision.arguments_hash != arguments_hash(call.arguments):
        return (
            f"arguments hash does not match call {call.call_id!r}: the decision was made for "
            "other arguments"
        )
    return None


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
        elif decision.approved:
            plan.approved.append(call)
        else:
            reason = decision.reason or "a person denied this tool call"
            who = f" ({decision.decided_by})" if decision.decided_by else ""
            plan.rejected.append(denied(call, f"denied{who}: {reason}"))
    return plan
