"""The event stream's log keeps each item as its serialized payload (`workflows/event_log.py`).

`event_payload` encodes exactly the `Payload` the loop used to build, for
any document; in a running conversation every item of the log, whether the
loop published it, an activity sent it by signal or the previous run
carried it across continue-as-new, is a `StoredPayload`, and readers get the
same events as before (`test_event_stream.py` reads them in every way).
"""

from __future__ import annotations

import asyncio
import base64
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
from durable_tools.workflows import event_log
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


_PUBLISH = "__temporal_workflow_stream_publish"  # Workflow Streams' publish signal


async def test_a_publish_signal_with_items_that_are_not_payloads_loses_nothing(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    # Anyone who may signal the conversation can publish to its stream. Items
    # whose data is not a base64 `Payload` are dropped; the batch's others
    # are kept, and the conversation's workflow tasks go on.
    good = base64.b64encode(event_payload(b'{"note": "kept"}').SerializeToString()).decode()
    hostile = ["%%% not base64 %%%", base64.b64encode(b"\xff\xff\xff\xff").decode(), "QQ"]
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"log": KIT}) as h:
        workflow_id = await h.start("hi", agent=AGENT)
        handle = h.client.get_workflow_handle(workflow_id)
        items = [{"topic": "x", "data": data} for data in hostile]
        await handle.signal(_PUBLISH, {"items": [*items, {"topic": "x", "data": good}]})
        await handle.signal(_PUBLISH, {"items": "not a list", "sequence": "one"})
        await h.conversations.send(workflow_id, "hello")
        async with asyncio.timeout(30):
            async for event in h.conversations.events(workflow_id):
                if event.kind == "turn_finished" and event.text == "echo: hello":
                    break
        description = await handle.describe()
        log = log_of(workflow_id, description.run_id)
        published = [item.data.to_payload().data for item in log if item.topic == "x"]
        assert published == [b'{"note": "kept"}']


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
_ENTRY = st.fixed_dictionaries(
    {"topic": st.text(max_size=8), "data": st.text(max_size=24) | _ANY_JSON}
)


@given(
    st.one_of(
        _ANY_JSON,
        st.fixed_dictionaries(
            {"items": st.lists(_ENTRY, max_size=4)},
            optional={"publisher_id": _ANY_JSON, "sequence": _ANY_JSON},
        ),
    )
)
def test_any_publish_input_is_a_batch_of_payloads_or_dropped(value: Any) -> None:
    checked = event_log._publish_batch([value])  # noqa: SLF001  # pyright: ignore[reportPrivateUsage]
    if checked is not None:
        batch, wires = checked
        assert len(wires) == len(batch.items)
        for item in batch.items:
            assert isinstance(Payload.FromString(base64.b64decode(item.data)), Payload)
