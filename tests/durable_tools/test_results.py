"""Tool results and the synthesizers for outputs no tool produced."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import TypeAdapter

from durable_tools import (
    Failure,
    Ok,
    ToolCall,
    ToolResult,
    cancelled,
    denied,
    execution_error,
    expired,
    failed,
    interrupted,
    timed_out,
)
from durable_tools.results import FAILURE_KINDS

CALL = ToolCall(call_id="call_1", name="pay", arguments='{"amount": 5}')


@pytest.mark.parametrize(
    ("synthesize", "kind"),
    [
        (denied, "denied"),
        (cancelled, "cancelled"),
        (interrupted, "interrupted"),
        (expired, "expired"),
        (timed_out, "timed_out"),
    ],
)
def test_synthesizers_bind_the_call_and_have_a_default_reason(
    synthesize: Callable[[ToolCall], Failure], kind: str
) -> None:
    failure = synthesize(CALL)
    assert (failure.call_id, failure.tool, failure.kind) == ("call_1", "pay", kind)
    assert failure.reason
    assert kind in FAILURE_KINDS


def test_cancelled_and_interrupted_tell_apart_never_started_and_maybe_ran() -> None:
    assert "before it started" in cancelled(CALL).reason
    assert "may have taken effect" in interrupted(CALL).reason


def test_reasons_can_be_given() -> None:
    assert denied(CALL, "over budget").reason == "over budget"
    assert expired(CALL, "no decision within 7 days").reason == "no decision within 7 days"
    assert execution_error(CALL, "KeyError: 'id'") == Failure(
        call_id="call_1", tool="pay", kind="execution_error", reason="KeyError: 'id'"
    )


def test_timed_out_names_the_timeout_in_seconds() -> None:
    assert timed_out(CALL, 2.5).reason == "the tool did not finish within 2.5 s"
    assert timed_out(CALL).reason == "the tool did not finish"


def test_failed_accepts_application_kinds() -> None:
    failure = failed(CALL, "rate_limited", "retry in 30 s")
    assert failure.kind == "rate_limited" and failure.kind not in FAILURE_KINDS


def test_results_round_trip_through_json_by_status() -> None:
    adapter = TypeAdapter(list[ToolResult])
    results = [Ok(call_id="a", tool="t", value={"x": [1, 2]}), denied(CALL)]
    assert adapter.validate_json(adapter.dump_json(results)) == results
