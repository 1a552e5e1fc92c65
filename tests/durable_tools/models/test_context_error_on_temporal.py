"""A provider's context-length error makes the conversation summarize and go on (dev server).

The provider is a recorded exchange replayed through the SDK's transport
(`tests/fixtures/providers/context_length_exceeded.json`: the documented 400
bodies of OpenAI Chat Completions and Anthropic Messages). The third turn's
request is answered with that error: the model activity summarizes all but
the last turn with one more request, records the summary, sends the turn
again with the summary in place of what it covers, and the conversation goes
on; the fourth turn reuses the recorded summary without summarizing again.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from provider_replay import Replay, fixture
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools.client import Conversations
from durable_tools.constructors import tool
from durable_tools.context import DEFAULT_SUMMARY_INSTRUCTIONS
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.models.anthropic import AnthropicModel
from durable_tools.models.base import Model
from durable_tools.models.openai import OpenAIChatModel
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import SUMMARY_HEADING, AssistantMessage, ContextSummary
from durable_tools.worker.plugin import DurableToolsPlugin

ERRORS = fixture("context_length_exceeded.json")
SUMMARY = "The user said one and two; the assistant answered each."


@tool
async def noop() -> str:
    """Do nothing."""
    return ""


def openai_text(text: str) -> dict[str, Any]:
    completion = copy.deepcopy(fixture("openai_chat_text.json")["response"])
    completion["choices"][0]["message"]["content"] = text
    return completion


def anthropic_text(text: str) -> dict[str, Any]:
    message = copy.deepcopy(fixture("anthropic_tool_use.json")["response"])
    message["content"] = [{"type": "text", "text": text}]
    message["stop_reason"] = "end_turn"
    return message


def openai_model(replay: Replay) -> Model:
    client = openai.AsyncOpenAI(api_key="sk-test", max_retries=0, http_client=replay.http_client())
    return OpenAIChatModel(model="gpt-5.4", client=client)


def anthropic_model(replay: Replay) -> Model:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test", max_retries=0, http_client=replay.http_client()
    )
    return AnthropicModel(model="claude-sonnet-4-6", client=client)


def user_texts(body: dict[str, Any]) -> list[str]:
    """The text of each message, in order (both APIs' shapes)."""
    out: list[str] = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(f"{message['role']}:{content}")
        else:
            out.extend(f"{message['role']}:{b['text']}" for b in content if b["type"] == "text")
    return out


PROVIDERS: dict[str, tuple[Callable[[Replay], Model], Callable[[str], dict[str, Any]]]] = {
    "openai_chat": (openai_model, openai_text),
    "anthropic": (anthropic_model, anthropic_text),
}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_context_length_error_summarizes_and_the_conversation_goes_on(
    dev_env: WorkflowEnvironment, task_queue: str, provider: str
) -> None:
    make_model, text = PROVIDERS[provider]
    error = ERRORS[provider]
    replay = (
        Replay()
        .answer(200, text("first answer"))
        .answer(200, text("second answer"))
        .answer(error["status"], error["body"], headers=error["headers"])
        .answer(200, text(SUMMARY))
        .answer(200, text("third answer"))
        .answer(200, text("fourth answer"))
    )
    plugin = DurableToolsPlugin(
        toolkits={"kit": Toolkit(noop, label="kit")}, models={"m": make_model(replay)}
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conversations = Conversations(client, task_queue=task_queue)
    chat = f"context-{uuid.uuid4()}"

    async def reply_after(items: int) -> None:
        for _ in range(400):  # 20 s
            history = await conversations.history(chat)
            if len(history) > items and isinstance(history[-1], AssistantMessage):
                return
            status = await conversations.status(chat)
            assert status.model_failed is None, status.model_failed
            await asyncio.sleep(0.05)
        raise AssertionError("no reply")

    async with Worker(client, task_queue=task_queue):
        agent = AgentConfig(name="main", model="m", toolkit="kit", instructions="Be brief.")
        await conversations.start(
            chat, agent=agent, message="one", options=ConversationOptions(idle_timeout=60)
        )
        await reply_after(1)
        for message in ("two", "three", "four"):
            before = len(await conversations.history(chat))
            await conversations.send(chat, message)
            await reply_after(before + 1)
        history = await conversations.history(chat)
        status = await conversations.status(chat)

    assert status.turns == 4 and status.reconciled
    summaries = [i for i in history if isinstance(i, ContextSummary)]
    assert summaries == [ContextSummary(covers_upto=2, text=SUMMARY, usage=summaries[0].usage)]
    # Every answered request counts in the totals, the summary's too (the same
    # recorded usage each time).
    per_request = summaries[0].usage
    assert per_request is not None and per_request.output_tokens > 0
    assert status.usage["m"].output_tokens == 5 * per_request.output_tokens
    assert [i.text for i in history if isinstance(i, AssistantMessage)] == [
        "first answer",
        "second answer",
        "third answer",
        "fourth answer",
    ]

    # Six requests: turns 1, 2, 3 (refused), the summary, turn 3 again, turn 4.
    assert len(replay.sent) == 6
    refused, summarize, retried, fourth = (s.body for s in replay.sent[2:])
    assert user_texts(refused)[-5:] == [
        "user:one",
        "assistant:first answer",
        "user:two",
        "assistant:second answer",
        "user:three",
    ]
    assert "tools" not in summarize or not summarize["tools"]
    system = summarize.get("system") or summarize["messages"][0]["content"]
    assert system == DEFAULT_SUMMARY_INSTRUCTIONS
    (asked,) = [t for t in user_texts(summarize) if t.startswith("user:")]
    assert asked == "user:USER: one\nASSISTANT: first answer"
    summary_message = f"user:{SUMMARY_HEADING}\n{SUMMARY}"
    kept = ["user:two", "assistant:second answer", "user:three"]
    assert [t for t in user_texts(retried) if t != "system:Be brief."] == [
        summary_message,
        *kept,
    ]
    assert [t for t in user_texts(fourth) if t != "system:Be brief."] == [
        summary_message,
        *kept,
        "assistant:third answer",
        "user:four",
    ]


async def test_a_retried_attempt_reuses_the_summary_its_earlier_attempt_made(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    error = ERRORS["openai_chat"]
    rate_limited = {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}
    replay = (
        Replay()
        .answer(200, openai_text("first answer"))
        .answer(200, openai_text("second answer"))
        .answer(error["status"], error["body"], headers=error["headers"])
        .answer(200, openai_text(SUMMARY))
        .answer(429, rate_limited, headers={"retry-after": "1"})  # the attempt fails here
        .answer(200, openai_text("third answer"))
    )
    plugin = DurableToolsPlugin(
        toolkits={"kit": Toolkit(noop, label="kit")}, models={"m": openai_model(replay)}
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conversations = Conversations(client, task_queue=task_queue)
    chat = f"context-{uuid.uuid4()}"

    async def replies(n: int) -> None:
        for _ in range(400):  # 20 s
            history = await conversations.history(chat)
            if sum(1 for i in history if isinstance(i, AssistantMessage)) >= n:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no reply {n}")

    async with Worker(client, task_queue=task_queue):
        agent = AgentConfig(name="main", model="m", toolkit="kit")
        await conversations.start(
            chat, agent=agent, message="one", options=ConversationOptions(idle_timeout=60)
        )
        await replies(1)
        await conversations.send(chat, "two")
        await replies(2)
        await conversations.send(chat, "three")
        await replies(3)
        history = await conversations.history(chat)

    assert [i for i in history if isinstance(i, ContextSummary)][0].text == SUMMARY
    # The second attempt sent the reduced request at once: no second summary,
    # no second refused request.
    assert len(replay.sent) == 6
    assert replay.sent[5].body == replay.sent[4].body
    assert user_texts(replay.sent[5].body)[0] == f"user:{SUMMARY_HEADING}\n{SUMMARY}"
