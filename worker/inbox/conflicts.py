"""The inbox's failures as `Conflict`s: a kind and a sentence a person can read."""

from __future__ import annotations

from typing import Literal

from temporalio.service import RPCError, RPCStatusCode

__all__ = [
    "QUERY_TIMEOUT",
    "UPDATE_TIMEOUT",
    "Conflict",
    "ConflictKind",
    "no_worker",
    "rpc_conflict",
]

ConflictKind = Literal[
    "already_decided",
    "arguments_changed",
    "expired",
    "not_waiting",
    "unknown_call",
    "invalid_answer",
    "invalid_budget",
    "invalid_policy",
    "invalid_grant",
    "not_failed",
    "not_allowed",
    "signature_required",
    "signature_rejected",
    "ended",
    "not_found",
    "no_worker",
    "unavailable",
    "too_many_streams",
]

QUERY_TIMEOUT = 10.0
"""Seconds an operation waits for Temporal and the worker."""

UPDATE_TIMEOUT = 30.0
"""Seconds a decision's or an answer's update waits before `no_worker`.

Longer than `QUERY_TIMEOUT`: when the workflow's 10 in-flight updates are
taken, Temporal refuses one more with `RESOURCE_EXHAUSTED`, and the SDK
retries the refusal with back-off before raising it (about 15 s measured
with temporalio 1.35 and Temporal Server 1.32); the inbox then sends the
signal instead (`InboxService.decide`).
"""


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
        if self.kind in ("invalid_answer", "invalid_budget", "invalid_policy", "invalid_grant"):
            return 422
        if self.kind == "too_many_streams":
            return 429
        return 409


def no_worker(seconds: float = QUERY_TIMEOUT) -> Conflict:
    """`no_worker`: nothing answered within `seconds` (default `QUERY_TIMEOUT`)."""
    return Conflict(
        "no_worker",
        f"No worker answered within {seconds:g} s; is a durable-tools worker running?",
    )


def rpc_conflict(exc: RPCError, what: str) -> Conflict:
    """Temporal's refusal about `what`: `ended`, `not_found` or `unavailable`."""
    lowered = exc.message.lower()
    if exc.status == RPCStatusCode.NOT_FOUND:
        if "completed" in lowered or "closed" in lowered or "already" in lowered:
            return Conflict("ended", f"{what} has already ended.")
        return Conflict("not_found", f"{what} does not exist.")
    return Conflict(
        "unavailable", f"Temporal refused the request ({exc.status.name}): {exc.message}"
    )
