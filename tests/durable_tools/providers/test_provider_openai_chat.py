import json
from typing import Any

import pytest
from pydantic import BaseModel

from durable_tools.constructors import provider_tool, tool
from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import StrictModeError
from durable_tools.executor import Output
from durable_tools.providers import openai_chat
from durable_tools.results import Failure, Ok, ToolCall
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import AssistantMessage, TranscriptItem, UserMessage, append_turn

# Shaped like a real `chat.completion` (openai-python `ChatCompletion`): a
# turn with text and two parallel function calls.
COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-CAx3kZ9Jb1mTq2rV",
    "object": "chat.completion",
    "created": 1756989123,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Checking both cities.",
                "refusal": None,
                "annotations": [],
                "tool_calls": [
                    {
                        "id": "call_7hQy1BSKJgkOIlCQ5dvJ7Aa2",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city":"Paris","unit":"celsius"}',
                        },
                    },
                    {
                        "id": "call_Vw3kz0YqQmWcS2pHcN8DLr4E",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city":"Tokyo","unit":"celsius"}',
                        },
                    },
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 96,
        "completion_tokens": 58,
        "total_tokens": 154,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": "fp_b3f1157249",
}

SHIPPING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"$ref": "#/$defs/Address"},
        "weight_kg": {"type": "number"},
    },
    "required": ["to", "weight_kg"],
    "additionalProperties": False,
    "$defs": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
            "required": ["city", "country"],
            "additionalProperties": False,
        }
    },
}


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {**COMPLETION, "choices": [{**COMPLETION["choices"][0], "message": message}]}


def test_render_tools_keeps_schema_with_refs_and_says_strict_false() -> None:
    ship = ToolDescriptor(name="ship", description="Ship a parcel.", parameters=SHIPPING_SCHEMA)

    [rendered] = openai_chat.render_tools([ship])

    assert rendered == {
        "type": "function",
        "function": {
            "name": "ship",
            "description": "Ship a parcel.",
            "parameters": SHIPPING_SCHEMA,
            "strict": False,
        },
    }
    # A copy: editing the request never edits the descriptor.
    rendered["function"]["parameters"]["$defs"]["Address"]["type"] = "string"
    assert ship.parameters["$defs"]["Address"]["type"] == "object"


def test_render_tools_from_a_typed_tool_preserves_pydantic_defs() -> None:
    class Address(BaseModel):
        city: str

    @tool
    def ship(to: Address) -> str:
        """Ship a parcel."""
        return to.city

    [rendered] = openai_chat.render_tools([ship.descriptor()])

    parameters = rendered["function"]["parameters"]
    assert parameters["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert parameters["$defs"]["Address"]["properties"]["city"]["type"] == "string"


def test_strict_tool_that_fits_strict_mode_is_sent_strict() -> None:
    ship = ToolDescriptor(name="ship", parameters=SHIPPING_SCHEMA, strict=True)

    [rendered] = openai_chat.render_tools([ship])

    assert rendered["function"]["strict"] is True
    assert rendered["function"]["parameters"] == SHIPPING_SCHEMA


def test_strict_violation_raises_naming_the_tool_and_the_rules() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    }
    forecast = ToolDescriptor(name="forecast", parameters=schema, strict=True)

    with pytest.raises(StrictModeError) as caught:
        openai_chat.render_tools([forecast])

    message = str(caught.value)
    assert "'forecast'" in message
    assert "additionalProperties" in message
    assert "$.properties.days: not listed in 'required'" in message
    assert schema["required"] == ["city"]  # never rewritten


def test_provider_tools_are_left_out_and_other_kinds_are_functions() -> None:
    descriptors = [
        provider_tool("web_search", provider="openai", config={"type": "web_search"}).descriptor(),
        ToolDescriptor(name="finish", kind="signal"),
        ToolDescriptor(name="ask_user", kind="interaction"),
    ]

    rendered = openai_chat.render_tools(descriptors)

    assert [t["function"]["name"] for t in rendered] == ["finish", "ask_user"]


def test_parse_text_and_parallel_tool_calls() -> None:
    turn = openai_chat.parse_response(COMPLETION)

    assert turn.text == "Checking both cities."
    assert turn.tool_calls == (
        ToolCall(
            call_id="call_7hQy1BSKJgkOIlCQ5dvJ7Aa2",
            name="get_weather",
            arguments='{"city":"Paris","unit":"celsius"}',
        ),
        ToolCall(
            call_id="call_Vw3kz0YqQmWcS2pHcN8DLr4E",
            name="get_weather",
            arguments='{"city":"Tokyo","unit":"celsius"}',
        ),
    )


def test_parse_keeps_content_null_as_empty_text() -> None:
    message = {**COMPLETION["choices"][0]["message"], "content": None}

    turn = openai_chat.parse_response(completion(message))

    assert turn.text == ""
    assert len(turn.tool_calls) == 2


def test_parse_reads_a_refusal_as_text() -> None:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "refusal": "I'm sorry, I can't help with that.",
        "annotations": [],
    }

    turn = openai_chat.parse_response(completion(message))

    assert turn.text == "I'm sorry, I can't help with that."
    assert turn.tool_calls == ()


def test_parse_keeps_malformed_arguments_raw() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_bad",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"'},
            }
        ],
    }

    turn = openai_chat.parse_response(completion(message))

    assert turn.tool_calls == (
        ToolCall(call_id="call_bad", name="get_weather", arguments='{"city": "Paris"'),
    )


@pytest.mark.parametrize(
    ("response", "missing"),
    [
        ({"id": "chatcmpl-1", "object": "chat.completion"}, "'choices'"),
        ({"choices": []}, "'choices' is empty"),
        ({"choices": [{"index": 0, "finish_reason": "stop"}]}, "'message'"),
        (
            completion({"role": "assistant", "tool_calls": [{"type": "function"}]}),
            "'function'",
        ),
    ],
)
def test_parse_raises_value_error_on_broken_structure(
    response: dict[str, Any], missing: str
) -> None:
    with pytest.raises(ValueError, match=missing):
        openai_chat.parse_response(response)


def test_render_transcript_puts_outputs_after_their_assistant_message() -> None:
    turn = openai_chat.parse_response(COMPLETION)
    paris, tokyo = turn.tool_calls
    history: list[TranscriptItem] = [UserMessage(text="Weather in Paris and Tokyo?")]
    # Outputs arrive in any order; the transcript puts them in call order.
    history = append_turn(
        history,
        turn,
        [
            Failure(call_id=tokyo.call_id, tool="get_weather", kind="timed_out", reason="slow"),
            Ok(call_id=paris.call_id, tool="get_weather", value={"temp_c": 21}),
        ],
    )
    history.append(AssistantMessage(text="Paris is 21 °C; Tokyo did not answer."))

    body = openai_chat.render_transcript(history, instructions="Be brief.")

    assert body == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {
                "role": "assistant",
                "content": "Checking both cities.",
                "tool_calls": [
                    {
                        "id": paris.call_id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": paris.arguments},
                    },
                    {
                        "id": tokyo.call_id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": tokyo.arguments},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": paris.call_id, "content": '{"temp_c":21}'},
            {
                "role": "tool",
                "tool_call_id": tokyo.call_id,
                "content": '{"error": "timed_out", "reason": "slow"}',
            },
            {"role": "assistant", "content": "Paris is 21 °C; Tokyo did not answer."},
        ]
    }


def test_tool_only_turn_sends_empty_content_never_null_and_no_system_without_instructions() -> None:
    call = ToolCall(call_id="call_1", name="now", arguments="{}")
    history: list[TranscriptItem] = [
        UserMessage(text="Time?"),
        AssistantMessage(tool_calls=(call,)),
    ]

    messages = openai_chat.render_transcript(history)["messages"]

    assert [m["role"] for m in messages] == ["user", "assistant"]
    # llama-cpp-python's server answers HTTP 500 to `"content": null` (chat templates).
    assert messages[1]["content"] == ""


async def test_bad_arguments_reach_the_model_as_a_failure() -> None:
    @tool
    def get_weather(city: str, unit: str) -> dict[str, Any]:
        """Current weather."""
        return {"city": city, "temp": 21, "unit": unit}

    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_ok",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"C"}'},
            },
            {
                "id": "call_bad",
                "type": "function",
                "function": {"name": "get_weather", "arguments": "{'city': 'Rome'}"},
            },
        ],
    }
    turn = openai_chat.parse_response(completion(message))

    results = [
        event.result
        async for event in Toolkit(get_weather).run(turn.tool_calls)
        if isinstance(event, Output)
    ]
    history = append_turn([UserMessage(text="Weather?")], turn, results)
    messages = openai_chat.render_transcript(history)["messages"]

    assert [m.get("tool_call_id") for m in messages[2:]] == ["call_ok", "call_bad"]
    assert json.loads(messages[2]["content"]) == {"city": "Paris", "temp": 21, "unit": "C"}
    error = json.loads(messages[3]["content"])
    assert error["error"] == "input_validation_error"
    assert "not valid JSON" in error["reason"]
