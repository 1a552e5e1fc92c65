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

import asyncio
import uuid
from typing import Any

import openai
from provider_replay import Replay, fixture
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools.client import Conversations
from durable_tools.constructors import tool
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.models.openai import OpenAIChatModel
from durable_tools.toolkit import Toolkit
from durable_tools.worker.plugin import DurableToolsPlugin

EXCHANGES = "openai_compatible_tool_round_trip.json"


@tool(annotations={"read_only": True, "idempotent": True})
async def city_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    return {"city": city, "temp_c": 21}


async def test_a_tool_call_round_trip_sends_what_compatible_servers_accept(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    exchanges = fixture(EXCHANGES)["exchanges"]
    replay = Replay()
    for exchange in exchanges:
        replay.answer(200, exchange["response"])
    model = OpenAIChatModel(
        model="gemma-3-270m-it",
        client=openai.AsyncOpenAI(
            api_key="not-needed",
            base_url="http://127.0.0.1:8080/v1",
            max_retries=0,
            http_client=replay.http_client(),
        ),
    )
    plugin = DurableToolsPlugin(
        toolkits={"weather": Toolkit(city_weather, label="weather")}, models={"local": model}
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conversations = Conversations(client, task_queue=task_queue)
    agent = AgentConfig(
        model="local",
        toolkit="weather",
        instructions="Answer with the weather.",
        settings={"temperature": 0.7, "seed": 7},
    )

    async with Worker(client, task_queue=task_queue):
        handle = await conversations.start(
            f"conv-{uuid.uuid4()}",
            agent=agent,
            message="Weather in Oslo?",
            options=ConversationOptions(idle_timeout=1.0),
            settings={"temperature": 0, "max_tokens": 256},
        )
        async with asyncio.timeout(30):
            result = await handle.result()

    assert (result.status, result.output, result.turns) == (
        "idle_timeout",
        "It is 21 °C in Oslo.",
        2,
    )
    sent = [s.body for s in replay.sent]
    assert sent == [exchange["request"] for exchange in exchanges]
    assistant = sent[1]["messages"][2]
    assert assistant["role"] == "assistant" and assistant["content"] == ""
    assert all(body["tool_choice"] == "auto" for body in sent)
