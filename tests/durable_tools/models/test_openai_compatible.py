"""OpenAIChatModel against an OpenAI-compatible server, in a conversation on the dev server.

The server is a recorded pair of Chat Completions exchanges
(`openai_compatible_tool_round_trip.json`) replayed through the SDK's
transport. The exact request bodies are asserted: `tool_choice: "auto"`
beside the tools (llama-cpp-python's server shows a model its tools only
then), the settings given to `Conversations.start` merged over the agent's,
and the assistant turn that called the tool sent back with `"content": ""`,
never `null` (which that server answers with HTTP 500).
"""

from __future__ import annotations

import json

from openai_compatible_support import weather_conversation
from provider_replay import Replay, fixture
from temporalio.testing import WorkflowEnvironment

from durable_tools.transcript import AssistantMessage, ToolCallOutput

EXCHANGES = "openai_compatible_tool_round_trip.json"


async def test_a_tool_call_round_trip_sends_what_compatible_servers_accept(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    exchanges = fixture(EXCHANGES)["exchanges"]
    replay = Replay()
    for exchange in exchanges:
        replay.answer(exchange.get("status", 200), exchange["response"])

    outcome = await weather_conversation(dev_env, task_queue, replay.http_client())

    final = exchanges[-1]["response"]["choices"][0]["message"]["content"]
    assert (outcome.result.status, outcome.result.output) == ("idle_timeout", final)
    calls = [i for i in outcome.transcript if isinstance(i, AssistantMessage) and i.tool_calls]
    outputs = [i for i in outcome.transcript if isinstance(i, ToolCallOutput)]
    assert len(calls) == 1 and len(outputs) == 1 and not outputs[0].is_error
    sent = [s.body for s in replay.sent]
    assert sent == [exchange["request"] for exchange in exchanges]
    assistant = sent[1]["messages"][2]
    assert assistant["role"] == "assistant" and assistant["content"] == ""
    assert all(body["tool_choice"] == "auto" for body in sent)
    assert all(body["temperature"] == 0 and body["seed"] == 7 for body in sent)


async def test_exchanges_recorded_from_llama_cpp_python_replay(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """Recorded from the real server by `make test-local-model` (see tests/local_model/)."""
    exchanges = fixture("llama_cpp_python_tool_round_trip.json")["exchanges"]
    replay = Replay()
    for exchange in exchanges:
        replay.answer(exchange["status"], exchange["response"])

    outcome = await weather_conversation(dev_env, task_queue, replay.http_client(), offer_once=True)

    sent = [s.body for s in replay.sent]
    assert sent == [exchange["request"] for exchange in exchanges]
    first, second = sent
    assert first["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in first["tools"]] == ["city_weather", "finish"]
    assert second["messages"][2]["content"] == ""  # the server answered it with 200
    assert [e["status"] for e in exchanges] == [200, 200]
    finish = exchanges[1]["response"]["choices"][0]["message"]["tool_calls"][0]
    assert outcome.result.status == "finished"
    assert outcome.result.output == json.loads(finish["function"]["arguments"])["output"]
    outputs = [i for i in outcome.transcript if isinstance(i, ToolCallOutput)]
    assert '"temp_c":21' in outputs[0].content and not outputs[0].is_error
