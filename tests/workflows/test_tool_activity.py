"""How a failed tool activity reaches the model (`workflows/tool_activity.py`), without a server."""

from __future__ import annotations

from typing import Any

from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from durable_tools._wire import PlannedCall
from durable_tools.results import ToolCall
from durable_tools.workflows.tool_activity import activity_failure, tool_retry_policy


def _plan(**fields: Any) -> PlannedCall:
    call = ToolCall(call_id="c1", name="lookup", arguments="{}")
    return PlannedCall(call=call, kind="local", arguments_hash="h", summary="lookup()", **fields)


def _error(cause: BaseException, retry_state: RetryState | None = None) -> ActivityError:
    error = ActivityError(
        "activity failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type="tool.lookup",
        activity_id="1",
        retry_state=retry_state,
    )
    error.__cause__ = cause
    return error


def _timeout(kind: TimeoutType) -> TimeoutError:
    return TimeoutError("timed out", type=kind, last_heartbeat_details=[])


def test_a_raising_tool_reads_as_an_execution_error_with_its_attempts() -> None:
    failure = activity_failure(
        _plan(max_attempts=3), _error(ApplicationError("no such order", type="KeyError"))
    )
    assert failure.kind == "execution_error"
    assert failure.reason == "KeyError: no such order after 3 attempts"
    once = activity_failure(_plan(), _error(ApplicationError("boom")))
    assert once.reason == "Error: boom"


def test_a_timeout_is_timed_out_and_a_lost_heartbeat_says_it_may_have_run() -> None:
    timed = activity_failure(_plan(timeout=30), _error(_timeout(TimeoutType.START_TO_CLOSE)))
    assert timed.kind == "timed_out" and "30" in timed.reason
    lost = activity_failure(_plan(heartbeat_timeout=10), _error(_timeout(TimeoutType.HEARTBEAT)))
    assert lost.kind == "timed_out"
    assert "no heartbeat for 10 s" in lost.reason and "may have taken effect" in lost.reason


def test_a_tool_that_is_not_idempotent_is_interrupted_not_retried() -> None:
    failure = activity_failure(
        _plan(at_most_once=True), _error(_timeout(TimeoutType.START_TO_CLOSE))
    )
    assert failure.kind == "interrupted"
    assert "not idempotent" in failure.reason


def test_a_cancelled_activity_is_interrupted() -> None:
    failure = activity_failure(_plan(), _error(CancelledError("cancelled")))
    assert failure.kind == "interrupted" and "cancelled" in failure.reason


def test_any_other_cause_reads_as_its_text() -> None:
    failure = activity_failure(_plan(), _error(RuntimeError("odd")))
    assert failure.kind == "execution_error" and failure.reason == "odd"


def test_the_retry_policy_is_the_tools_and_never_retries_configuration_errors() -> None:
    policy = tool_retry_policy(
        _plan(max_attempts=4, initial_interval=2, non_retryable_error_types=["Refused"])
    )
    assert isinstance(policy, RetryPolicy)
    assert policy.maximum_attempts == 4
    assert policy.initial_interval.total_seconds() == 2
    assert policy.non_retryable_error_types == [
        "Refused",
        "ConfigurationError",
        "PayloadsTooLarge",
    ]
