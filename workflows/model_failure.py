"""What a failed model turn looks like to an operator (pure; used by `AgentWorkflow`).

The model activity is retried with a bounded policy (`ModelRetry`); when it
fails for good, `AgentWorkflow` enters state `model_failed` with the
`ModelFailure` built here and waits for `retry`, a new message or `cancel`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from durable_tools.conversation import MAX_FAILURE_MESSAGE_CHARS, ModelFailure, ModelRetry

__all__ = ["NEVER_RETRIED", "NON_RETRYABLE_TYPES", "describe_model_failure", "model_retry_policy"]

NEVER_RETRIED: Final[tuple[str, ...]] = ("ConfigurationError", "PayloadsTooLarge")
"""Error types no activity of the loop retries (model or tool): a configuration
error, and a result over Temporal's payload limit (retried, it fails again)."""

NON_RETRYABLE_TYPES: Final[tuple[str, ...]] = (*NEVER_RETRIED, "ModelOutputInvalid")
"""Error types the model activity never retries, beside non-retryable `ApplicationError`s."""

_TIMEOUTS: Final[dict[TimeoutType, str]] = {
    TimeoutType.START_TO_CLOSE: "StartToClose",
    TimeoutType.SCHEDULE_TO_START: "ScheduleToStart",
    TimeoutType.SCHEDULE_TO_CLOSE: "ScheduleToClose",
    TimeoutType.HEARTBEAT: "Heartbeat",
}


def model_retry_policy(retry: ModelRetry) -> RetryPolicy:
    """The retry policy of the model activity (with `retry.timeout` as schedule-to-close).

    Args:
        retry: The conversation's or agent's `ModelRetry`.

    Returns:
        Exponential backoff from `initial_interval` to `maximum_interval`, at
        most `max_attempts` attempts; configuration errors, oversized results
        and unrecordable model output are never retried.
    """
    return RetryPolicy(
        initial_interval=timedelta(seconds=retry.initial_interval),
        maximum_interval=timedelta(seconds=retry.maximum_interval),
        maximum_attempts=retry.max_attempts,
        non_retryable_error_types=list(NON_RETRYABLE_TYPES),
    )


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    # The activity already bounds what it raises; the prefix added here, and
    # failures from elsewhere (the server's timeouts), are cut to the same length.
    limit = MAX_FAILURE_MESSAGE_CHARS
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _root(error: BaseException) -> BaseException:
    """The innermost `ApplicationError` or timeout under an `ActivityError`."""
    found: BaseException = error
    cause = error.__cause__
    while isinstance(cause, FailureError):
        found = cause
        if isinstance(cause, ApplicationError):
            break
        cause = cause.__cause__
    return found


def describe_model_failure(
    error: ActivityError, *, retry: ModelRetry, turn: int, now: datetime
) -> ModelFailure:
    """The `ModelFailure` an operator sees for a model activity that failed for good.

    Args:
        error: What `workflow.execute_activity` raised.
        retry: The retry policy the activity ran with (named in the message).
        turn: The model turn (from 1).
        now: `workflow.now()`.

    Returns:
        The failure: the message of the last attempt's error (one line, cut to
        `MAX_FAILURE_MESSAGE_CHARS`), its type, and whether retries ran out.
    """
    root = _root(error)
    state = error.retry_state
    exhausted = state in (RetryState.MAXIMUM_ATTEMPTS_REACHED, RetryState.TIMEOUT)
    if isinstance(root, ApplicationError):
        kind, message = root.type or "ApplicationError", root.message
    elif isinstance(root, TimeoutError):
        kind = _TIMEOUTS.get(root.type, "Timeout") if root.type is not None else "Timeout"
        message = f"the model activity timed out ({kind})"
        last = root.__cause__
        if isinstance(last, FailureError):
            message += f"; last failure: {last.message}"
    else:
        kind, message = type(root).__name__, str(root)
    if state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
        message = f"retries ran out after {retry.max_attempts} attempts: {message}"
    elif state == RetryState.TIMEOUT:
        message = f"retries ran out after {retry.timeout:g} s: {message}"
    return ModelFailure(
        message=_one_line(message or kind),
        type=kind,
        retries_exhausted=exhausted,
        turn=turn,
        failed_at=now,
    )
