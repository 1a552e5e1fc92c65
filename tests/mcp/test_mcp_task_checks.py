"""A server's task answers, checked on the worker (hypothesis): a state, a result or a Failure.

`task_state_of` reads a `CreateTaskResult` or a `tasks/get` answer, any JSON
a server sends: it returns a task state whose poll interval is bounded and
which travels as an activity result, or the task's `CallToolResult`, or
raises `ToolFailure` (a `Failure` the model reads); never anything else.
"""

from __future__ import annotations

import json
import math
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_tools.mcp.tasks import INVALID_TASK, task_state_of
from durable_tools.tool_tasks import (
    POLL_DEFAULT_SECONDS,
    POLL_MAX_SECONDS,
    POLL_MIN_SECONDS,
    TaskState,
    poll_seconds,
)
from durable_tools.tools import ToolFailure

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.just("\ud800"),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)

numbers = st.integers() | st.floats() | st.just(-1) | st.just(10**30) | json_values
statuses = st.sampled_from(["working", "input_required", "completed", "failed", "cancelled"])
form = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}

answers = st.fixed_dictionaries(
    {},
    optional={
        "taskId": st.just("t-1") | json_values,
        "status": statuses | json_values,
        "statusMessage": st.text(max_size=600) | json_values,
        "ttlMs": numbers,
        "pollIntervalMs": numbers,
        "inputRequests": st.just({"k": form}) | json_values,
        "result": st.just({"content": [{"type": "text", "text": "ok"}]}) | json_values,
        "error": st.just({"code": -32603, "message": "boom"}) | json_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(raw=answers, expected=st.sampled_from([None, "t-1"]))
def test_any_task_answer_is_a_state_a_result_or_a_failure(
    raw: dict[str, Any], expected: str | None
) -> None:
    try:
        out = task_state_of("srv", raw, expected_id=expected)
    except ToolFailure as failure:
        assert failure.kind and failure.reason
        return
    if isinstance(out, types.CallToolResult):
        assert raw.get("status") == "completed"
        return
    assert isinstance(out, TaskState)
    assert out.status in ("working", "input_required")
    assert POLL_MIN_SECONDS <= out.poll_seconds <= POLL_MAX_SECONDS
    assert out.ttl_seconds is None or 0 < out.ttl_seconds < math.inf
    assert len(out.message) <= 500 and len(out.task_id) <= 256
    # It crosses the activity boundary: it must serialize (no lone surrogates, no NaN).
    json.dumps(out.model_dump(mode="json"), ensure_ascii=False, allow_nan=False).encode()


@given(interval=numbers)
def test_the_poll_interval_is_bounded(interval: Any) -> None:
    seconds = poll_seconds(interval)
    assert POLL_MIN_SECONDS <= seconds <= POLL_MAX_SECONDS


@pytest.mark.parametrize(
    ("interval", "seconds"),
    [
        (-5, POLL_MIN_SECONDS),
        (0, POLL_MIN_SECONDS),
        (200, POLL_MIN_SECONDS),
        (2500, 2.5),
        (10**12, POLL_MAX_SECONDS),
        (float("nan"), POLL_DEFAULT_SECONDS),
        ("5000", POLL_DEFAULT_SECONDS),
        (True, POLL_DEFAULT_SECONDS),
        (None, POLL_DEFAULT_SECONDS),
    ],
)
def test_named_poll_intervals(interval: Any, seconds: float) -> None:
    assert poll_seconds(interval) == seconds


@pytest.mark.parametrize(
    ("raw", "expected", "says"),
    [
        ({"taskId": 7, "status": "working"}, None, "task id"),
        ({"taskId": "a\x00b", "status": "working"}, None, "task id"),
        ({"taskId": "t" * 257, "status": "working"}, None, "task id"),
        ({"taskId": "t-2", "status": "working"}, "t-1", "another task"),
        ({"taskId": "t-1", "status": "done"}, "t-1", "status"),
        ({"taskId": "t-1", "status": "completed"}, "t-1", "without a result"),
        ({"taskId": "t-1", "status": "completed", "result": {"content": 3}}, "t-1", "no CallTool"),
        ({"taskId": "t-1", "status": "input_required", "inputRequests": 5}, "t-1", "not MCP"),
    ],
)
def test_bogus_answers_are_invalid_task(
    raw: dict[str, Any], expected: str | None, says: str
) -> None:
    with pytest.raises(ToolFailure) as caught:
        task_state_of("srv", raw, expected_id=expected)
    assert caught.value.kind == INVALID_TASK
    assert says in caught.value.reason


def test_a_failed_task_says_why_and_a_cancelled_one_says_so() -> None:
    with pytest.raises(ToolFailure, match="the task failed: boom"):
        task_state_of(
            "srv", {"taskId": "t", "status": "failed", "error": {"code": 1, "message": "boom"}}
        )
    with pytest.raises(ToolFailure, match="cancelled the task: quota"):
        task_state_of("srv", {"taskId": "t", "status": "cancelled", "statusMessage": "quota"})


def test_input_required_keeps_the_checked_requests() -> None:
    state = task_state_of(
        "srv", {"taskId": "t", "status": "input_required", "inputRequests": {"k": form}}
    )
    assert isinstance(state, TaskState) and state.input_required is not None
    assert [r.key for r in state.input_required.requests] == ["k"]
    assert state.status == "input_required"
