import copy
import json
import re
from typing import Any

import pytest

from durable_tools.constructors import provider_tool
from durable_tools.descriptor import ToolDescriptor
from durable_tools.providers import gemini
from durable_tools.results import Failure, Ok
from durable_tools.transcript import AssistantMessage, TranscriptItem, UserMessage, append_turn

# Shaped like a real `GenerateContentResponse` (REST JSON) from gemini-2.5-flash:
# text and two parallel function calls, which carry no ids.
RESPONSE: dict[str, Any] = {
    "candidates": [
        {
            "content": {
                "parts": [
                    {"text": "Let me check both cities."},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}},
                ],
                "role": "model",
            },
            "finishReason": "STOP",
            "index": 0,
            "avgLogprobs": -0.0412,
        }
    ],
    "usageMetadata": {
        "promptTokenCount": 87,
        "candidatesTokenCount": 24,
        "totalTokenCount": 111,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 87}],
    },
    "modelVersion": "gemini-2.5-flash",
    "responseId": "mJq1aL2xFd2bz7IP8pXa2Q0",
}

# gemini-3-pro-preview: the first call of a step carries a thought signature,
# which must go back with it.
SIGNED_RESPONSE: dict[str, Any] = {
    "candidates": [
        {
            "content": {
                "parts": [
                    {
                        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                        "thoughtSignature": "CiQB0e2Kb8QzPq5tLf1m3nR7vX9yA2cE4gI6kM8oQ0sU2wY4aC",
                    },
                    {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}},
                ],
                "role": "model",
            },
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {
        "promptTokenCount": 92,
        "candidatesTokenCount": 31,
        "totalTokenCount": 249,
        "thoughtsTokenCount": 126,
    },
    "modelVersion": "gemini-3-pro-preview",
    "responseId": "Xk2xaO3uJ8yq1dkP4u6n8Ag",
}

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"filter": {"$ref": "#/$defs/Filter"}},
    "$defs": {
        "Filter": {"type": "object", "properties": {"tags": {"type": "array"}}},
    },
}

SYNTHESIZED_ID = re.compile(r"^call_[0-9a-f]{16}_\d+$")


def with_parts(*parts: dict[str, Any], **changes: Any) -> dict[str, Any]:
    response = copy.deepcopy(RESPONSE)
    response["candidates"][0]["content"]["parts"] = list(parts)
    response.update(changes)
    return response


def test_render_tools_declarations_with_full_json_schema_then_google_tools() -> None:
    descriptors = [
        provider_tool("google_search", provider="google").descriptor(),
        ToolDescriptor(name="search_notes", description="Search notes.", parameters=SEARCH_SCHEMA),
        provider_tool(
            "code_execution", provider="google", config={"codeExecution": {}}
        ).descriptor(),
        provider_tool("web_search", provider="openai", config={"type": "web_search"}).descriptor(),
        ToolDescriptor(name="ask_user", kind="interaction"),
    ]

    rendered = gemini.render_tools(descriptors)

    assert rendered == [
        {
            "functionDeclarations": [
                {
                    "name": "search_notes",
                    "description": "Search notes.",
                    "parametersJsonSchema": SEARCH_SCHEMA,
                },
                {
                    "name": "ask_user",
                    "parametersJsonSchema": {"type": "object", "properties": {}},
                },
            ]
        },
        {"google_search": {}},
        {"codeExecution": {}},
    ]


def test_render_tools_without_functions_has_no_empty_declarations() -> None:
    rendered = gemini.render_tools([provider_tool("google_search", provider="google").descriptor()])

    assert rendered == [{"google_search": {}}]


def test_parse_text_and_calls_with_deterministic_synthesized_ids() -> None:
    turn = gemini.parse_response(RESPONSE)

    assert turn.text == "Let me check both cities."
    assert [(c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Tokyo"}),
    ]
    paris, tokyo = (c.call_id for c in turn.tool_calls)
    assert SYNTHESIZED_ID.match(paris) and SYNTHESIZED_ID.match(tokyo)
    assert paris != tokyo
    assert gemini.parse_response(copy.deepcopy(RESPONSE)) == turn
    assert turn.provider_items == ()


def test_a_repeated_call_in_a_later_turn_gets_a_new_id() -> None:
    first = gemini.parse_response(RESPONSE)
    later = copy.deepcopy(RESPONSE)
    later["responseId"] = "pQ3xaK9vHc-Wz7IPvY2K0Qs"
    later["usageMetadata"]["promptTokenCount"] = 160

    again = gemini.parse_response(later)

    assert [c.arguments for c in again.tool_calls] == [c.arguments for c in first.tool_calls]
    assert {c.call_id for c in again.tool_calls}.isdisjoint(c.call_id for c in first.tool_calls)


def test_ids_gemini_sends_are_kept_and_missing_args_mean_empty_object() -> None:
    turn = gemini.parse_response(with_parts({"functionCall": {"name": "now", "id": "fc-7b2e9d"}}))

    [call] = turn.tool_calls
    assert (call.call_id, call.name, call.arguments) == ("fc-7b2e9d", "now", "{}")


def test_render_transcript_orders_function_responses_after_their_calls() -> None:
    turn = gemini.parse_response(RESPONSE)
    paris, tokyo = turn.tool_calls
    history: list[TranscriptItem] = append_turn(
        [UserMessage(text="Weather in Paris and Tokyo?")],
        turn,
        [
            Failure(call_id=tokyo.call_id, tool="get_weather", kind="timed_out", reason="slow"),
            Ok(call_id=paris.call_id, tool="get_weather", value={"temp_c": 21}),
        ],
    )
    history.append(UserMessage(text="And tomorrow?"))

    body = gemini.render_transcript(history, instructions="Be brief.")

    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Tokyo?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Let me check both cities."},
                {
                    "functionCall": {
                        "name": "get_weather",
                        "args": {"city": "Paris"},
                        "id": paris.call_id,
                    }
                },
                {
                    "functionCall": {
                        "name": "get_weather",
                        "args": {"city": "Tokyo"},
                        "id": tokyo.call_id,
                    }
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "id": paris.call_id,
                        "response": {"output": {"temp_c": 21}},
                    }
                },
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "id": tokyo.call_id,
                        "response": {"error": "timed_out", "reason": "slow"},
                    }
                },
                {"text": "And tomorrow?"},
            ],
        },
    ]


def test_text_output_is_wrapped_as_output() -> None:
    turn = gemini.parse_response(with_parts({"functionCall": {"name": "now", "id": "fc-1"}}))
    history = append_turn(
        [UserMessage(text="Time?")], turn, [Ok(call_id="fc-1", tool="now", value="noon")]
    )

    [_, _, outputs] = gemini.render_transcript(history)["contents"]

    assert outputs["parts"] == [
        {"functionResponse": {"name": "now", "id": "fc-1", "response": {"output": "noon"}}}
    ]
    assert "systemInstruction" not in gemini.render_transcript(history)


def test_thought_signature_goes_back_on_its_function_call() -> None:
    turn = gemini.parse_response(SIGNED_RESPONSE)
    paris, tokyo = turn.tool_calls
    history = append_turn(
        [UserMessage(text="Weather in Paris and Tokyo?")],
        turn,
        [
            Ok(call_id=paris.call_id, tool="get_weather", value={"temp_c": 21}),
            Ok(call_id=tokyo.call_id, tool="get_weather", value={"temp_c": 27}),
        ],
    )

    model = gemini.render_transcript(history)["contents"][1]

    assert model == {
        "role": "model",
        "parts": [
            {
                "functionCall": {
                    "name": "get_weather",
                    "args": {"city": "Paris"},
                    "id": paris.call_id,
                },
                "thoughtSignature": "CiQB0e2Kb8QzPq5tLf1m3nR7vX9yA2cE4gI6kM8oQ0sU2wY4aC",
            },
            {
                "functionCall": {
                    "name": "get_weather",
                    "args": {"city": "Tokyo"},
                    "id": tokyo.call_id,
                }
            },
        ],
    }


def test_code_execution_parts_are_provider_items_and_replayed() -> None:
    code = {"executableCode": {"language": "PYTHON", "code": "print(2 ** 10)"}}
    result = {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1024\n"}}
    turn = gemini.parse_response(with_parts(code, result, {"text": "2^10 is 1024."}))

    assert turn.text == "2^10 is 1024."
    assert turn.provider_items == (code, result)
    [_, model] = gemini.render_transcript([UserMessage(text="2^10?"), turn])["contents"]
    assert model["parts"] == [code, result, {"text": "2^10 is 1024."}]


def test_a_candidate_without_content_is_an_empty_turn() -> None:
    response = {
        "candidates": [
            {
                "finishReason": "MALFORMED_FUNCTION_CALL",
                "finishMessage": "Malformed function call: print(default_api.get_weather(",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 87, "totalTokenCount": 87},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "aB3xaP7mKq2z1dkPr9eX8Qo",
    }

    assert gemini.parse_response(response) == AssistantMessage()


def test_a_blocked_prompt_raises_with_the_block_reason() -> None:
    response: dict[str, Any] = {
        "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
        "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
        "modelVersion": "gemini-2.5-flash",
    }

    with pytest.raises(ValueError, match="no candidates.*SAFETY"):
        gemini.parse_response(response)


def test_a_function_call_without_name_is_broken_structure() -> None:
    with pytest.raises(ValueError, match=r"parts\[0\]\.functionCall: missing 'name'"):
        gemini.parse_response(with_parts({"functionCall": {"args": {}}}))
