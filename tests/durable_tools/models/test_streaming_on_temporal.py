"""Streamed model turns in a real conversation: text deltas reach `Conversations.events`.

The provider is a recorded SSE exchange replayed through the SDK's transport
(OpenAI Chat Completions and Responses, Anthropic Messages): turn 1 streams text and a
`log_note` call, turn 2 streams the answer. The provider answers only once
the test reads the event stream (deltas are published while someone
follows). The `model_text_delta` events of each turn arrive in order before
its `turn_finished`, and joined they equal the text the transcript records
(one `AssistantMessage` per turn, usage included). Nobody following, the
same conversation publishes no text and sends no signal.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from provider_replay import Replay
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import running

from durable_tools import Toolkit, tool
from durable_tools.conversation import AgentConfig
from durable_tools.events import ConversationEvent
from durable_tools.models.anthropic import AnthropicModel
from durable_tools.models.openai import OpenAIChatModel, OpenAIResponsesModel
from durable_tools.transcript import AssistantMessage

NOTES: list[str] = []


@tool
async def log_note(text: str) -> str:
    """Write a note to the log.

    Args:
        text: The note.
    """
    NOTES.append(text)
    return "logged"


@dataclass
class HeldReplay(Replay):
    """A `Replay` that answers only once `go` is set."""

    go: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:  # type: ignore[override]
        await self.go.wait()
        return super().__call__(request)


def model(kind: str, replay: Replay) -> Any:
    if kind == "anthropic":
        replay.answer_sse("anthropic_stream.sse").answer_sse("anthropic_stream_text.sse")
        client = anthropic.AsyncAnthropic(
            api_key="k", max_retries=0, http_client=replay.http_client()
        )
        return AnthropicModel(model="claude-sonnet-4-6", client=client)
    oa = openai.AsyncOpenAI(api_key="k", max_retries=0, http_client=replay.http_client())
    if kind == "responses":
        replay.answer_sse("openai_responses_stream.sse")
        replay.answer_sse("openai_responses_stream_text.sse")
        return OpenAIResponsesModel(model="gpt-5.4", client=oa)
    replay.answer_sse("openai_chat_stream.sse").answer_sse("openai_chat_stream_text.sse")
    return OpenAIChatModel(model="gpt-5.4", client=oa)


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_text_deltas_arrive_in_order_and_join_into_the_recorded_turn(
    kind: str, dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    replay = HeldReplay()
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger",
        toolkits={"notes": Toolkit(log_note, label="notes")},
        models={"streamed": model(kind, replay)},
    ) as h:
        agent = AgentConfig(name="main", model="streamed", toolkit="notes")
        workflow_id = await h.start("Weather in Boston and Paris? Log it.", agent=agent)
        events: list[ConversationEvent] = []
        async for event in h.conversations.events(workflow_id):
            replay.go.set()  # a poll answered: the conversation is followed
            events.append(event)
            if event.kind == "turn_finished" and event.turn == 2:
                break
        transcript = await h.conversations.history(workflow_id)

    assert all(s.body["stream"] is True for s in replay.sent) and len(replay.sent) == 2
    answers = [i for i in transcript if isinstance(i, AssistantMessage)]
    assert len(answers) == 2 and answers[0].tool_calls[0].name == "log_note"
    assert answers[0].usage is not None and answers[0].usage.output_tokens > 0
    for turn, answer in zip((1, 2), answers, strict=True):
        deltas = [e for e in events if e.kind == "model_text_delta" and e.turn == turn]
        assert deltas and all(e.attempt == 1 for e in deltas)
        assert "".join(e.text or "" for e in deltas) == answer.text
        finished = next(
            i for i, e in enumerate(events) if e.kind == "turn_finished" and e.turn == turn
        )
        assert max(events.index(e) for e in deltas) < finished
    assert answers[1].text == "Noted in the log: Boston 21 °C."


@pytest.mark.parametrize("kind", ["chat"])
async def test_nobody_following_no_text_is_published(
    kind: str, dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    replay = Replay()
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger",
        toolkits={"notes": Toolkit(log_note, label="notes")},
        models={"streamed": model(kind, replay)},
    ) as h:
        agent = AgentConfig(name="main", model="streamed", toolkit="notes")
        workflow_id = await h.start("Weather in Boston and Paris? Log it.", agent=agent)
        handle = h.client.get_workflow_handle(workflow_id)
        async with asyncio.timeout(30):
            while len(await h.conversations.history(workflow_id)) < 4:
                await asyncio.sleep(0.2)
        history = await handle.fetch_history()
        assert await handle.query("followed", result_type=bool) is False

    assert all(s.body["stream"] is True for s in replay.sent) and len(replay.sent) == 2
    signals = [
        e
        for e in history.events
        if e.workflow_execution_signaled_event_attributes.signal_name
        == "__temporal_workflow_stream_publish"
    ]
    assert signals == []
