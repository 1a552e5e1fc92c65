"""Reminders and escalation of one waiting approval, by workflow timers.

`run_clock` runs beside a call's wait for its decision (`TurnCalls.
traced_decision` starts it and cancels it when the wait ends). It sleeps
until the next step of the call's escalation rule (`durable_tools.escalation`,
recorded in the plan's policy verdict), then, if the call still waits:

- the reminder: marks the pending approval reminded, publishes
  `approval_reminder` and notifies the webhooks;
- the escalation: replaces the approvers with the rule's `escalate_to`
  (a signed decision is then required, so the groups count), publishes
  `approval_escalated` and notifies.

Each step is a timer with a summary in history (`reminder of ...`,
`escalation of ... to group:oncall`), and where the wait stands is in the
pending approval, which continue-as-new carries: the next run's clock
sleeps only for what is left. Plans without an escalation rule (and every
history recorded before it existed) start no clock, so they replay unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow

from durable_tools.workflows.decision_book import DecisionBook

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import PlannedCall
    from durable_tools.escalation import EscalationState, next_step
    from durable_tools.handler_input import clean_text

__all__ = ["escalation_of", "run_clock"]


def escalation_of(plan: PlannedCall) -> bool:
    """Whether `plan`'s call has a reminder or an escalation to run."""
    verdict = plan.policy
    return verdict is not None and verdict.outcome == "approve" and verdict.escalation is not None


async def run_clock(
    plan: PlannedCall,
    book: DecisionBook,
    event: Callable[..., None],
    publish: Callable[[], None],
) -> None:
    """Fire the call's reminder and escalation while it waits (cancelled when it ends).

    Args:
        plan: The waiting call's plan (its verdict's `escalation`).
        book: The decision book holding its pending approval.
        event: Publishes a `ConversationEvent`.
        publish: Publishes what is pending (search attributes, details).
    """
    call_id = plan.call.call_id
    rule = plan.policy.escalation if plan.policy is not None else None
    if rule is None:
        return
    while True:
        pending = book.approvals.get(call_id)
        if pending is None or call_id in book.decisions:
            return
        state = pending.escalation or EscalationState.start(rule, pending.requested_at)
        if pending.escalation is None:
            book.approvals[call_id] = pending = pending.model_copy(update={"escalation": state})
        step = next_step(state)
        if step is None:
            return
        kind, at = step
        what = (
            f"reminder of {plan.summary}"
            if kind == "reminder"
            else f"escalation of {plan.summary} to {', '.join(rule.escalate_to)}"
        )
        delay = (at - workflow.now()).total_seconds()
        if delay > 0:
            await workflow.sleep(delay, summary=clean_text(what, 200))
        pending = book.approvals.get(call_id)
        if pending is None or call_id in book.decisions or pending.escalation is None:
            return
        now = workflow.now()
        fields: dict[str, Any] = {"call_id": call_id, "tool": plan.call.name}
        if kind == "reminder":
            state = pending.escalation.model_copy(update={"reminded_at": now})
            book.approvals[call_id] = pending.model_copy(update={"escalation": state})
            event("approval_reminder", **fields, outcome="reminder")
            book.notifier.notify(
                plan,
                "approval_reminder",
                requested_at=pending.requested_at,
                round=f"reminder@{pending.requested_at.isoformat()}",
                approvers=pending.approvers,
                deadline=pending.deadline,
            )
        else:
            state = pending.escalation.model_copy(
                update={"escalated_at": now, "escalated_from": list(pending.approvers)}
            )
            approvers = list(rule.escalate_to)
            book.approvals[call_id] = pending.model_copy(
                update={"escalation": state, "approvers": approvers, "signed": True}
            )
            event(
                "approval_escalated",
                **fields,
                outcome="escalated",
                reason=clean_text(
                    f"approvers {', '.join(pending.approvers) or 'anyone'} -> "
                    f"{', '.join(approvers)}",
                    500,
                ),
            )
            book.notifier.notify(
                plan,
                "approval_escalated",
                requested_at=pending.requested_at,
                round=f"escalation@{pending.requested_at.isoformat()}",
                approvers=approvers,
                deadline=pending.deadline,
            )
        publish()
