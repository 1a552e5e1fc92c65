"""OpenAIResponsesModel against recorded Responses API exchanges, through the SDK's transport."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import openai
import pytest
from provider_replay import INSTRUCTIONS, TOOLS, TRANSCRIPT, Replay, fixture
from temporalio.exceptions import ApplicationError

from durable_tools.errors import ConfigurationError
from durable_tools.models.base import ModelRequest
from durable_tools.models.openai import OpenAIResponsesModel
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, Usage, UserMessage


def responses_model(replay: Replay, **kwargs: Any) -> OpenAIResponsesModel:
    client = openai.AsyncOpenAI(api_key="sk-test", max_retries=0, http_client=replay.http_client())
    return OpenAIResponsesModel(model="gpt-5.4", client=client, **kwargs)


def request(**fields: Any) -> ModelRequest:
    defaults: dict[str, Any] = {
        "model": "gpt-responses",
        "instructions": INSTRUCTIONS,
        "transcript": TRANSCRIPT,
        "tools": TOOLS,
    }
    return ModelRequest(**{**defaults, **fields})


async def test_function_calls_and_outputs_round_trip_through_the_sdk() -> None:
    exchange = fixture("openai_responses_function_call.json")
    replay = Replay().answer(200, exchange["response"])
    model = responses_model(replay, settings={"temperature": 1.0, "store": False})

    turn = await model(request(settings={"temperature": 0.2, "max_tokens": 512}))

    [sent] = replay.sent
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["authorization"] == "Bearer sk-test"
    # `instructions` at the top, calls then outputs as input items, strict
    # flags on both tools, max_tokens under the Responses API's name.
    assert sent.body == exchange["request"]
    assert turn == AssistantMessage(
        text="Boston is 21 °C; Paris did not answer. Logging it.",
        tool_calls=(
            ToolCall(
                call_id="call_Hk2mP9sQ4vX7bN1cR8tW3yZe",
                name="log_note",
                arguments='{"text":"Boston 21 °C; Paris unavailable"}',
            ),
        ),
        usage=Usage(input_tokens=291, output_tokens=38, cached_input_tokens=256),
        stop_reason="tool_calls",
    )


async def test_reasoning_items_come_back_verbatim_on_the_next_request() -> None:
    response = fixture("openai_responses_function_call.json")["response"]
    reasoning: dict[str, Any] = {
        "id": "rs_68b1c4e3b9f48190a0c1d2e3f4a5b6c70c6e8f2b1a3d5c7e",
        "type": "reasoning",
        "summary": [],
        "encrypted_content": "gAAAAABo...",
    }
    response["output"].insert(0, reasoning)
    replay = Replay().answer(200, response)
    model = responses_model(replay)
    turn = await model(request())
    assert turn.provider_items[0] == reasoning

    replay.answer(200, response)
    await model(request(transcript=[*TRANSCRIPT, turn]))

    # The reasoning item leads the items of its turn, ids kept, so OpenAI
    # accepts the function_call that follows it.
    input_items = replay.sent[1].body["input"]
    start = input_items.index(reasoning)
    assert [i["type"] for i in input_items[start : start + 3]] == [
        "reasoning",
        "message",
        "function_call",
    ]
    assert input_items[start + 2]["id"].startswith("fc_")


@pytest.mark.parametrize(
    ("status", "details", "stop_reason"),
    [
        ("incomplete", {"reason": "max_output_tokens"}, "max_tokens"),
        ("incomplete", {"reason": "content_filter"}, "content_filter"),
        ("completed", None, "end_turn"),
    ],
)
async def test_the_stop_reason_follows_the_status(
    status: str, details: dict[str, Any] | None, stop_reason: str
) -> None:
    response = fixture("openai_responses_function_call.json")["response"]
    response["output"] = response["output"][:1]  # the message only
    response["status"] = status
    response["incomplete_details"] = details
    replay = Replay().answer(200, response)

    turn = await responses_model(replay)(
        request(instructions="", tools=[], transcript=[UserMessage(text="hi")])
    )

    assert turn.stop_reason == stop_reason
    assert replay.sent[0].body == {
        "model": "gpt-5.4",
        "input": [{"type": "message", "role": "user", "content": "hi"}],
    }


async def test_a_refusal_is_the_text_and_the_stop_reason() -> None:
    response = fixture("openai_responses_function_call.json")["response"]
    response["output"] = [
        {
            "id": "msg_1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": "I can't help with that."}],
        }
    ]
    turn = await responses_model(Replay().answer(200, response))(request())

    assert (turn.text, turn.stop_reason) == ("I can't help with that.", "refusal")


async def test_errors_map_to_temporal_retry_behaviour() -> None:
    replay = (
        Replay()
        .answer(
            429,
            {"error": {"message": "Rate limit reached", "type": "requests", "code": None}},
            headers={"retry-after-ms": "250"},
        )
        .answer(
            401,
            {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}},
        )
    )
    model = responses_model(replay)

    with pytest.raises(ApplicationError) as limited:
        await model(request())
    assert limited.value.type == "ProviderRateLimited" and not limited.value.non_retryable
    assert limited.value.next_retry_delay == timedelta(milliseconds=250)

    with pytest.raises(ApplicationError) as refused:
        await model(request())
    assert refused.value.type == "ProviderAuthentication" and refused.value.non_retryable
    assert "OPENAI_API_KEY" in refused.value.message
    assert len(replay.sent) == 2


def test_instructions_cannot_be_set_through_settings() -> None:
    client = openai.AsyncOpenAI(api_key="sk-test")
    with pytest.raises(ConfigurationError, match="instructions"):
        OpenAIResponsesModel(model="gpt-5.4", client=client, settings={"instructions": "x"})


async def test_an_operators_message_reaches_the_model_as_an_operators_note() -> None:
    # Issue 23, item 2: the model must never take an operator's words for the user's.
    exchange = fixture("openai_responses_function_call.json")
    replay = Replay().answer(200, exchange["response"])
    transcript = [
        UserMessage(text="refund order 1234", sent_by="customer-7"),
        UserMessage(text="check the order date first", sent_by="ana", operator=True),
    ]

    await responses_model(replay)(request(instructions="", tools=[], transcript=transcript))

    assert replay.sent[0].body["input"] == [
        {"type": "message", "role": "user", "content": "refund order 1234"},
        {
            "type": "message",
            "role": "user",
            "content": "[Note from operator ana, not from the user] check the order date first",
        },
    ]
