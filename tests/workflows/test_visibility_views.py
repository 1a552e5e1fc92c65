"""What a conversation shows of itself (`workflows/visibility.py`), without a server."""

from __future__ import annotations

from datetime import UTC, datetime

from durable_tools.conversation import ModelFailure, PendingApproval, PendingInteraction
from durable_tools.workflows.visibility import (
    calls_state,
    pending_details,
    pending_kinds,
    settled,
)

AT = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
APPROVAL = PendingApproval(
    call_id="c1",
    tool="refund",
    arguments="{}",
    arguments_hash="h",
    summary="refund(amount=5)",
    requested_at=AT,
    deadline=datetime(2026, 12, 3, 12, 0, tzinfo=UTC),
)
QUESTION = PendingInteraction(
    call_id="q1", tool="ask", arguments="{}", arguments_hash="h", requested_at=AT, deadline=AT
)
FAILURE = ModelFailure(turn=3, type="RateLimited", message="slow down", failed_at=AT)


def test_pending_kinds_name_what_waits_in_a_fixed_order() -> None:
    assert pending_kinds({}, {}, None, None) == ()
    kinds = pending_kinds({"c1": APPROVAL}, {"q1": QUESTION}, "hold", FAILURE)
    assert kinds == ("approval", "interaction", "pause", "model_failed")
    assert pending_kinds({}, {}, "hold", None) == ("pause",)


def test_the_details_list_each_wait_and_how_to_retry() -> None:
    assert pending_details({}, {}, None, None, "wf") == ""
    details = pending_details({"c1": APPROVAL}, {"q1": QUESTION}, "hold", FAILURE, "wf-1")
    assert details.splitlines() == [
        "**Pending**",
        "- approval: `refund(amount=5)` (until 2026-12-03 12:00 UTC)",
        "- question: `ask` call `q1`",
        "- paused: hold",
        "- model_failed (turn 3, RateLimited): slow down",
        "  run it again: `durable-tools retry wf-1`",
    ]


def test_the_calls_state_is_what_the_turn_still_waits_on() -> None:
    assert calls_state({"c1": APPROVAL}, {}, "hold", 1) == "waiting"
    assert calls_state({}, {"q1": QUESTION}, None, 0) == "waiting"
    assert calls_state({}, {}, "hold", 1) == "paused"
    assert calls_state({}, {}, None, 2) == "sleeping"
    assert calls_state({}, {}, None, 0) == "tools"


def test_the_loop_is_settled_when_it_waits_for_someone() -> None:
    assert not settled("model", {}, {}, None)
    assert not settled("tools", {}, {}, None)
    assert settled("idle", {}, {}, None)
    assert settled("tools", {"c1": APPROVAL}, {}, None)
    assert settled("tools", {}, {}, "hold")
    assert settled("model_failed", {}, {}, None)
