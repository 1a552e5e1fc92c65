"""Notifications through signed webhooks: what is sent, and how it is signed.

An application names its webhooks on the worker (`App(webhooks={"ops":
Webhook(url=..., secret=..., events=[...])})`). When a call's approval or
question starts waiting, is decided or answered, expires, is reminded or
escalated, the workflow starts the `notify.webhook-v1` activity with the
webhook's *name* and the event (`WebhookDelivery`); the worker that runs the
activity holds the URL and the secret, so neither ever enters workflow
history (DESIGN.md invariant 4). The activity's retry policy retries a
failed delivery; every attempt of one event carries the same id.

The scheme (like Stripe's and Standard Webhooks'): each request is a `POST`
of the event as compact JSON (`WebhookEvent.body`) with the headers

| header | value |
|---|---|
| `Durable-Tools-Webhook-Id`, `Idempotency-Key` | the event's id (`event_id`), on every attempt |
| `Durable-Tools-Webhook-Timestamp` | Unix seconds when this attempt was signed |
| `Durable-Tools-Webhook-Signature` | `t=<timestamp>,v1=<hex HMAC-SHA256("<timestamp>.<body>")>` |
| `Durable-Tools-Webhook-Attempt` | the activity's attempt (1 first) |

A receiver verifies with `verify_signature` (or its own HMAC), refuses a
timestamp older than its tolerance (5 minutes by default: a replayed
request), and keeps the ids it accepted so a retried event (its answer was
lost) is accepted once.

This module is pure (no I/O): workflow code imports it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, Field

from durable_tools.errors import ConfigurationError

__all__ = [
    "ATTEMPT_HEADER",
    "DELIVER_WEBHOOK_ACTIVITY",
    "ID_HEADER",
    "SIGNATURE_HEADER",
    "SIGNATURE_TOLERANCE",
    "TIMESTAMP_HEADER",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookEventKind",
    "WebhookReceipt",
    "event_id",
    "sign",
    "verify_signature",
]

DELIVER_WEBHOOK_ACTIVITY: Final[str] = "notify.webhook-v1"
"""The activity that posts one event to one webhook."""

ID_HEADER: Final[str] = "Durable-Tools-Webhook-Id"
TIMESTAMP_HEADER: Final[str] = "Durable-Tools-Webhook-Timestamp"
SIGNATURE_HEADER: Final[str] = "Durable-Tools-Webhook-Signature"
ATTEMPT_HEADER: Final[str] = "Durable-Tools-Webhook-Attempt"

SIGNATURE_TOLERANCE: Final[float] = 300.0
"""Seconds a signature's timestamp may lie from the receiver's clock (`verify_signature`)."""

WebhookEventKind = Literal[
    "approval_requested",
    "approval_decided",
    "approval_expired",
    "approval_reminder",
    "approval_escalated",
    "question_asked",
    "question_answered",
    "question_expired",
]
"""What a webhook can be told: an approval or question started waiting, was
decided (answered), expired, was reminded or escalated."""

_KINDS: Final = frozenset(get_args(WebhookEventKind))


@dataclass(frozen=True, kw_only=True)
class Webhook:
    """One webhook an application notifies (held by the worker, never recorded).

    Attributes:
        url: Where events are posted (`https://` or `http://`).
        secret: The HMAC-SHA256 key (at least 16 bytes); a receiver holds it too.
        events: The kinds it is sent (a set; default: every `WebhookEventKind`).
        timeout: Seconds one attempt may take (default 10).

    Raises:
        ConfigurationError: Another scheme, a short secret, an unknown event kind.
    """

    url: str
    secret: str = field(repr=False)
    events: AbstractSet[str] = field(default=_KINDS)
    timeout: float = 10.0

    def __post_init__(self) -> None:
        """Check the URL, the secret and the event kinds."""
        if not self.url.lower().startswith(("https://", "http://")):
            raise ConfigurationError("Webhook(url=...) must be an https:// or http:// URL")
        if len(self.secret.encode()) < 16:
            raise ConfigurationError("Webhook(secret=...) needs at least 16 bytes")
        unknown = set(self.events) - _KINDS
        if unknown:
            raise ConfigurationError(
                f"Webhook(events=...) names unknown kinds {sorted(unknown)}; "
                f"known: {sorted(_KINDS)}"
            )
        object.__setattr__(self, "events", frozenset(self.events))


class WebhookEvent(BaseModel):
    """One notification, as the receiver reads it (the request's JSON body).

    Attributes:
        id: The event's id (`event_id`): stable across attempts and replays.
        kind: What happened (`WebhookEventKind`).
        workflow_id: The conversation.
        call_id: The call that waits (or waited).
        tool: The call's tool.
        summary: The call in one line (`refund(order='A-1', …)`).
        at: When it happened (the workflow's clock).
        round: Which occurrence: the wait's start for most kinds, and the
            reminder's number (`n1`, ...) or the escalation.
        approvers: Who may decide now (`group:NAME`, `user:ID`).
        deadline: When the wait expires.
        outcome: For decided or answered: `approved`, `denied`, `ok`, ...
        decided_by: Who decided or answered, when known.
    """

    id: str
    kind: WebhookEventKind
    workflow_id: str
    call_id: str
    tool: str
    summary: str = ""
    at: datetime
    round: str = ""
    approvers: list[str] = Field(default_factory=list[str])
    deadline: datetime | None = None
    outcome: str = ""
    decided_by: str = ""

    def body(self) -> bytes:
        """The request body: compact JSON with sorted keys (what the signature covers)."""
        data = self.model_dump(mode="json")
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


class WebhookDelivery(BaseModel):
    """The `notify.webhook-v1` activity's input: which webhook (by name), which event."""

    webhook: str
    event: WebhookEvent


class WebhookReceipt(BaseModel):
    """The activity's result: the receiver's HTTP status (a 2xx), or why nothing was sent."""

    status: int = 0
    skipped: str = ""


def event_id(run: str, call_id: str, kind: str, round: str) -> str:
    """The id of one event: the same on every attempt, replay and continue-as-new.

    Args:
        run: The conversation's first run id (`workflow.info().first_execution_run_id`):
            a reused workflow id starts another conversation.
        call_id: The call.
        kind: The event kind.
        round: Which occurrence (the wait's start, the reminder's number).

    Returns:
        `dtw_` and 40 hex digits of SHA-256 over the four, newline-separated.
    """
    text = "\n".join([run, call_id, kind, round]).encode("utf-8", "surrogatepass")
    return "dtw_" + hashlib.sha256(text).hexdigest()[:40]


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value: `t=<timestamp>,v1=<hex HMAC-SHA256>`.

    Args:
        secret: The webhook's secret.
        timestamp: Unix seconds of this attempt.
        body: The request body.
    """
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify_signature(
    secret: str, header: str, body: bytes, now: float, tolerance: float = SIGNATURE_TOLERANCE
) -> bool:
    """Whether `header` signs `body` with `secret`, at a time within `tolerance` of `now`.

    Args:
        secret: The webhook's secret.
        header: The `Durable-Tools-Webhook-Signature` header.
        body: The raw request body, as received.
        now: The receiver's clock (Unix seconds).
        tolerance: Seconds the signed timestamp may lie from `now` (default 300).

    Returns:
        True only for a well-formed header whose `v1` matches (compared in
        constant time).
    """
    parts: dict[str, Any] = {}
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if sep:
            parts.setdefault(key, value)
    try:
        timestamp = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance:
        return False
    expected = sign(secret, timestamp, body).encode()
    return hmac.compare_digest(f"t={timestamp},v1={parts.get('v1', '')}".encode(), expected)
