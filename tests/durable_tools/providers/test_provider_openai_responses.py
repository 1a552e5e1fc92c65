from typing import Any

import pytest

from durable_tools.constructors import provider_tool
from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import StrictModeError
from durable_tools.providers import openai_responses
from durable_tools.results import Failure, Ok, ToolCall
from durable_tools.transcript import TranscriptItem, UserMessage, append_turn

WEB_SEARCH_CALL: dict[str, Any] = {
    "id": "ws_68b1a2c3d4e5f6a7b8c9d0e1f2a3b4c5",
    "type": "web_search_call",
    "status": "completed",
    "action": {"type": "search", "query": "weather Paris today"},
}

# Shaped like a real `response` object (openai-python `Response`): a hosted
# web search, a message with a citation, then two parallel function calls.
RESPONSE: dict[str, Any] = {
    "id": "resp_68b1a2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3",
    "object": "response",
    "created_at": 1756489123,
    "status": "completed",
    "background": False,
    "error": None,
    "incomplete_details": None,
    "instructions": "Be brief.",
    "max_output_tokens": None,
    "model": "gpt-4.1-2025-04-14",
    "output": [
        WEB_SEARCH_CALL,
        {
            "id": "msg_68b1a2c4e5f6a7b8c9d0e1f2a3b4c5d6",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [
                {
                    "type": "output_text",
                    "annotations": [
                        {
                            "type": "url_citation",
                            "start_index": 0,
                            "end_index": 22,
                            "title": "Paris weather",
                            "url": "https://weather.example.com/paris",
                        }
                    ],
                    "logprobs": [],
                    "text": "It is 21 °C in Paris.",
                }
            ],
        },
        {
            "id": "fc_68b1a2c5f6a7b8c9d0e1f2a3b4c5d6e7",
            "type": "function_call",
            "status": "completed",
            "arguments": '{"to":"ada@example.com","body":"21 °C in Paris"}',
            "call_id": "call_Wr2pQ8dK1mZtY6vB3nL0sHcX",
            "name": "send_email",
        },
        {
            "id": "fc_68b1a2c6a7b8c9d0e1f2a3b4c5d6e7f8",
            "type": "function_call",
            "status": "completed",
            "arguments": '{"text":"Told Ada: 21 °C"}',
            "call_id": "call_Jm4nV7cX2bZ9qR5tW8yE1uIo",
            "name": "log_note",
        },
    ],
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}, "verbosity": "medium"},
    "tool_choice": "auto",
    "tools": [],
    "top_p": 1.0,
    "truncation": "disabled",
    "usage": {
        "input_tokens": 328,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 52,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 380,
    },
    "user": None,
    "metadata": {},
}

# A reasoning model (gpt-5) turn: a reasoning item paired with the call after it.
REASONING_RESPONSE: dict[str, Any] = {
    **RESPONSE,
    "id": "resp_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    "model": "gpt-5-2025-08-07",
    "reasoning": {"effort": "medium", "summary": None},
    "output": [
        {
            "id": "rs_0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3",
            "type": "reasoning",
            "summary": [],
            "encrypted_content": "gAAAAABoq1xZ...",
        },
        {
            "id": "fc_0a1b2c3d4e5f60718293a4b5c6d7e8f9b1c2d3e4",
            "type": "function_call",
            "status": "completed",
            "arguments": '{"city":"Paris"}',
            "call_id": "call_9Kq2Lm5Np8Rs1Tu4Vw7Xy0Za",
            "name": "get_weather",
        },
    ],
}

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"filter": {"$ref": "#/$defs/Filter"}},
    "$defs": {
        "Filter": {
            "type": "object",
            "properties": {"tag": {"type": "string"}},
            "required": ["tag"],
        }
    },
}


def test_render_tools_functions_and_openai_provider_tools_in_order() -> None:
    descriptors = [
        ToolDescriptor(name="search_notes", description="Search notes.", parameters=SEARCH_SCHEMA),
        provider_tool(
            "web_search",
            provider="openai",
            config={"type": "web_search", "search_context_size": "low"},
        ).descriptor(),
        provider_tool(
            "web_search_anthropic",
            provider="anthropic",
            config={"type": "web_search_20250305", "name": "web_search"},
        ).descriptor(),
        provider_tool("code_interpreter", provider="openai").descriptor(),
    ]

    rendered = openai_responses.render_tools(descriptors)

    assert rendered == [
        {
            "type": "function",
            "name": "search_notes",
            "description": "Search notes.",
            "parameters": SEARCH_SCHEMA,
            # The Responses API defaults `strict` to true: it must be said.
            "strict": False,
        },
        {"type": "web_search", "search_context_size": "low"},
        {"type": "code_interpreter"},
    ]


def test_strict_violation_raises_naming_the_tool_and_the_rule() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
        "required": ["id"],
        "additionalProperties": False,
    }

    with pytest.raises(StrictModeError, match=r"'lookup'.*keyword 'oneOf' is not supported"):
        openai_responses.render_tools(
            [ToolDescriptor(name="lookup", parameters=schema, strict=True)]
        )


def test_parse_text_calls_and_keeps_provider_items() -> None:
    turn = openai_responses.parse_response(RESPONSE)

    assert turn.text == "It is 21 °C in Paris."
    assert turn.tool_calls == (
        ToolCall(
            call_id="call_Wr2pQ8dK1mZtY6vB3nL0sHcX",
            name="send_email",
            arguments='{"to":"ada@example.com","body":"21 °C in Paris"}',
        ),
        ToolCall(
            call_id="call_Jm4nV7cX2bZ9qR5tW8yE1uIo",
            name="log_note",
            arguments='{"text":"Told Ada: 21 °C"}',
        ),
    )
    assert turn.provider_items == (WEB_SEARCH_CALL,)


def test_render_transcript_orders_outputs_after_their_calls() -> None:
    turn = openai_responses.parse_response(RESPONSE)
    email, note = turn.tool_calls
    history: list[TranscriptItem] = append_turn(
        [UserMessage(text="Find the Paris weather and mail it to Ada.")],
        turn,
        [
            Failure(call_id=note.call_id, tool="log_note", kind="denied", reason="not allowed"),
            Ok(call_id=email.call_id, tool="send_email", value="sent"),
        ],
    )
    history.append(UserMessage(text="Thanks!"))

    body = openai_responses.render_transcript(history, instructions="Be brief.")

    assert body["instructions"] == "Be brief."
    assert body["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": "Find the Paris weather and mail it to Ada.",
        },
        WEB_SEARCH_CALL,
        {"type": "message", "role": "assistant", "content": "It is 21 °C in Paris."},
        {
            "type": "function_call",
            "call_id": email.call_id,
            "name": "send_email",
            "arguments": email.arguments,
        },
        {
            "type": "function_call",
            "call_id": note.call_id,
            "name": "log_note",
            "arguments": note.arguments,
        },
        {"type": "function_call_output", "call_id": email.call_id, "output": "sent"},
        {
            "type": "function_call_output",
            "call_id": note.call_id,
            "output": '{"error": "denied", "reason": "not allowed"}',
        },
        {"type": "message", "role": "user", "content": "Thanks!"},
    ]


def test_no_instructions_key_without_instructions() -> None:
    assert openai_responses.render_transcript([UserMessage(text="hi")]) == {
        "input": [{"type": "message", "role": "user", "content": "hi"}]
    }


def test_reasoning_turn_is_replayed_verbatim_with_item_ids() -> None:
    turn = openai_responses.parse_response(REASONING_RESPONSE)
    [call] = turn.tool_calls
    history = append_turn(
        [UserMessage(text="Weather in Paris?")],
        turn,
        [Ok(call_id=call.call_id, tool="get_weather", value={"temp_c": 21})],
    )

    items = openai_responses.render_transcript(history)["input"]

    # The reasoning item and the function call it pairs with (by `fc_` id)
    # go back exactly as OpenAI sent them, once, in their original order.
    assert items == [
        {"type": "message", "role": "user", "content": "Weather in Paris?"},
        *REASONING_RESPONSE["output"],
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c":21}'},
    ]


def test_parse_keeps_malformed_arguments_raw() -> None:
    response = {
        **RESPONSE,
        "output": [
            {
                "id": "fc_1",
                "type": "function_call",
                "status": "completed",
                "arguments": '{"to": "ada@example.com",',
                "call_id": "call_bad",
                "name": "no_such_tool",
            }
        ],
    }

    turn = openai_responses.parse_response(response)

    assert turn.tool_calls == (
        ToolCall(call_id="call_bad", name="no_such_tool", arguments='{"to": "ada@example.com",'),
    )
    assert turn.text == ""


def test_parse_reads_refusal_parts_as_text() -> None:
    response = {
        **RESPONSE,
        "output": [
            {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}],
            }
        ],
    }

    assert openai_responses.parse_response(response).text == "I can't help with that."


@pytest.mark.parametrize(
    ("response", "missing"),
    [
        ({"id": "resp_1", "object": "response"}, "'output'"),
        (
            {"output": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "output\\[0\\]: missing 'call_id'",
        ),
        ({"output": ["not an item"]}, "output\\[0\\]: expected a JSON object"),
    ],
)
def test_parse_raises_value_error_on_broken_structure(
    response: dict[str, Any], missing: str
) -> None:
    with pytest.raises(ValueError, match=missing):
        openai_responses.parse_response(response)
