"""`safe_turn`: every string of a model's turn becomes UTF-8 encodable (no server needed)."""

from __future__ import annotations

from durable_tools.activities.model_output import MAX_NAME_CHARS, safe_text, safe_turn
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage


def test_a_clean_turn_is_returned_as_it_is() -> None:
    turn = AssistantMessage(
        text="Voilà \u200f ✓",
        tool_calls=(ToolCall(call_id="c1", name="get_weather", arguments='{"city": "\\u0000"}'),),
    )
    assert safe_turn(turn) == (turn, [None])
    assert safe_turn(turn)[0] is turn


def test_bad_names_ids_and_arguments_are_escaped_and_named() -> None:
    turn = AssistantMessage(
        tool_calls=(
            ToolCall(call_id="a\ud800", name="x" * 10_000, arguments="{}"),
            ToolCall(call_id="b", name="ok", arguments='{"k": "\udfff"}'),
        ),
    )
    safe, problems = safe_turn(turn)
    first, second = safe.tool_calls
    assert first.call_id == "a\\ud800"
    assert len(first.name) == MAX_NAME_CHARS and first.name.endswith("…")
    assert second.arguments == '{"k": "\ufffd"}'
    assert problems[0] is not None and "call id contains an unpaired" in problems[0]
    assert "tool name is 10000 characters long" in problems[0]
    assert problems[1] is not None and "arguments contain an unpaired" in problems[1]
    safe.model_dump_json()  # serializable


def test_text_and_provider_items_lose_only_their_surrogates() -> None:
    turn = AssistantMessage(
        text="a\ud800b", stop_reason="\udc00", provider_items=({"k\ud800": ["\udfff", 1]},)
    )
    safe, problems = safe_turn(turn)
    assert (safe.text, safe.stop_reason, problems) == ("a\ufffdb", "\ufffd", [])
    assert safe.provider_items == ({"k\ufffd": ["\ufffd", 1]},)
    assert safe_text("plain") == "plain"
