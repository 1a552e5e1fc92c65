"""One conversation with a tool call against an OpenAI-compatible server, two ways.

`make test` replays recorded exchanges through the SDK's transport
(`tests/durable_tools/models/test_openai_compatible.py`); `make
test-local-model` runs the same conversation against a real llama-cpp-python
server (`tests/local_model/`), and can record its exchanges for the replay
(`DT_RECORD_EXCHANGES=FILE`). Both use what is defined here, so a recorded
request is exactly what the replay test expects the adapter to send.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import openai
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools.client import Conversations
from durable_tools.constructors import tool
from durable_tools.conversation import AgentConfig, ConversationOptions, ConversationResult
from durable_tools.descriptor import ToolDescriptor
from durable_tools.models.openai import OpenAIChatModel
from durable_tools.signals import finish_tool
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import TranscriptItem
from durable_tools.worker.plugin import DurableToolsPlugin

MODEL = "gemma-3-270m-it"
"""The model name sent (llama-cpp-python's server serves one model whatever the name)."""

MESSAGE = "What is the weather in Oslo?"
AGENT = AgentConfig(
    model="local",
    toolkit="weather",
    instructions=(
        "You answer questions about the weather. Call city_weather to learn the weather "
        "of a city, then answer in one short sentence."
    ),
    settings={"temperature": 0.7, "seed": 7},
)
FINISHING_AGENT = AGENT.model_copy(
    update={
        "instructions": (
            "You answer questions about the weather. First call city_weather to learn the "
            "weather of a city, then call finish with your answer."
        )
    }
)
"""The agent of the live tier: it ends with the `finish` tool (see `weather_toolkit`)."""
START_SETTINGS: dict[str, Any] = {"temperature": 0, "max_tokens": 256}
"""Settings given to `Conversations.start`, merged over `AGENT.settings`."""


def weather_toolkit(*, offer_once: bool = False) -> Toolkit:
    """A toolkit with `city_weather`; `offer_once`: offered only until it has run, then `finish`.

    llama-cpp-python's `chatml-function-calling` format leaves tool messages
    out of the prompt, so a model offered the tool again after calling it
    calls it again (Gemma 3 270M does, every turn), and offered no tools it
    answers with empty text. With `offer_once` the toolkit also has the
    `finish` signal tool, and the turn after the call offers only `finish`:
    Gemma 3 270M then ends the conversation with an answer as its output.
    """
    ran: list[str] = []

    @tool(annotations={"read_only": True, "idempotent": True})
    async def city_weather(city: str) -> dict[str, Any]:
        """Current weather for a city.

        Args:
            city: City name.
        """
        ran.append(city)
        return {"city": city, "temp_c": 21}

    class OfferedOnce(Toolkit):
        def descriptors(self) -> list[ToolDescriptor]:
            offered = super().descriptors()
            return [d for d in offered if d.name != "city_weather"] if ran else offered

    if offer_once:
        answer = finish_tool(output={"type": "string", "description": "A short sentence."})
        return OfferedOnce(city_weather, answer, label="weather")
    return Toolkit(city_weather, label="weather")


@dataclass
class Recorder(httpx2.AsyncBaseTransport):
    """Forwards requests to the real server and keeps each exchange's JSON bodies."""

    inner: httpx2.AsyncBaseTransport = field(default_factory=httpx2.AsyncHTTPTransport)
    exchanges: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        await response.aclose()
        self.exchanges.append(
            {
                "request": json.loads(request.content),
                "status": response.status_code,
                "response": json.loads(body) if body else None,
            }
        )
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return httpx2.Response(response.status_code, headers=headers, content=body)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def save(self, path: Path, about: str) -> None:
        path.write_text(
            json.dumps({"_about": about, "exchanges": self.exchanges}, indent=2, ensure_ascii=False)
            + "\n",
            encoding="utf-8",
        )


@dataclass
class Outcome:
    result: ConversationResult
    transcript: list[TranscriptItem]


async def weather_conversation(
    env: WorkflowEnvironment,
    task_queue: str,
    http_client: httpx2.AsyncClient,
    *,
    base_url: str = "http://127.0.0.1:8080/v1",
    max_model_turns: int = 4,
    timeout: float = 30,
    offer_once: bool = False,
    stream: bool = False,
) -> Outcome:
    """Run `MESSAGE` on `env` with an `OpenAIChatModel` over `http_client`.

    The agent is `AGENT`, or `FINISHING_AGENT` with `weather_toolkit(offer_once=True)`.
    The model does not stream unless `stream` (the recorded exchanges are
    plain JSON requests and answers).
    """
    agent = FINISHING_AGENT if offer_once else AGENT
    model = OpenAIChatModel(
        model=MODEL,
        client=openai.AsyncOpenAI(
            api_key="not-needed", base_url=base_url, max_retries=0, http_client=http_client
        ),
        stream=stream,
    )
    plugin = DurableToolsPlugin(
        toolkits={"weather": weather_toolkit(offer_once=offer_once)}, models={"local": model}
    )
    client = Client(**{**env.client.config(), "plugins": [plugin]})
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"conv-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue):
        handle = await conversations.start(
            workflow_id,
            agent=agent,
            message=MESSAGE,
            options=ConversationOptions(idle_timeout=1.0, max_model_turns=max_model_turns),
            settings=START_SETTINGS,
        )
        async with asyncio.timeout(timeout):
            result = await handle.result()
        transcript = await conversations.history(workflow_id)
    return Outcome(result=result, transcript=transcript)
