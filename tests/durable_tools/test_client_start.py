"""`Conversations.start` is safe to repeat: a second start attaches to the running conversation."""

from __future__ import annotations

import uuid

import pytest
from agent_support import AGENT
from workflow_helpers import Harness, eventually

from durable_tools.conversation import AgentConfig
from durable_tools.errors import ConfigurationError
from durable_tools.transcript import UserMessage


async def test_starting_twice_with_one_id_attaches_and_sends_nothing_twice(harness: Harness):
    conv = harness.conversations
    wid = f"same-{uuid.uuid4()}"
    first = await conv.start(wid, agent=AGENT, message="hello")
    second = await conv.start(wid, agent=AGENT, message="hello")
    assert second.result_run_id == first.result_run_id

    async def one_reply() -> bool:
        items = await conv.history(wid)
        return any(getattr(i, "text", "") == "echo: hello" for i in items)

    await eventually(one_reply, what="the reply to the first message")
    items = await conv.history(wid)
    assert [i.text for i in items if isinstance(i, UserMessage)] == ["hello"]
    await conv.send(wid, "again")

    async def two_replies() -> bool:
        return sum(getattr(i, "text", "") == "echo: again" for i in await conv.history(wid)) == 1

    await eventually(two_replies, what="exactly one reply to the second message")
    await first.terminate("test over")


async def test_two_agents_with_one_name_are_refused_before_anything_starts(harness: Harness):
    clash = AgentConfig(name=AGENT.name, model="other", toolkit="tests")
    with pytest.raises(ConfigurationError, match="two agent configurations"):
        await harness.conversations.start("never-started", agent=AGENT, handoffs=[clash])


async def test_settings_naming_a_field_the_adapter_renders_are_refused_before_starting(
    harness: Harness,
):
    with pytest.raises(ConfigurationError, match=r"\['messages', 'tools'\] cannot be set"):
        await harness.conversations.start(
            "never-started", agent=AGENT, settings={"tools": [], "messages": [], "top_p": 1}
        )
    with pytest.raises(ConfigurationError, match="values must be JSON"):
        await harness.conversations.start("never-started", agent=AGENT, settings={"x": {1, 2}})
