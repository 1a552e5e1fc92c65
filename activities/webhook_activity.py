"""`notify.webhook-v1`: post one conversation event to one webhook, signed.

The workflow names the webhook; this worker holds its URL and secret
(`App.webhooks`), so neither is recorded in history. A 2xx answer delivers
the event; anything else raises, and the activity's retry policy (set by the
workflow, `workflows/notifications.py`) tries again with the same event id.
The scheme is in `durable_tools.webhooks`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_tools.webhooks import (
    ATTEMPT_HEADER,
    DELIVER_WEBHOOK_ACTIVITY,
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Webhook,
    WebhookDelivery,
    WebhookReceipt,
    sign,
)

__all__ = ["WebhookSender"]

_PERMANENT = frozenset({400, 401, 403, 404, 405, 410, 413, 422})
"""Answers a retry would not change: the delivery fails for good (the error is logged)."""


class WebhookSender:
    """The `notify.webhook-v1` activity, bound to the worker's webhooks.

    Args:
        webhooks: The application's webhooks by name (`App.webhooks`).
    """

    def __init__(self, webhooks: Mapping[str, Webhook]) -> None:
        self.webhooks = dict(webhooks)

    def routes(self) -> dict[str, list[str]]:
        """Each webhook's name and the event kinds it is sent (what plans record)."""
        return {name: sorted(hook.events) for name, hook in sorted(self.webhooks.items())}

    @activity.defn(name=DELIVER_WEBHOOK_ACTIVITY)
    async def deliver_webhook(self, delivery: WebhookDelivery) -> WebhookReceipt:
        """Post `delivery.event` to the webhook it names, signed; raise to be retried.

        Raises:
            ApplicationError: The receiver answered other than 2xx or could
                not be reached (retried), or answered 4xx that a retry would
                not change (`WebhookRefused`, not retried). The message never
                holds the URL or the secret.
        """
        hook = self.webhooks.get(delivery.webhook)
        if hook is None:
            # Another worker version may hold it: retried until the timeout.
            raise ApplicationError(
                f"this worker has no webhook named {delivery.webhook!r}", type="NoSuchWebhook"
            )
        event = delivery.event
        if event.kind not in hook.events:
            return WebhookReceipt(skipped=f"webhook {delivery.webhook!r} is not sent {event.kind}")
        import httpx  # not at import: the plugin's module is imported in the workflow sandbox

        body = event.body()
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "durable-tools-webhooks/1",
            ID_HEADER: event.id,
            "Idempotency-Key": event.id,
            TIMESTAMP_HEADER: str(stamp),
            SIGNATURE_HEADER: sign(hook.secret, stamp, body),
            ATTEMPT_HEADER: str(activity.info().attempt),
        }
        try:
            async with httpx.AsyncClient(timeout=hook.timeout, follow_redirects=False) as client:
                response = await client.post(hook.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise ApplicationError(
                f"webhook {delivery.webhook!r} could not be reached: {type(exc).__name__}",
                type="WebhookUnreachable",
            ) from None
        if 200 <= response.status_code < 300:
            return WebhookReceipt(status=response.status_code)
        refused = response.status_code in _PERMANENT
        raise ApplicationError(
            f"webhook {delivery.webhook!r} answered HTTP {response.status_code}",
            type="WebhookRefused" if refused else "WebhookFailed",
            non_retryable=refused,
        )
