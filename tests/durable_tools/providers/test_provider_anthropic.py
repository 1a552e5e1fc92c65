import json
from typing import Any

import pytest

from durable_tools.constructors import provider_tool, tool
from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import ConfigurationError
from durable_tools.executor import Output
from durable_tools.providers import anthropic
from durable_tools.results import Failure, Ok, ToolCall
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import (
    AssistantMessage,
    TranscriptItem,
    Usage,
    UserMessage,
    append_turn,
)

SERVER_TOOL_USE: dict[str, Any] = {
    "type": "server_tool_use",
    "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
    "name": "web_search",
    "input": {"query": "Paris weather today"},
}
WEB_SEARCH_RESULT: dict[str, Any] = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://weather.example.com/paris",
            "title": "Paris weather today",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2Y",
            "page_age": "September 2, 2025",
        }
    ],
}

# Shaped like a real Messages API `message` (anthropic-sdk-python `Message`):
# a server-side web search with cited text, then two client tool calls.
MESSAGE: dict[str, Any] = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "I'll look up the weather in Paris."},
        SERVER_TOOL_USE,
        WEB_SEARCH_RESULT,
        {"type": "text", "text": "It is "},
        {
            "type": "text",
            "text": "21 °C and sunny",
            "citations": [
                {
                    "type": "web_search_result_location",
                    "url": "https://weather.example.com/paris",
                    "title": "Paris weather today",
                    "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
                    "cited_text": "Paris: 21 °C, sunny",
                }
            ],
        },
        {"type": "text", "text": " in Paris. I'll email Ada and note it."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "send_email",
            "input": {"to": "ada@example.com", "body": "21 °C and sunny"},
        },
        {
            "type": "tool_use",
            "id": "toolu_01Bq7Xw3Ym5Zn8Kp2Lr4Ts6V",
            "name": "log_note",
            "input": {"text": "Told Ada: 21 °C"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 2679,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 146,
        "server_tool_use": {"web_search_requests": 1},
        "service_tier": "standard",
    },
}

SHIPPING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"to": {"$ref": "#/$defs/Address"}},
    "required": ["to"],
    "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def message(*content: dict[str, Any], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {**MESSAGE, "content": list(content), "stop_reason": stop_reason}


def test_render_tools_input_schema_and_anthropic_server_tools() -> None:
    web_search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    descriptors = [
        ToolDescriptor(name="ship", description="Ship a parcel.", parameters=SHIPPING_SCHEMA),
        provider_tool("web_search", provider="anthropic", config=web_search).descriptor(),
        provider_tool("web_search", provider="openai", config={"type": "web_search"}).descriptor(),
        ToolDescriptor(name="finish", kind="signal"),
    ]

    rendered = anthropic.render_tools(descriptors)

    assert rendered == [
        {"name": "ship", "description": "Ship a parcel.", "input_schema": SHIPPING_SCHEMA},
        web_search,
        {"name": "finish", "input_schema": {"type": "object", "properties": {}}},
    ]


def test_anthropic_provider_tool_without_config_is_a_configuration_error() -> None:
    bare = provider_tool("web_search", provider="anthropic").descriptor()

    with pytest.raises(ConfigurationError, match="web_search_20250305"):
        anthropic.render_tools([bare])


def test_parse_text_tool_uses_and_server_tool_blocks() -> None:
    turn = anthropic.parse_response(MESSAGE)

    # Cited fragments are joined as written; text split by tool blocks is a
    # new paragraph.
    assert turn.text == (
        "I'll look up the weather in Paris.\n\n"
        "It is 21 °C and sunny in Paris. I'll email Ada and note it."
    )
    assert [(c.call_id, c.name) for c in turn.tool_calls] == [
        ("toolu_01A09q90qw90lq917835lq9", "send_email"),
        ("toolu_01Bq7Xw3Ym5Zn8Kp2Lr4Ts6V", "log_note"),
    ]
    assert json.loads(turn.tool_calls[0].arguments) == {
        "to": "ada@example.com",
        "body": "21 °C and sunny",
    }
    assert turn.provider_items == (SERVER_TOOL_USE, WEB_SEARCH_RESULT)


def test_render_transcript_merges_tool_results_into_one_user_message() -> None:
    turn = anthropic.parse_response(MESSAGE)
    email, note = turn.tool_calls
    history: list[TranscriptItem] = append_turn(
        [UserMessage(text="Find the Paris weather and mail it to Ada.")],
        turn,
        [
            Failure(call_id=note.call_id, tool="log_note", kind="denied", reason="not allowed"),
            Ok(call_id=email.call_id, tool="send_email", value={"message_id": "m-1"}),
        ],
    )
    history.append(UserMessage(text="Thanks!"))

    body = anthropic.render_transcript(history, instructions="Be brief.")

    assert body["system"] == "Be brief."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Find the Paris weather and mail it to Ada."}],
        },
        {
            "role": "assistant",
            "content": [
                SERVER_TOOL_USE,
                WEB_SEARCH_RESULT,
                {"type": "text", "text": turn.text},
                {
                    "type": "tool_use",
                    "id": email.call_id,
                    "name": "send_email",
                    "input": {"to": "ada@example.com", "body": "21 °C and sunny"},
                },
                {
                    "type": "tool_use",
                    "id": note.call_id,
                    "name": "log_note",
                    "input": {"text": "Told Ada: 21 °C"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": email.call_id,
                    "content": '{"message_id":"m-1"}',
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": note.call_id,
                    "content": '{"error": "denied", "reason": "not allowed"}',
                    "is_error": True,
                },
                {"type": "text", "text": "Thanks!"},
            ],
        },
    ]


def test_thinking_blocks_lead_their_assistant_message() -> None:
    thinking = {
        "type": "thinking",
        "thinking": "The user wants the time; call now.",
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
    }
    turn = anthropic.parse_response(
        message(
            thinking,
            {"type": "tool_use", "id": "toolu_01T", "name": "now", "input": {}},
            stop_reason="tool_use",
        )
    )
    history = append_turn(
        [UserMessage(text="Time?")],
        turn,
        [Ok(call_id="toolu_01T", tool="now", value="12:00")],
    )

    assistant = anthropic.render_transcript(history)["messages"][1]

    assert assistant["content"] == [
        thinking,
        {"type": "tool_use", "id": "toolu_01T", "name": "now", "input": {}},
    ]
    assert "system" not in anthropic.render_transcript(history)


def test_empty_content_is_an_empty_turn_and_is_not_sent_back() -> None:
    turn = anthropic.parse_response(message(stop_reason="max_tokens"))

    assert turn == AssistantMessage(
        usage=Usage(input_tokens=2679, output_tokens=146), stop_reason="max_tokens"
    )
    messages = anthropic.render_transcript([UserMessage(text="hi"), turn])["messages"]
    assert messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_arguments_that_are_not_an_object_are_sent_as_empty_input() -> None:
    # E.g. a call first parsed from another provider with broken JSON; it was
    # answered with a Failure, and Anthropic needs `input` to be an object.
    call = ToolCall(call_id="toolu_bad", name="ship", arguments='{"to": ')
    history: list[TranscriptItem] = [
        UserMessage(text="ship it"),
        AssistantMessage(tool_calls=(call,)),
    ]

    [_, assistant] = anthropic.render_transcript(history)["messages"]

    assert assistant["content"] == [
        {"type": "tool_use", "id": "toolu_bad", "name": "ship", "input": {}}
    ]


@pytest.mark.parametrize(
    ("response", "missing"),
    [
        ({"id": "msg_1", "type": "message", "role": "assistant"}, "'content'"),
        (
            {"content": [{"type": "tool_use", "name": "now", "input": {"x": 1}}]},
            "content\\[0\\]: missing 'id'",
        ),
    ],
)
def test_parse_raises_value_error_on_broken_structure(
    response: dict[str, Any], missing: str
) -> None:
    with pytest.raises(ValueError, match=missing):
        anthropic.parse_response(response)


async def test_unknown_tool_reaches_the_model_as_an_error_result() -> None:
    @tool
    def now() -> str:
        """The time."""
        return "12:00"

    turn = anthropic.parse_response(
        message(
            {"type": "tool_use", "id": "toolu_01N", "name": "now", "input": {}},
            {"type": "tool_use", "id": "toolu_01X", "name": "launch_rocket", "input": {"go": True}},
            stop_reason="tool_use",
        )
    )
    results = [
        event.result
        async for event in Toolkit(now).run(turn.tool_calls)
        if isinstance(event, Output)
    ]
    history = append_turn([UserMessage(text="go")], turn, results)

    [_, _, outputs] = anthropic.render_transcript(history)["messages"]

    assert [(b["tool_use_id"], b["is_error"]) for b in outputs["content"]] == [
        ("toolu_01N", False),
        ("toolu_01X", True),
    ]
    assert outputs["content"][0]["content"] == "12:00"
    assert json.loads(outputs["content"][1]["content"])["error"] == "unknown_tool"
