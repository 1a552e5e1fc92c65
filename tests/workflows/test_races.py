"""Messages arriving at any moment are handled the same way (issue 9, item 7).

On the real dev server: a `send` while the model is thinking supersedes that
turn's waits like one arriving while they wait; messages that arrive as the
conversation ends (`finish`, the idle timeout) are answered or returned with
the result, never dropped silently; a `resume` that arrives before the pause
registers applies to it. A gated model (`directed`, but each turn waits for
the test to open its gate) makes "while the model is thinking" exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_support import AGENT, LEDGER_ENV, MODELS, TOOLKITS, directed, turns
from rich.console import Console
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import Harness, assistant_texts, eventually, outputs_by_id, running

from durable_tools.client import Conversations
from durable_tools.conversation import (
    AgentConfig,
    ConversationOptions,
    ConversationResult,
    SendMessage,
)
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage, UserMessage
from durable_tools.worker.plugin import DurableToolsPlugin
from durable_tools.worker.render import render_status

REFUND = {"order": "o1", "amount": 500}
GATED = AgentConfig(name="main", model="gated", toolkit="tests")
OPTIONS = ConversationOptions(search_attributes=True, idle_timeout=60)


class GatedModel:
    """`directed`, but every turn waits until `gate` is set; `thinking` is set on entry."""

    def __init__(self) -> None:
        self.thinking = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.thinking.set()
        await self.gate.wait()
        return directed(request)


@pytest.fixture
async def gated(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Harness, GatedModel]]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    model = GatedModel()
    async with running(
        dev_env, task_queue, ledger, models={"gated": ScriptedModel(model)}
    ) as harness:
        yield harness, model


async def _while_thinking(model: GatedModel) -> None:
    async with asyncio.timeout(20):
        await model.thinking.wait()


async def test_a_message_sent_while_the_model_thinks_supersedes_that_turns_approval(
    gated: tuple[Harness, GatedModel],
) -> None:
    harness, model = gated
    wf = await harness.start(turns([("r1", "refund", REFUND)]), agent=GATED, options=OPTIONS)
    await _while_thinking(model)
    await harness.conversations.send(wf, "never mind")  # stored before the turn ends
    model.gate.set()

    output = (await harness.wait_outputs(wf, "r1"))["r1"]
    assert output.is_error
    assert "a new user message arrived before a decision; not run" in output.content
    items = await harness.wait_assistant_text(wf, "echo: never mind")
    assert harness.ledger_rows("refund") == []
    assert (await harness.conversations.pending(wf)).approvals == []
    # The message follows the cancelled call, as when it arrives 10 ms later.
    texts = [i.text for i in items if isinstance(i, UserMessage)]
    assert texts[-1] == "never mind"


async def test_a_message_that_arrives_while_the_model_calls_finish_is_kept_with_the_result(
    gated: tuple[Harness, GatedModel],
) -> None:
    harness, model = gated
    wf = await harness.start(
        turns([("x1", "finish", {"output": "closed"})]), agent=GATED, options=OPTIONS
    )
    await _while_thinking(model)
    await harness.conversations.send(wf, "one more thing", sent_by="ana")
    model.gate.set()

    result: ConversationResult = await harness.result(wf)
    assert result.status == "finished" and result.output == "closed"
    assert result.unanswered_messages == [SendMessage(text="one more thing", sent_by="ana")]
    # `status` (what `durable-tools status` prints) shows it too.
    status = await harness.conversations.status(wf)
    assert status.state == "finished"
    assert status.unanswered_messages == result.unanswered_messages
    console = Console(width=200, record=True, color_system=None)
    console.print(render_status(wf, status))
    shown = console.export_text()
    assert "unanswered messages" in shown and "one more thing" in shown


async def test_a_message_that_arrives_with_the_idle_timeout_is_answered(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """The idle timer fires and a message arrives with no worker: one task sees both.

    A guard, not a regression test: the code before issue 9 passes it too (the
    SDK applies the signal first, and the wait's condition wins over its timer).
    """
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conversations = Conversations(client, task_queue=task_queue)
    options = ConversationOptions(search_attributes=True, idle_timeout=1.0)
    wf = f"idle-race-{task_queue[-12:]}"
    async with Worker(client, task_queue=task_queue, max_cached_workflows=0):
        handle = await conversations.start(wf, agent=AGENT, message="hello", options=options)

        async def idle() -> bool:
            return (await conversations.status(wf)).state == "idle"

        await eventually(idle, what="the conversation to idle")
    await asyncio.sleep(1.5)  # the idle timer fires; its workflow task waits for a worker
    await conversations.send(wf, "still there?")
    async with Worker(client, task_queue=task_queue, max_cached_workflows=0):
        async with asyncio.timeout(30):
            result = await handle.result()
        items = await conversations.history(wf)
    assert result.status == "idle_timeout"
    assert "echo: still there?" in assistant_texts(items)
    assert result.output == "echo: still there?"


async def test_a_resume_sent_before_the_pause_registers_applies_to_it(harness: Harness) -> None:
    wf = await harness.start(options=OPTIONS)  # idle: nothing is paused yet
    await harness.wait_state(wf, "idle")
    await harness.conversations.resume(wf, "the invoice arrived early", resumed_by="ana")
    await harness.conversations.send(wf, turns([("p1", "pause", {"reason": "invoice"})]))
    output = (await harness.wait_outputs(wf, "p1"))["p1"]
    assert output.content == "the invoice arrived early"
    await harness.wait_assistant_text(wf, "done (directed)")


async def test_a_resume_sent_while_the_model_decides_to_pause_applies_to_it(
    gated: tuple[Harness, GatedModel],
) -> None:
    harness, model = gated
    wf = await harness.start(turns([("p1", "pause", {})]), agent=GATED, options=OPTIONS)
    await _while_thinking(model)
    await harness.conversations.resume(wf, "go on")
    model.gate.set()
    assert (await harness.wait_outputs(wf, "p1"))["p1"].content == "go on"
    assert "p1" in outputs_by_id(await harness.wait_assistant_text(wf, "done (gated)"))


async def test_an_early_resume_is_carried_across_continue_as_new(harness: Harness) -> None:
    options = OPTIONS.model_copy(update={"continue_as_new_after_turns": 1})
    wf = await harness.start("hello", options=options)
    await harness.wait_assistant_text(wf, "echo: hello")
    await harness.conversations.resume(wf, "resumed before the new run")
    # The next message starts a new run first (one turn per run), then the pause.
    await harness.conversations.send(wf, turns([("p1", "pause", {})]))
    output = (await harness.wait_outputs(wf, "p1"))["p1"]
    assert output.content == "resumed before the new run"
    assert (await harness.conversations.status(wf)).runs >= 2
