"""Transcript helpers: wire outputs, unanswered calls, reconciliation, cancel, append."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter

from durable_tools import (
    AssistantMessage,
    Failure,
    Ok,
    ToolCall,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
    append_turn,
    cancel_all_pending,
    denied,
    find_unanswered_calls,
    interrupted,
    is_reconciled,
    to_tool_call_output,
)


def calls(*ids: str) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(call_id=i, name="t", arguments="{}") for i in ids)


def turn(*ids: str, text: str = "") -> AssistantMessage:
    return AssistantMessage(text=text, tool_calls=calls(*ids))


def out(call_id: str, value: str = "ok") -> ToolCallOutput:
    return to_tool_call_output(Ok(call_id=call_id, tool="t", value=value))


def ids(history: list[TranscriptItem]) -> list[str]:
    labels: list[str] = []
    for item in history:
        if isinstance(item, UserMessage):
            labels.append(f"user:{item.text}")
        elif isinstance(item, AssistantMessage):
            labels.append("turn:" + ",".join(c.call_id for c in item.tool_calls))
        else:
            labels.append(f"out:{item.call_id}:{item.failure_kind or 'ok'}")
    return labels


# to_tool_call_output ------------------------------------------------------------------


def test_a_string_value_is_sent_as_it_is() -> None:
    wire = to_tool_call_output(Ok(call_id="c1", tool="t", value="22 °C in Paris"))
    assert wire == ToolCallOutput(call_id="c1", tool="t", content="22 °C in Paris")


def test_other_values_are_sent_as_compact_json() -> None:
    wire = to_tool_call_output(Ok(call_id="c1", tool="t", value={"temp": 22, "city": "Zürich"}))
    assert wire.content == '{"temp":22,"city":"Zürich"}'
    assert wire.is_error is False and wire.failure_kind is None
    assert to_tool_call_output(Ok(call_id="c1", tool="t", value=None)).content == "null"


def test_a_failure_is_sent_as_an_error_object() -> None:
    wire = to_tool_call_output(Failure(call_id="c1", tool="t", kind="timed_out", reason="slow"))
    assert json.loads(wire.content) == {"error": "timed_out", "reason": "slow"}
    assert wire.is_error is True
    assert wire.failure_kind == "timed_out"


def test_transcript_items_round_trip_through_json() -> None:
    history: list[TranscriptItem] = [UserMessage(text="hi"), turn("c1"), out("c1")]
    adapter = TypeAdapter(list[TranscriptItem])
    assert adapter.validate_json(adapter.dump_json(history)) == history


# find_unanswered_calls / is_reconciled -----------------------------------------------


def test_find_unanswered_calls_in_transcript_order() -> None:
    history: list[TranscriptItem] = [
        UserMessage(text="go"),
        turn("a", "b", "c"),
        out("b"),
    ]
    assert [c.call_id for c in find_unanswered_calls(history)] == ["a", "c"]
    assert not is_reconciled(history)


def test_a_transcript_without_tool_calls_is_reconciled() -> None:
    assert is_reconciled([])
    assert is_reconciled([UserMessage(text="hi"), AssistantMessage(text="hello")])


def test_every_call_answered_once_in_place_is_reconciled() -> None:
    history: list[TranscriptItem] = [
        UserMessage(text="go"),
        turn("a", "b"),
        out("b"),
        out("a"),  # order within the turn's outputs is free
        turn("c"),
        out("c"),
        UserMessage(text="thanks"),
    ]
    assert is_reconciled(history)
    assert find_unanswered_calls(history) == []


@pytest.mark.parametrize(
    "history",
    [
        [turn("a"), out("a"), out("a")],  # two outputs for one call
        [turn("a"), out("a"), out("x")],  # an output for no call
        [out("a"), turn("a")],  # an output before its call
        [turn("a"), UserMessage(text="hm"), out("a")],  # the conversation moved on first
        [turn("a"), turn("b"), out("a"), out("b")],  # outputs of two turns mixed
        [turn("a"), out("a"), turn("a"), out("a")],  # a call id used twice
    ],
    ids=["twice", "stray", "before", "late", "interleaved", "reused-id"],
)
def test_not_reconciled(history: list[TranscriptItem]) -> None:
    assert not is_reconciled(history)


# cancel_all_pending --------------------------------------------------------------------


def test_cancel_all_pending_puts_outputs_right_after_their_turns_outputs() -> None:
    history: list[TranscriptItem] = [
        UserMessage(text="1"),
        turn("a", "b", "c"),
        out("b"),
        UserMessage(text="2"),
        turn("d"),
        turn("e"),
        out("e"),
    ]
    fixed = cancel_all_pending(history, reason="the user cancelled")
    assert ids(fixed) == [
        "user:1",
        "turn:a,b,c",
        "out:b:ok",
        "out:a:cancelled",
        "out:c:cancelled",
        "user:2",
        "turn:d",
        "out:d:cancelled",
        "turn:e",
        "out:e:ok",
    ]
    assert is_reconciled(fixed)
    cancelled_output = fixed[3]
    assert isinstance(cancelled_output, ToolCallOutput)
    assert json.loads(cancelled_output.content) == {
        "error": "cancelled",
        "reason": "the user cancelled",
    }


def test_cancel_all_pending_at_the_end_and_on_a_reconciled_transcript() -> None:
    history: list[TranscriptItem] = [UserMessage(text="go"), turn("a")]
    fixed = cancel_all_pending(history)
    assert ids(fixed) == ["user:go", "turn:a", "out:a:cancelled"]
    assert cancel_all_pending(fixed) == fixed
    assert history == [UserMessage(text="go"), turn("a")]  # not modified


# append_turn ---------------------------------------------------------------------------


def test_append_turn_orders_outputs_like_the_calls() -> None:
    t = turn("a", "b", "c")
    c = t.tool_calls
    history = append_turn(
        [UserMessage(text="go")],
        t,
        [interrupted(c[2]), Ok(call_id="a", tool="t", value=1), to_tool_call_output(denied(c[1]))],
    )
    assert ids(history) == [
        "user:go",
        "turn:a,b,c",
        "out:a:ok",
        "out:b:denied",
        "out:c:interrupted",
    ]
    assert is_reconciled(history)


def test_append_turn_may_leave_calls_pending() -> None:
    history = append_turn([], turn("a", "b"), [Ok(call_id="b", tool="t")])
    assert [c.call_id for c in find_unanswered_calls(history)] == ["a"]


def test_append_turn_rejects_stray_and_double_outputs() -> None:
    with pytest.raises(ValueError, match="answer no call of this turn"):
        append_turn([], turn("a"), [Ok(call_id="zz", tool="t")])
    with pytest.raises(ValueError, match="two outputs for tool call 'a'"):
        append_turn([], turn("a"), [Ok(call_id="a", tool="t"), out("a")])
