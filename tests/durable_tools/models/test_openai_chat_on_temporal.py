"""OpenAIChatModel in a real conversation on the Temporal dev server.

The provider is a recorded exchange replayed through the SDK's transport: a
429 with `retry-after: 1`, then a tool call, then a final text. The 429
fails the first attempt of the `model.turn` activity (retryable, with the
server's delay), Temporal runs a second attempt, the tool runs once and the
conversation ends normally.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import openai
from provider_replay import Replay, fixture
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools.client import Conversations
from durable_tools.constructors import tool
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.models.openai import OpenAIChatModel
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage
from durable_tools.worker.plugin import DurableToolsPlugin

RUNS: list[str] = []


@tool(annotations={"read_only": True, "idempotent": True})
async def city_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    RUNS.append(city)
    return {"city": city, "temp_c": 21}


def tool_call_completion() -> dict[str, Any]:
    completion = fixture("openai_chat_tool_calls.json")["response"]
    message = completion["choices"][0]["message"]
    message["content"] = None
    message["tool_calls"] = [
        {
            "id": "call_oslo",
            "type": "function",
            "function": {"name": "city_weather", "arguments": '{"city":"Oslo"}'},
        }
    ]
    return completion


def text_completion() -> dict[str, Any]:
    completion = fixture("openai_chat_text.json")["response"]
    completion["choices"][0]["message"]["content"] = "It is 21 °C in Oslo."
    return completion


RATE_LIMITED = {
    "error": {
        "message": "Rate limit reached for gpt-5.4 on requests per min (RPM): Limit 3.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


def model_turn_attempts(history: WorkflowHistory) -> list[tuple[int, Any]]:
    """(attempt, last failure) of each completed `model.turn` activity."""
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    return [
        (attrs.attempt, attrs.last_failure)
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        for attrs in [e.activity_task_started_event_attributes]
        if scheduled[attrs.scheduled_event_id] == "model.turn"
    ]


async def test_a_rate_limited_turn_is_retried_by_temporal_and_the_conversation_ends(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    RUNS.clear()
    replay = (
        Replay()
        .answer(429, RATE_LIMITED, headers={"retry-after": "1", "x-request-id": "req_429"})
        .answer(200, tool_call_completion())
        .answer(200, text_completion())
    )
    model = OpenAIChatModel(
        model="gpt-5.4",
        client=openai.AsyncOpenAI(
            api_key="sk-test", max_retries=0, http_client=replay.http_client()
        ),
    )
    plugin = DurableToolsPlugin(
        toolkits={"weather": Toolkit(city_weather, label="weather")}, models={"gpt": model}
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"conv-{uuid.uuid4()}"

    async with Worker(client, task_queue=task_queue):
        handle = await conversations.start(
            workflow_id,
            agent=AgentConfig(
                name="main",
                model="gpt",
                toolkit="weather",
                instructions="Answer with the weather.",
                settings={"temperature": 0},
            ),
            message="Weather in Oslo?",
            options=ConversationOptions(idle_timeout=1.0),
        )
        async with asyncio.timeout(30):
            result = await handle.result()
        items = await conversations.history(workflow_id)
        history = await handle.fetch_history()

    assert (result.status, result.output, result.turns) == (
        "idle_timeout",
        "It is 21 °C in Oslo.",
        2,
    )
    assert RUNS == ["Oslo"]  # the tool ran once
    assert [type(i) for i in items] == [
        UserMessage,
        AssistantMessage,
        ToolCallOutput,
        AssistantMessage,
    ]
    assert isinstance(items[1], AssistantMessage) and items[1].stop_reason == "tool_calls"
    assert items[1].usage is not None and items[1].usage.input_tokens == 182

    # Three HTTP requests: the rate-limited one, its retry (the same body),
    # and the turn after the tool call, which carries the tool's output.
    assert len(replay.sent) == 3
    assert replay.sent[1].body == replay.sent[0].body
    assert replay.sent[0].body["messages"][0] == {
        "role": "system",
        "content": "Answer with the weather.",
    }
    assert replay.sent[2].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_oslo",
        "content": '{"city":"Oslo","temp_c":21}',
    }

    # The first model turn needed a second attempt of the activity; the
    # failure Temporal recorded is the retryable rate limit.
    (first_attempt, first_failure), (second_attempt, _) = model_turn_attempts(history)
    assert (first_attempt, second_attempt) == (2, 1)
    assert first_failure.application_failure_info.type == "ProviderRateLimited"
    assert not first_failure.application_failure_info.non_retryable
    assert "HTTP 429" in first_failure.message
