"""The OpenAI and Anthropic adapters stream: recorded SSE replayed through the SDKs' transport.

Inside a `text_sink` (what the `model.turn` activity installs) each adapter
sends `stream: true`, reports the text deltas in order, and returns the same
turn a plain request would: the text equals the deltas joined, tool calls
and usage included. A server that answers with JSON, `stream=False`, and no
listener all make one plain request; a stream that breaks off midway is a
retryable `ProviderStreamBroken`.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from provider_replay import FIXTURES, INSTRUCTIONS, TOOLS, TRANSCRIPT, Replay, fixture
from temporalio.exceptions import ApplicationError

from durable_tools.models.anthropic import AnthropicModel
from durable_tools.models.base import ModelRequest
from durable_tools.models.openai import OpenAIChatModel, OpenAIResponsesModel
from durable_tools.models.streaming import text_sink
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage

REQUEST = ModelRequest(model="m", instructions=INSTRUCTIONS, transcript=TRANSCRIPT, tools=TOOLS)


def adapter(kind: str, replay: Replay, **kwargs: Any) -> Any:
    if kind == "anthropic":
        client = anthropic.AsyncAnthropic(
            api_key="sk-ant-test", max_retries=0, http_client=replay.http_client()
        )
        return AnthropicModel(model="claude-sonnet-4-6", client=client, **kwargs)
    oa = openai.AsyncOpenAI(api_key="sk-test", max_retries=0, http_client=replay.http_client())
    cls = OpenAIChatModel if kind == "chat" else OpenAIResponsesModel
    return cls(model="gpt-5.4", client=oa, **kwargs)


SSE = {
    "chat": "openai_chat_stream.sse",
    "responses": "openai_responses_stream.sse",
    "anthropic": "anthropic_stream.sse",
}
PLAIN = {
    "chat": "openai_chat_tool_calls.json",
    "responses": "openai_responses_function_call.json",
    "anthropic": "anthropic_tool_use.json",
}
NOTE = '{"text":"Boston 21 °C"}'


async def streamed(model: Any) -> tuple[AssistantMessage, list[str]]:
    deltas: list[str] = []
    with text_sink(deltas.append):
        turn = await model(REQUEST)
    return turn, deltas


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_a_streamed_turn_reports_deltas_in_order_and_returns_one_message(kind: str) -> None:
    replay = Replay().answer_sse(SSE[kind])
    turn, deltas = await streamed(adapter(kind, replay))

    sent = replay.sent[0].body
    assert sent["stream"] is True
    if kind == "chat":
        assert sent["stream_options"] == {"include_usage": True}
    assert len(deltas) >= 4
    assert turn.text == "".join(deltas)
    assert "Boston" in turn.text and "unavailable" in turn.text
    assert len(turn.tool_calls) == 1
    call = turn.tool_calls[0]
    assert call.name == "log_note"
    if kind == "anthropic":
        assert call.call_id == "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
        assert json.loads(call.arguments) == json.loads(NOTE)
    else:
        assert call == ToolCall(call_id="call_note", name="log_note", arguments=NOTE)
    assert turn.usage is not None and turn.usage.output_tokens > 0 and turn.usage.input_tokens > 0
    assert turn.stop_reason in ("tool_calls", "tool_use")


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_without_a_listener_or_with_stream_off_one_plain_request_is_sent(kind: str) -> None:
    body = fixture(PLAIN[kind])["response"]
    replay = Replay().answer(200, body).answer(200, body)
    plain = await adapter(kind, replay)(REQUEST)  # no text_sink: nobody listens
    off, deltas = await streamed(adapter(kind, replay, stream=False))
    assert "stream" not in replay.sent[0].body and "stream" not in replay.sent[1].body
    assert off == plain and deltas == []


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_a_server_that_answers_a_streamed_request_with_json_is_read_plainly(
    kind: str,
) -> None:
    body = fixture(PLAIN[kind])["response"]
    replay = Replay().answer(200, body).answer(200, body)
    turn, deltas = await streamed(adapter(kind, replay))
    plain = await adapter(kind, replay)(REQUEST)
    assert replay.sent[0].body["stream"] is True
    assert turn == plain and deltas == []


def event_stream(text: str) -> httpx2.Response:
    return httpx2.Response(
        200, content=text.encode(), headers={"content-type": "text/event-stream"}
    )


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_a_stream_cut_off_midway_is_a_retryable_failure(kind: str) -> None:
    whole = (FIXTURES / SSE[kind]).read_text(encoding="utf-8")
    cut = "".join(part + "\n\n" for part in whole.split("\n\n")[:5])  # no final event
    replay = Replay()
    replay.answers.append(event_stream(cut))
    deltas: list[str] = []
    with pytest.raises(ApplicationError) as raised, text_sink(deltas.append):
        await adapter(kind, replay)(REQUEST)
    assert raised.value.type == "ProviderStreamBroken"
    assert not raised.value.non_retryable
    assert "broke off its streamed answer" in raised.value.message


async def test_an_error_event_midway_is_a_retryable_failure() -> None:
    # Anthropic's documented mid-stream error: `event: error` with an overloaded_error.
    whole = (FIXTURES / SSE["anthropic"]).read_text(encoding="utf-8")
    head = "".join(part + "\n\n" for part in whole.split("\n\n")[:4])
    error = (
        'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        '"message":"Overloaded"}}\n\n'
    )
    replay = Replay()
    replay.answers.append(event_stream(head + error))
    deltas: list[str] = []
    with pytest.raises(ApplicationError) as raised, text_sink(deltas.append):
        await adapter("anthropic", replay)(REQUEST)
    assert raised.value.type == "ProviderStreamBroken" and "Overloaded" in raised.value.message
    assert deltas == ["Boston is"]
