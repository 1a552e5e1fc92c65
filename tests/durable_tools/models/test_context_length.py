"""A request over the context window is its own error type, through each SDK.

The provider answers are the documented error bodies, replayed through the
SDKs' own HTTP transport (`tests/provider_replay.py`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anthropic
import openai
import pytest
from provider_replay import INSTRUCTIONS, TOOLS, TRANSCRIPT, Replay
from temporalio.exceptions import ApplicationError

from durable_tools.models.anthropic import AnthropicModel
from durable_tools.models.base import ModelRequest
from durable_tools.models.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    MAX_FAILURE_MESSAGE_CHARS,
    ContextLengthExceeded,
    bounded_failure,
)
from durable_tools.models.openai import OpenAIChatModel, OpenAIResponsesModel

REQUEST = ModelRequest(model="m", instructions=INSTRUCTIONS, transcript=TRANSCRIPT, tools=TOOLS)

OPENAI_CONTEXT = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 130412 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
LLAMA_CPP_CONTEXT = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 4200,
        "n_ctx": 4096,
    }
}
ANTHROPIC_CONTEXT = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208563 tokens > 200000 maximum",
    },
}
OPENAI_OTHER_400 = {
    "error": {
        "message": "Invalid value for 'temperature': must be at most 2.",
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "invalid_value",
    }
}


def _openai(kind: type[OpenAIChatModel | OpenAIResponsesModel], replay: Replay) -> Any:
    client = openai.AsyncOpenAI(api_key="sk-test", max_retries=0, http_client=replay.http_client())
    return kind(model="gpt-5.4", client=client)


def _anthropic(replay: Replay) -> AnthropicModel:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test", max_retries=0, http_client=replay.http_client()
    )
    return AnthropicModel(model="claude-sonnet-4-6", client=client)


async def _raised(model: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await model(REQUEST)
    return info.value


@pytest.mark.parametrize("kind", [OpenAIChatModel, OpenAIResponsesModel])
@pytest.mark.parametrize("body", [OPENAI_CONTEXT, LLAMA_CPP_CONTEXT])
async def test_openai_context_length_errors_are_their_own_type(
    kind: type[OpenAIChatModel | OpenAIResponsesModel], body: dict[str, Any]
) -> None:
    error = await _raised(_openai(kind, Replay().answer(400, body)))

    assert isinstance(error, ContextLengthExceeded)
    assert (error.type, error.non_retryable) == (CONTEXT_LENGTH_EXCEEDED, True)
    assert "HTTP 400" in error.message
    assert "context window" in error.message
    assert error.details[0]["status"] == 400


async def test_anthropic_prompt_too_long_is_a_context_length_error() -> None:
    error = await _raised(_anthropic(Replay().answer(400, ANTHROPIC_CONTEXT)))

    assert isinstance(error, ContextLengthExceeded)
    assert (error.type, error.non_retryable) == (CONTEXT_LENGTH_EXCEEDED, True)
    assert "prompt is too long" in error.message


async def test_other_bad_requests_stay_bad_requests() -> None:
    error = await _raised(_openai(OpenAIChatModel, Replay().answer(400, OPENAI_OTHER_400)))

    assert not isinstance(error, ContextLengthExceeded)
    assert (error.type, error.non_retryable) == ("ProviderBadRequest", True)


def test_a_bounded_failure_keeps_the_type_and_is_one_short_line() -> None:
    huge = ContextLengthExceeded("prompt is too long\n" + "x" * 3_000_000, {"status": 400})
    bounded = bounded_failure(huge)
    assert isinstance(bounded, ContextLengthExceeded)
    assert bounded.type == CONTEXT_LENGTH_EXCEEDED
    assert len(bounded.message) == MAX_FAILURE_MESSAGE_CHARS
    assert "\n" not in bounded.message
    assert bounded.details[0] == {"status": 400}

    plain = bounded_failure(ValueError("bad\n" + "y" * 10_000))
    assert (plain.type, plain.non_retryable) == ("ValueError", False)
    assert plain.message.startswith("ValueError: bad y")
    assert len(plain.message) == MAX_FAILURE_MESSAGE_CHARS

    delayed = ApplicationError("429", type="ProviderRateLimited", next_retry_delay=timedelta(7))
    assert bounded_failure(delayed).next_retry_delay == timedelta(7)  # retry-after still honoured

    big_details = bounded_failure(ApplicationError("m", "z" * 10_000, type="T", non_retryable=True))
    assert (big_details.message, big_details.type, big_details.non_retryable) == ("m", "T", True)
    assert list(big_details.details) == []
