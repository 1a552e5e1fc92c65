"""`durable-tools follow`'s rendering: streamed text continues one line; no control characters."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from durable_tools.events import ConversationEvent
from durable_tools.policy_verdict import PolicyVerdict
from durable_tools.worker.events_view import EventPrinter, event_line

AT = datetime(2026, 11, 22, 12, 0, 1, tzinfo=UTC)


def delta(offset: int, text: str, turn: int = 1, attempt: int = 1) -> ConversationEvent:
    return ConversationEvent(
        kind="model_text_delta", at=AT, offset=offset, turn=turn, attempt=attempt, text=text
    )


def test_deltas_of_one_attempt_continue_one_line_and_the_next_event_ends_it() -> None:
    printer = EventPrinter()
    out = "".join(
        [
            printer.feed(ConversationEvent(kind="turn_started", at=AT, offset=0, turn=1)),
            printer.feed(delta(1, "It is ")),
            printer.feed(delta(2, "21 °C\nin Oslo")),
            printer.feed(delta(3, "Again", attempt=2)),  # a retried attempt starts a new line
            printer.feed(ConversationEvent(kind="turn_finished", at=AT, offset=4, turn=1)),
            printer.close(),
        ]
    )
    assert out == (
        "   0 12:00:01 turn_started turn 1\n"
        "   1 12:00:01 model_text_delta turn 1 attempt 1: It is 21 °C\nin Oslo\n"
        "   3 12:00:01 model_text_delta turn 1 attempt 2: Again\n"
        "   4 12:00:01 turn_finished turn 1\n"
    )
    assert printer.close() == ""


def test_a_finished_call_shows_its_attempts_and_duration() -> None:
    event = ConversationEvent(
        kind="tool_call_finished",
        at=AT,
        offset=9,
        call_id="c2",
        tool="fetch",
        outcome="ok",
        attempt=2,
        duration=0.75,
    )
    assert (
        event_line(event) == "   9 12:00:01 tool_call_finished c2 fetch attempt 2 -> ok in 0.750 s"
    )


@given(st.lists(st.text(st.characters(exclude_categories=("Cs",))), min_size=1, max_size=5))
def test_no_control_character_reaches_the_terminal(texts: list[str]) -> None:
    printer = EventPrinter()
    out = "".join(printer.feed(delta(i, t)) for i, t in enumerate(texts))
    out += printer.feed(
        ConversationEvent(kind="tool_progress", at=AT, text=texts[0], tool=texts[-1])
    )
    out += printer.close()
    assert not any(ord(c) < 32 and c not in "\t\n" or 0x7F <= ord(c) <= 0x9F for c in out)
    assert "\x1b" not in out


def test_an_approval_requested_by_a_policy_says_which_rule() -> None:
    verdict = PolicyVerdict(
        policy="refunds",
        version="sha256:353ebad25ec5aa",
        rule="refund-large",
        when="args.amount_cents > 5000",
        outcome="approve",
        approvers=["group:finance"],
    )
    event = ConversationEvent(
        kind="approval_requested", at=AT, offset=7, call_id="c1", tool="refund", policy=verdict
    )
    assert event_line(event).endswith(
        "refund: needs finance approval: args.amount_cents > 5000, rule refund-large "
        "(policy refunds sha256:353ebad25ec5)"
    )
