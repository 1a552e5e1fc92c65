"""AnthropicModel against recorded Messages API exchanges, through the SDK's transport."""

from __future__ import annotations

import importlib
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from provider_replay import INSTRUCTIONS, TOOLS, TRANSCRIPT, Replay, fixture
from temporalio.exceptions import ApplicationError

from durable_tools.errors import ConfigurationError
from durable_tools.models.anthropic import AnthropicModel
from durable_tools.models.base import Model, ModelRequest
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, Usage, UserMessage


def claude(replay: Replay, **kwargs: Any) -> AnthropicModel:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test", max_retries=0, http_client=replay.http_client()
    )
    return AnthropicModel(model="claude-sonnet-4-6", client=client, **kwargs)


def request(**fields: Any) -> ModelRequest:
    defaults: dict[str, Any] = {
        "model": "claude",
        "instructions": INSTRUCTIONS,
        "transcript": TRANSCRIPT,
        "tools": TOOLS,
    }
    return ModelRequest(**{**defaults, **fields})


def text_message(**fields: Any) -> dict[str, Any]:
    response = fixture("anthropic_tool_use.json")["response"]
    response["content"] = [{"type": "text", "text": "Done."}]
    response["stop_reason"] = "end_turn"
    return {**response, **fields}


async def test_tool_use_and_tool_results_round_trip_through_the_sdk() -> None:
    exchange = fixture("anthropic_tool_use.json")
    replay = Replay().answer(200, exchange["response"])
    model = claude(replay, settings={"temperature": 0.7})

    turn = await model(request(settings={"temperature": 0.2, "max_tokens": 1024, "stop": "END"}))

    [sent] = replay.sent
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["authorization"] == "Bearer sk-ant-test"
    assert "anthropic-version" in sent.headers
    # `system` at the top; tool_use blocks in the assistant message; both
    # tool_result blocks (is_error on the failure) in one user message; the
    # settings' max_tokens over the adapter's; `stop` as `stop_sequences`.
    assert sent.body == exchange["request"]
    assert turn == AssistantMessage(
        text="Boston is 21 °C; Paris did not answer. Logging it.",
        tool_calls=(
            ToolCall(
                call_id="toolu_01A09q90qw90lq917835lq9",
                name="log_note",
                arguments='{"text": "Boston 21 °C; Paris unavailable"}',
            ),
        ),
        # Anthropic counts cache reads apart; Usage.input_tokens is the whole prompt.
        usage=Usage(input_tokens=1496, output_tokens=89, cached_input_tokens=1024),
        stop_reason="tool_calls",
    )


async def test_max_tokens_has_a_default_and_a_large_one_is_not_refused() -> None:
    replay = Replay().answer(200, text_message()).answer(200, text_message())
    model = claude(replay)
    plain = request(instructions="", tools=[], transcript=[UserMessage(text="hi")])

    turn = await model(plain)
    # Without an explicit timeout the SDK refuses a non-streaming request this
    # large ("Streaming is required ..."); the adapter always sends one.
    await model(plain.model_copy(update={"settings": {"max_tokens": 64000}}))

    assert replay.sent[0].body == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert replay.sent[1].body["max_tokens"] == 64000
    assert (turn.text, turn.stop_reason) == ("Done.", "end_turn")


@pytest.mark.parametrize(
    ("stop_reason", "normalized"),
    [
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "refusal"),
        ("pause_turn", "pause_turn"),
    ],
)
async def test_stop_reasons_are_normalized(stop_reason: str, normalized: str) -> None:
    replay = Replay().answer(200, text_message(stop_reason=stop_reason))
    turn = await claude(replay)(request())
    assert turn.stop_reason == normalized


def test_it_is_a_model_and_builds_its_client_with_sdk_retries_off() -> None:
    model = AnthropicModel(model="claude-sonnet-4-6", api_key="sk-ant-test")

    assert isinstance(model, Model)
    assert model.client.max_retries == 0
    assert model.max_tokens == 4096
    with pytest.raises(ConfigurationError, match=r"\['system'\]"):
        AnthropicModel(model="claude-sonnet-4-6", api_key="k", settings={"system": "x"})


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    return tmp_path


async def test_no_credentials_fail_the_turn_without_retries(no_credentials: Path) -> None:
    replay = Replay()
    client = anthropic.AsyncAnthropic(max_retries=0, http_client=replay.http_client())

    with pytest.raises(ApplicationError) as info:
        await AnthropicModel(model="claude-sonnet-4-6", client=client)(request())

    assert info.value.type == "ProviderAuthentication"
    assert info.value.non_retryable
    assert "ANTHROPIC_API_KEY" in info.value.message
    assert replay.sent == []


def test_a_broken_credentials_profile_is_refused_at_construction(
    no_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(no_credentials))  # holds no profile

    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY.*Config file not found"):
        AnthropicModel(model="claude-sonnet-4-6")


def test_without_the_sdk_the_import_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.delitem(sys.modules, "durable_tools.models.anthropic")

    with pytest.raises(ConfigurationError, match=r"pip install 'durable-tools\[anthropic\]'"):
        importlib.import_module("durable_tools.models.anthropic")


# --------------------------------------------------------------- errors


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind", "delay"),
    [
        (
            429,
            error_body("rate_limit_error", "Number of request tokens has exceeded your limit"),
            {"retry-after": "1"},
            "ProviderRateLimited",
            timedelta(seconds=1),
        ),
        (529, error_body("overloaded_error", "Overloaded"), {}, "ProviderUnavailable", None),
        (500, error_body("api_error", "Internal server error"), {}, "ProviderUnavailable", None),
    ],
)
async def test_rate_limits_and_overload_are_retryable(
    status: int, body: dict[str, Any], headers: dict[str, str], kind: str, delay: timedelta | None
) -> None:
    replay = Replay().answer(status, body, headers={"request-id": "req_011CS", **headers})
    with pytest.raises(ApplicationError) as info:
        await claude(replay)(request())

    error = info.value
    assert (error.type, error.non_retryable, error.next_retry_delay) == (kind, False, delay)
    assert f"Anthropic answered HTTP {status} ({body['error']['type']})" in error.message
    assert body["error"]["message"] in error.message
    assert "req_011CS" in error.message
    assert len(replay.sent) == 1


@pytest.mark.parametrize(
    ("status", "body", "kind", "says"),
    [
        (
            400,
            error_body("invalid_request_error", "max_tokens: Field required"),
            "ProviderBadRequest",
            "max_tokens: Field required",
        ),
        (
            401,
            error_body("authentication_error", "invalid x-api-key"),
            "ProviderAuthentication",
            "ANTHROPIC_API_KEY",
        ),
        (
            403,
            error_body("permission_error", "Your API key does not have permission"),
            "ProviderPermissionDenied",
            "does not have permission",
        ),
        (
            404,
            error_body("not_found_error", "model: claude-sonnet-9"),
            "ProviderNotFound",
            "'claude-sonnet-4-6'",
        ),
        (
            413,
            error_body("request_too_large", "Request exceeds the maximum allowed size"),
            "ProviderBadRequest",
            "shorten the transcript",
        ),
    ],
)
async def test_client_errors_are_not_retried(
    status: int, body: dict[str, Any], kind: str, says: str
) -> None:
    replay = Replay().answer(status, body)
    with pytest.raises(ApplicationError) as info:
        await claude(replay)(request())

    assert (info.value.type, info.value.non_retryable) == (kind, True)
    assert f"HTTP {status}" in info.value.message
    assert says in info.value.message


async def test_a_refused_connection_is_retryable() -> None:
    replay = Replay().fail(httpx2.ConnectError("[Errno 111] Connection refused"))
    with pytest.raises(ApplicationError) as info:
        await claude(replay)(request())

    assert (info.value.type, info.value.non_retryable) == ("ProviderUnavailable", False)
    assert "api.anthropic.com" in info.value.message


async def test_an_operators_message_reaches_the_model_as_an_operators_note() -> None:
    # Issue 23, item 2: the model must never take an operator's words for the user's.
    replay = Replay().answer(200, text_message())
    transcript = [
        UserMessage(text="refund order 1234", sent_by="customer-7"),
        UserMessage(text="check the order date first", sent_by="ana", operator=True),
    ]

    await claude(replay)(request(instructions="", tools=[], transcript=transcript))

    assert replay.sent[0].body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "refund order 1234"},
                {
                    "type": "text",
                    "text": "[Note from operator ana, not from the user] "
                    "check the order date first",
                },
            ],
        }
    ]
