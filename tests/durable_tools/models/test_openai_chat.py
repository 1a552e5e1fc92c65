"""OpenAIChatModel against recorded Chat Completions exchanges, through the SDK's transport."""

from __future__ import annotations

import importlib
import sys
from datetime import timedelta
from typing import Any

import httpx2
import openai
import pytest
from provider_replay import INSTRUCTIONS, TOOLS, TRANSCRIPT, Replay, fixture
from temporalio.exceptions import ApplicationError

from durable_tools.errors import ConfigurationError
from durable_tools.models.base import Model, ModelRequest
from durable_tools.models.openai import OpenAIChatModel
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, Usage, UserMessage


def chat_model(replay: Replay, **kwargs: Any) -> OpenAIChatModel:
    client = openai.AsyncOpenAI(
        api_key="sk-test",
        max_retries=0,
        http_client=replay.http_client(),
        base_url=kwargs.pop("base_url", None),
    )
    return OpenAIChatModel(model=kwargs.pop("model", "gpt-5.4"), client=client, **kwargs)


def request(**fields: Any) -> ModelRequest:
    defaults: dict[str, Any] = {
        "model": "gpt",  # the name the worker registered the adapter under
        "instructions": INSTRUCTIONS,
        "transcript": TRANSCRIPT,
        "tools": TOOLS,
    }
    return ModelRequest(**{**defaults, **fields})


async def test_a_transcript_with_calls_and_outputs_round_trips_through_the_sdk() -> None:
    exchange = fixture("openai_chat_tool_calls.json")
    replay = Replay().answer(200, exchange["response"])
    model = chat_model(replay, settings={"temperature": 0.7, "parallel_tool_calls": True})

    turn = await model(request(settings={"temperature": 0.2, "max_tokens": 512}))

    [sent] = replay.sent
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    # System message, calls, both outputs, both tools; the request's settings
    # win over the adapter's; max_tokens is sent under OpenAI's current name.
    assert sent.body == exchange["request"]
    assert turn == AssistantMessage(
        text="Boston is 21 °C; Paris did not answer. Logging it.",
        tool_calls=(
            ToolCall(
                call_id="call_Zq3cV8bN2mXk7LpR4tYw1sDe",
                name="log_note",
                arguments='{"text":"Boston 21 °C; Paris unavailable"}',
            ),
        ),
        usage=Usage(input_tokens=182, output_tokens=41, cached_input_tokens=128),
        stop_reason="tool_calls",
    )


async def test_a_text_answer_ends_the_turn_and_no_tools_or_system_are_sent() -> None:
    replay = Replay().answer(200, fixture("openai_chat_text.json")["response"])
    model = chat_model(replay)

    turn = await model(request(instructions="", tools=[], transcript=[UserMessage(text="hello")]))

    assert replay.sent[0].body == {
        "model": "gpt-5.4",
        "messages": [{"role": "user", "content": "hello"}],
    }
    assert turn.text == "Logged: Boston is 21 °C, Paris is unavailable."
    assert turn.tool_calls == ()
    assert turn.stop_reason == "end_turn"
    assert turn.usage == Usage(input_tokens=240, output_tokens=14)


async def test_a_compatible_server_gets_max_tokens_under_its_own_name() -> None:
    response = fixture("openai_chat_text.json")["response"]
    response["choices"][0]["finish_reason"] = "length"
    del response["usage"]  # some compatible servers send none
    replay = Replay().answer(200, response)
    model = chat_model(replay, model="qwen3:8b", base_url="http://localhost:11434/v1")

    turn = await model(request(tools=[], settings={"max_tokens": 64}))

    sent = replay.sent[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["host"] == "localhost:11434"
    assert sent.body["model"] == "qwen3:8b"
    assert sent.body["max_tokens"] == 64 and "max_completion_tokens" not in sent.body
    assert turn.stop_reason == "max_tokens"
    assert turn.usage is None


def test_it_is_a_model_and_builds_its_client_with_sdk_retries_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    model = OpenAIChatModel(model="gpt-5.4")

    assert isinstance(model, Model)
    assert model.client.max_retries == 0  # Temporal's retry policy owns retries
    assert model.client.api_key == "sk-from-env"
    assert str(model.client.base_url) == "https://api.openai.com/v1/"
    assert OpenAIChatModel(model="gpt-5.4", max_retries=3).client.max_retries == 3


def test_a_local_server_needs_no_key_but_openai_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    local = OpenAIChatModel(model="llama3.2", base_url="http://localhost:8080/v1")
    assert str(local.client.base_url) == "http://localhost:8080/v1/"
    assert local.client.api_key  # a placeholder: local servers ignore it

    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChatModel(model="gpt-5.4")


def test_misconfiguration_is_refused_at_construction() -> None:
    client = openai.AsyncOpenAI(api_key="sk-test")
    with pytest.raises(ConfigurationError, match="either client"):
        OpenAIChatModel(model="gpt-5.4", client=client, base_url="http://localhost:8000/v1")
    with pytest.raises(ConfigurationError, match="model name"):
        OpenAIChatModel(model="", client=client)
    with pytest.raises(ConfigurationError, match=r"\['messages'\]"):
        OpenAIChatModel(model="gpt-5.4", client=client, settings={"messages": []})


async def test_a_reserved_field_in_agent_settings_fails_the_turn() -> None:
    replay = Replay()
    with pytest.raises(ConfigurationError, match=r"\['stream', 'tools'\]"):
        await chat_model(replay)(request(settings={"tools": [], "stream": True}))
    assert replay.sent == []


def test_without_the_sdk_the_import_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` raises ImportError
    monkeypatch.delitem(sys.modules, "durable_tools.models.openai")

    with pytest.raises(ConfigurationError, match=r"pip install 'durable-tools\[openai\]'"):
        importlib.import_module("durable_tools.models.openai")


def test_the_models_package_exports_the_adapters_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    import durable_tools.models as models
    from durable_tools.models import openai as module

    assert models.OpenAIChatModel is module.OpenAIChatModel
    assert models.OpenAIResponsesModel is module.OpenAIResponsesModel
    assert "OpenAIChatModel" not in models.__all__  # `import *` needs no SDK

    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.delitem(sys.modules, "durable_tools.models.openai")
    with pytest.raises(ConfigurationError, match=r"durable-tools\[openai\]"):
        _ = models.OpenAIChatModel


# --------------------------------------------------------------- errors

RATE_LIMITED = {
    "error": {
        "message": "Rate limit reached for gpt-5.4 in organization org-abc on tokens per min "
        "(TPM): Limit 30000, Used 29800, Requested 512. Please try again in 624ms.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


async def raised(replay: Replay) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await chat_model(replay)(request())
    assert len(replay.sent) == 1  # the SDK did not retry on its own
    return info.value


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "2"}, timedelta(seconds=2)),
        ({"retry-after-ms": "624", "retry-after": "1"}, timedelta(milliseconds=624)),
        ({}, None),
    ],
)
async def test_429_is_retryable_after_the_servers_delay(
    headers: dict[str, str], delay: timedelta | None
) -> None:
    error = await raised(
        Replay().answer(429, RATE_LIMITED, headers={"x-request-id": "req_1", **headers})
    )

    assert error.type == "ProviderRateLimited"
    assert not error.non_retryable
    assert error.next_retry_delay == delay
    assert "HTTP 429 (rate_limit_exceeded)" in error.message
    assert "Rate limit reached for gpt-5.4" in error.message
    assert "req_1" in error.message
    assert error.details[0]["status"] == 429


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409])
async def test_server_errors_are_retryable(status: int) -> None:
    body = {"error": {"message": "The server had an error while processing your request."}}
    error = await raised(Replay().answer(status, body, headers={"retry-after": "7"}))

    assert error.type == "ProviderUnavailable"
    assert not error.non_retryable
    assert error.next_retry_delay == timedelta(seconds=7)
    assert f"HTTP {status}" in error.message


@pytest.mark.parametrize(
    ("status", "body", "kind", "says"),
    [
        (
            400,
            {
                "error": {
                    "message": "Invalid value for 'temperature': must be between 0 and 2.",
                    "type": "invalid_request_error",
                    "param": "temperature",
                    "code": "invalid_value",
                }
            },
            "ProviderBadRequest",
            ["HTTP 400 (invalid_value)", "Invalid value for 'temperature'", "settings"],
        ),
        (
            401,
            {
                "error": {
                    "message": "Incorrect API key provided: sk-test. You can find your API key "
                    "at https://platform.openai.com/account/api-keys.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            },
            "ProviderAuthentication",
            ["HTTP 401 (invalid_api_key)", "Incorrect API key", "OPENAI_API_KEY"],
        ),
        (
            404,
            {
                "error": {
                    "message": "The model `gpt-5.4` does not exist or you do not have "
                    "access to it.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "model_not_found",
                }
            },
            "ProviderNotFound",
            ["HTTP 404 (model_not_found)", "does not exist", "'gpt-5.4'", "api.openai.com"],
        ),
        (
            429,
            {
                "error": {
                    "message": "You exceeded your current quota, please check your plan and "
                    "billing details.",
                    "type": "insufficient_quota",
                    "param": None,
                    "code": "insufficient_quota",
                }
            },
            "ProviderQuotaExceeded",
            ["HTTP 429 (insufficient_quota)", "exceeded your current quota"],
        ),
        (
            404,
            {"error": "model 'qwen3:8b' not found"},  # Ollama's shape
            "ProviderNotFound",
            ["HTTP 404", "model 'qwen3:8b' not found"],
        ),
    ],
)
async def test_client_errors_fail_the_turn_at_once_with_a_clear_message(
    status: int, body: dict[str, Any], kind: str, says: list[str]
) -> None:
    error = await raised(Replay().answer(status, body))

    assert error.type == kind
    assert error.non_retryable
    assert "\n" not in error.message
    for text in says:
        assert text in error.message, (text, error.message)


@pytest.mark.parametrize(
    ("transport_error", "kind"),
    [
        (httpx2.ConnectError("[Errno 111] Connection refused"), "ProviderUnavailable"),
        (httpx2.ReadTimeout("timed out"), "ProviderTimeout"),
    ],
)
async def test_no_answer_is_retryable(transport_error: Exception, kind: str) -> None:
    error = await raised(Replay().fail(transport_error))

    assert error.type == kind
    assert not error.non_retryable
    assert "api.openai.com" in error.message
    if kind == "ProviderUnavailable":
        assert "Connection refused" in error.message


async def test_a_body_that_is_not_a_chat_completion_is_not_retried() -> None:
    error = await raised(Replay().answer(200, {"object": "list", "data": []}))

    assert error.type == "ProviderResponseInvalid"
    assert error.non_retryable
    assert "'choices'" in error.message and "Chat Completions" in error.message


async def test_an_operators_message_reaches_the_model_as_an_operators_note() -> None:
    # Issue 23, item 2: the model must never take an operator's words for the user's.
    replay = Replay().answer(200, fixture("openai_chat_text.json")["response"])
    transcript = [
        UserMessage(text="refund order 1234", sent_by="customer-7"),
        UserMessage(text="check the order date first", sent_by="ana", operator=True),
    ]

    await chat_model(replay)(request(instructions="", tools=[], transcript=transcript))

    assert replay.sent[0].body["messages"] == [
        {"role": "user", "content": "refund order 1234"},
        {
            "role": "user",
            "content": "[Note from operator ana, not from the user] check the order date first",
        },
    ]
