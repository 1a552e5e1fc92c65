"""`ActivityEvents`: what reaches the stream, in how many signals (a recording sender)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_tools.activities import activity_events
from durable_tools.activities.activity_events import ActivityEvents, detached_sends
from durable_tools.events import MAX_DELTA_TEXT, ConversationEvent


class Recorder:
    def __init__(self, delay: float = 0.0) -> None:
        self.batches: list[list[ConversationEvent]] = []
        self.delay = delay

    async def __call__(self, batch: list[ConversationEvent]) -> None:
        await asyncio.sleep(self.delay)
        self.batches.append(batch)


async def test_nothing_is_sent_when_the_attempt_ends_within_the_hold() -> None:
    sent = Recorder()
    async with ActivityEvents(hold=0.5, interval=0.1, send=sent) as events:
        events.publish("tool_attempt_started", call_id="c1", tool="t", attempt=1)
        for i in range(20):
            events.replace("progress", "tool_progress", call_id="c1", tool="t", text=str(i))
        await asyncio.sleep(0.2)
        events.drop()
    assert sent.batches == []


async def test_an_attempt_within_the_hold_or_without_events_starts_no_task() -> None:
    # A task per attempt was measurable at 10,000 turns: the sender starts
    # only when there is something to send and the hold has passed.
    sent = Recorder()
    before = len(asyncio.all_tasks())
    async with ActivityEvents(hold=0.5, interval=0.1, send=sent) as events:
        events.publish("tool_attempt_started", call_id="c1", tool="t", attempt=1)
        await asyncio.sleep(0.05)
        assert len(asyncio.all_tasks()) == before
        events.drop()
    async with ActivityEvents(interval=0.1, send=sent) as events:
        await asyncio.sleep(0.05)
        assert len(asyncio.all_tasks()) == before
    assert sent.batches == []


async def test_a_failure_event_and_a_signal_under_way_never_hold_up_the_attempt() -> None:
    """A saturated worker answers signals slowly: the attempt returns at once, the events follow."""
    sent = Recorder(delay=0.5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with ActivityEvents(interval=0.01, send=sent) as events:
        events.publish("tool_attempt_started", call_id="c1", tool="t", attempt=2)
        await asyncio.sleep(0.05)  # its signal is under way
        events.publish("tool_attempt_failed", call_id="c1", tool="t", attempt=2, reason="x")
        await events.flush(wait=False)
    assert loop.time() - started < 0.4  # neither signal was waited for
    assert detached_sends() >= 1
    while detached_sends():
        await asyncio.sleep(0.05)
    # Both arrive, in order.
    kinds = [[e.kind for e in b] for b in sent.batches]
    assert kinds == [["tool_attempt_started"], ["tool_attempt_failed"]]


async def test_background_sends_are_bounded_and_the_excess_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(activity_events, "MAX_DETACHED_SENDS", 2)
    dropped = activity_events.DROPPED.batches
    sent = Recorder(delay=0.2)
    for n in range(4):
        async with ActivityEvents(send=sent) as events:
            events.publish("tool_attempt_failed", call_id=f"c{n}", tool="t", attempt=1)
            await events.flush(wait=False)
    assert activity_events.DROPPED.batches - dropped == 2
    while detached_sends():
        await asyncio.sleep(0.05)
    assert len(sent.batches) == 2


async def test_the_hold_counts_from_the_start_of_the_attempt() -> None:
    sent = Recorder()
    async with ActivityEvents(hold=0.3, interval=10, send=sent) as events:
        await asyncio.sleep(0.2)
        events.publish("tool_attempt_started", call_id="c1", tool="t", attempt=1)
        await asyncio.sleep(0.05)
        assert sent.batches == []  # 0.25 s in: held
        await asyncio.sleep(0.2)  # 0.45 s in: sent, not 0.3 s after the publish
        assert [[e.kind for e in b] for b in sent.batches] == [["tool_attempt_started"]]


async def test_after_the_hold_one_signal_carries_the_start_and_the_latest_progress() -> None:
    sent = Recorder()
    async with ActivityEvents(hold=0.2, interval=10, send=sent) as events:
        events.publish("tool_attempt_started", call_id="c1", tool="t", attempt=1)
        for i in range(5):
            events.replace("progress", "tool_progress", call_id="c1", tool="t", text=str(i))
        await asyncio.sleep(0.4)
        events.replace("progress", "tool_progress", call_id="c1", tool="t", text="late")
        await asyncio.sleep(0.1)  # within the interval: held back
        assert [[(e.kind, e.text) for e in b] for b in sent.batches] == [
            [("tool_attempt_started", None), ("tool_progress", "4")]
        ]
        events.drop()
    assert len(sent.batches) == 1


async def test_text_deltas_are_joined_per_interval_and_flushed_in_order() -> None:
    sent = Recorder(delay=0.05)
    pieces = [f"w{i} " for i in range(100)]
    async with ActivityEvents(interval=0.1, send=sent) as events:
        for piece in pieces:
            events.text(piece, turn=3, attempt=1)
            await asyncio.sleep(0.005)
        await events.flush()
    deltas = [e for b in sent.batches for e in b]
    assert all(e.kind == "model_text_delta" and e.turn == 3 for e in deltas)
    assert "".join(e.text or "" for e in deltas) == "".join(pieces)
    # ~0.5 s of pieces, at most one signal per 0.1 s (+ the send time): far fewer than 100.
    assert 2 <= len(sent.batches) <= 8, len(sent.batches)


async def test_a_failing_sender_loses_its_batch_and_never_raises() -> None:
    async def broken(batch: list[ConversationEvent]) -> None:
        raise ConnectionError("no server")

    async with ActivityEvents(send=broken) as events:
        events.publish("tool_attempt_failed", call_id="c", tool="t", attempt=1, reason="x")
        await events.flush()
    assert events.signals == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(st.characters(exclude_categories=()), max_size=3000), max_size=12))
def test_any_text_splits_into_bounded_deltas_that_join_back(pieces: list[str]) -> None:
    sent = Recorder()

    async def go() -> None:
        async with ActivityEvents(interval=0, send=sent) as events:
            for piece in pieces:
                events.text(piece, turn=1, attempt=1)
            await events.flush()

    asyncio.run(go())
    deltas = [e for b in sent.batches for e in b]
    assert all(0 < len(e.text or "") <= MAX_DELTA_TEXT for e in deltas)
    assert all(e.model_dump_json() for e in deltas)  # lone surrogates included
    expected = "".join(p.encode("utf-8", "replace").decode("utf-8") for p in pieces)
    assert "".join(e.text or "" for e in deltas) == expected


class Gate:
    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.asked = 0

    async def __call__(self) -> bool:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


async def test_text_nobody_follows_is_never_sent() -> None:
    sent, gate = Recorder(), Gate(False)
    async with ActivityEvents(interval=0.05, send=sent, gate=gate, recheck=10) as events:
        for i in range(20):
            events.text(f"w{i} ", turn=1, attempt=1)
            await asyncio.sleep(0.01)
        await events.flush()
    assert sent.batches == [] and gate.asked == 1  # asked once, not per piece


async def test_a_reader_arriving_mid_turn_gets_the_text_from_its_first_character() -> None:
    sent, gate = Recorder(), Gate(False, True)
    async with ActivityEvents(interval=0.05, send=sent, gate=gate, recheck=0.2) as events:
        events.text("It is ", turn=1, attempt=1)
        await asyncio.sleep(0.1)  # nobody follows yet: held back
        assert sent.batches == []
        await asyncio.sleep(0.3)  # asked again without new text: now followed
        assert "".join(e.text or "" for b in sent.batches for e in b) == "It is "
        events.text("21 °C.", turn=1, attempt=1)
        await events.flush()
    assert "".join(e.text or "" for b in sent.batches for e in b) == "It is 21 °C."
    assert gate.asked == 2


async def test_a_gate_that_fails_counts_as_nobody_following() -> None:
    async def broken() -> bool:
        raise RuntimeError("no such query")

    sent = Recorder()
    async with ActivityEvents(interval=0.05, send=sent, gate=broken, recheck=10) as events:
        events.text("hidden", turn=1, attempt=1)
        events.publish("model_attempt_failed", turn=1, attempt=1, reason="x")
        await events.flush()
    assert [[e.kind for e in b] for b in sent.batches] == [["model_attempt_failed"]]


@settings(max_examples=50, deadline=None)
@given(st.text(st.characters(exclude_categories=())), st.text(st.characters(exclude_categories=())))
def test_any_progress_or_reason_text_reaches_the_stream(text: str, reason: str) -> None:
    sent = Recorder()

    async def go() -> None:
        async with ActivityEvents(interval=0, send=sent) as events:
            events.replace("progress", "tool_progress", call_id=text, tool="t", text=text)
            events.publish("tool_attempt_failed", call_id="c", tool=text, attempt=1, reason=reason)
            await events.flush()

    asyncio.run(go())
    sent_events = [e for b in sent.batches for e in b]
    assert {e.kind for e in sent_events} == {"tool_progress", "tool_attempt_failed"}
    assert all(e.model_dump_json() for e in sent_events)


async def test_a_local_activity_s_events_are_never_sent() -> None:
    """`enabled=False` (a local activity: a signal would wait for its own workflow task)."""
    sent = Recorder()
    async with ActivityEvents(hold=0.0, interval=0.01, send=sent, enabled=False) as events:
        events.publish("tool_attempt_started", call_id="c1", tool="t", attempt=1)
        events.replace("progress", "tool_progress", call_id="c1", tool="t", text="1")
        events.text("hello", turn=1)
        await asyncio.sleep(0.05)
        await events.flush()
    assert sent.batches == [] and events.signals == 0
