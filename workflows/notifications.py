"""Webhook notifications of `AgentWorkflow`: started as activities, never sent from here.

A call that waits for a person carries the worker's webhooks in its plan
(`PlannedCall.notify`: names and the event kinds each is sent, recorded in
history). For each event of that call a webhook is sent, the `Notifier`
starts the `notify.webhook-v1` activity with the webhook's name and the event
(`durable_tools.webhooks.WebhookEvent`); the worker holds the URL and the
secret. The loop never waits for a delivery: it runs beside the
conversation, retried by its retry policy. Deliveries still in flight when
the run continues as new are carried (`CarriedState.notifications`) and
started again in the next run with the same event ids.

Plans recorded before webhooks have no `notify`, so their histories start
no such activity and replay unchanged.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import PlannedCall
    from durable_tools.handler_input import clean_text
    from durable_tools.webhooks import (
        DELIVER_WEBHOOK_ACTIVITY,
        WebhookDelivery,
        WebhookEvent,
        WebhookReceipt,
        event_id,
    )

__all__ = ["DELIVERY_RETRY", "DELIVERY_TIMEOUT", "MCP_QUESTION_WEBHOOKS_PATCH", "Notifier"]

MCP_QUESTION_WEBHOOKS_PATCH = "mcp-question-webhooks"
"""What a running call's MCP server asks (a question, a sampling request or a
link to approve) is sent to the webhooks too; runs recorded before it send
nothing for them."""

DELIVERY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
)
"""Retries of one delivery: 1 s, 2 s, 4 s, ... at most 5 minutes apart."""

DELIVERY_TIMEOUT = timedelta(days=1)
"""How long one event is retried before it is given up (logged by the worker)."""


class Notifier:
    """Starts and tracks the webhook deliveries of one run.

    Args:
        carried: Deliveries the previous run left in flight (started again
            by `restart`).
    """

    def __init__(self, carried: list[WebhookDelivery]) -> None:
        self._carried = list(carried)
        self._in_flight: dict[int, WebhookDelivery] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next = 0

    def restart(self) -> None:
        """Start again what the previous run left in flight (once, in the run's event loop)."""
        carried, self._carried = self._carried, []
        for delivery in carried:
            self._start(delivery)

    def carried(self) -> list[WebhookDelivery]:
        """Deliveries not yet done, in the order they started (the next run's to send)."""
        return [*self._carried, *self._in_flight.values()]

    def notify(
        self,
        plan: PlannedCall,
        kind: str,
        *,
        requested_at: datetime,
        round: str = "",
        patch: str | None = None,
        **fields: Any,
    ) -> None:
        """Send `kind` about `plan`'s call to each webhook its plan says is sent it.

        Args:
            plan: The call's plan (its `notify` routes).
            kind: A `WebhookEventKind`.
            requested_at: When the call started waiting (the event's round
                unless `round` is given).
            round: Which occurrence (a reminder's number), default the wait's start.
            patch: A `workflow.patched` id the sending depends on: a run
                whose history was recorded without it sends nothing here
                (checked only when a webhook is to be sent, so histories
                without webhooks carry no marker).
            **fields: `WebhookEvent` fields (`approvers`, `deadline`, `outcome`, `decided_by`).
        """
        routes = [name for name, kinds in sorted((plan.notify or {}).items()) if kind in kinds]
        if not routes or (patch is not None and not workflow.patched(patch)):
            return
        call = plan.call
        which = round or requested_at.isoformat()
        info = workflow.info()
        event = WebhookEvent.model_validate(
            {
                "id": event_id(info.first_execution_run_id, call.call_id, kind, which),
                "kind": kind,
                "workflow_id": info.workflow_id,
                "call_id": clean_text(call.call_id, 200),
                "tool": clean_text(call.name, 200),
                "summary": clean_text(plan.summary, 400),
                "at": workflow.now(),
                "round": which,
                # Text a person sent (who decided) is cleaned: the activity's input must encode.
                **{
                    k: clean_text(v, 200) if isinstance(v, str) else v
                    for k, v in fields.items()
                    if v is not None
                },
            }
        )
        for name in routes:
            self._start(WebhookDelivery(webhook=name, event=event))

    def _start(self, delivery: WebhookDelivery) -> None:
        key, self._next = self._next, self._next + 1
        self._in_flight[key] = delivery
        task = asyncio.create_task(self._deliver(key, delivery))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, key: int, delivery: WebhookDelivery) -> None:
        event = delivery.event
        try:
            await workflow.execute_activity(
                DELIVER_WEBHOOK_ACTIVITY,
                delivery,
                result_type=WebhookReceipt,
                start_to_close_timeout=timedelta(seconds=60),
                schedule_to_close_timeout=DELIVERY_TIMEOUT,
                retry_policy=DELIVERY_RETRY,
                summary=clean_text(f"notify {delivery.webhook}: {event.kind} {event.call_id}", 200),
            )
        except ActivityError as exc:
            workflow.logger.warning(
                "webhook %s: event %s (%s) was not delivered: %s",
                delivery.webhook,
                event.id,
                event.kind,
                exc.cause or exc,
            )
        finally:
            self._in_flight.pop(key, None)
