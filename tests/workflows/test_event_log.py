"""The event stream's log keeps each item as its serialized payload (`workflows/event_log.py`).

`event_payload` encodes exactly the `Payload` the loop used to build, for
any document; in a running conversation every item of the log, whether the
loop published it, an activity sent it by signal or the previous run
carried it across continue-as-new, is a `StoredPayload`, and readers get the
same events as before (`test_event_stream.py` reads them in every way).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_support import turns
from hypothesis import given
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import running

from durable_tools import RetryPolicy, Toolkit, tool
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.live_runs import LIVE_RUNS
from durable_tools.tools import ToolContext
from durable_tools.workflows.event_log import StoredPayload, event_payload


@given(st.binary(max_size=70_000))
def test_event_payload_is_the_payload_it_stands_for(data: bytes) -> None:
    built = Payload(metadata={"encoding": b"json/plain"}, data=data)
    stored = event_payload(data)
    assert stored.SerializeToString() == built.SerializeToString()
    assert Payload.FromString(stored.SerializeToString()) == built
    assert stored.to_payload() == built
    assert stored.ByteSize() == built.ByteSize()


@tool(retry=RetryPolicy(max_attempts=2, initial_interval=0.05, maximum_interval=0.1))
async def flaky(key: str, ctx: ToolContext) -> str:
    """Fetch a key; its first attempt fails.

    Args:
        key: The key.
    """
    if ctx.attempt == 1:
        raise ConnectionError(f"connection reset fetching {key}")
    return f"got {key}"


KIT = Toolkit(flaky, label="log")
AGENT = AgentConfig(name="main", model="directed", toolkit="log")


def log_of(workflow_id: str, run_id: str) -> list[Any]:
    run: Any = LIVE_RUNS.get(workflow_id, run_id)
    assert run is not None, "the run is not held by this worker"
    return list(run._view.stream._log)  # noqa: SLF001


async def test_every_item_of_a_running_log_is_stored_as_bytes(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"log": KIT}) as h:
        workflow_id = await h.start(
            turns([("c1", "flaky", {"key": "k"})]),
            agent=AGENT,
            options=ConversationOptions(search_attributes=False, continue_as_new_after_turns=1),
        )
        seen: list[str] = []
        async with asyncio.timeout(30):
            async for event in h.conversations.events(workflow_id):
                seen.append(event.kind)
                if event.kind == "turn_finished" and "tool_call_finished" in seen:
                    break
        # A failed attempt is published by its activity (a signal to the stream).
        assert "tool_attempt_failed" in seen and "tool_call_scheduled" in seen

        await h.conversations.send(workflow_id, "hello")
        async with asyncio.timeout(30):
            async for event in h.conversations.events(workflow_id, after=len(seen) - 1):
                seen.append(event.kind)
                if event.kind == "turn_finished" and event.text == "echo: hello":
                    break
        description = await h.client.get_workflow_handle(workflow_id).describe()
        assert (await h.conversations.status(workflow_id)).runs >= 2

        log = log_of(workflow_id, description.run_id)
        # The previous run's events came across continue-as-new, and this run's follow.
        assert len(log) == len(seen)
        assert {type(item.data) for item in log} == {StoredPayload}
        kinds = [item.data.to_payload().data for item in log]
        assert any(b'"tool_attempt_failed"' in k for k in kinds)
        assert any(b'"echo: hello"' in k for k in kinds)
