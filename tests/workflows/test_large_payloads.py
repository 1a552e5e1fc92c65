"""Large tool results and arguments travel through External Storage (docs/operations.md).

On the dev server, with `PayloadStorage(LocalFileStorageDriver(...))` on the
worker and the client: a 20 MiB tool result reaches the model (which checks its
sha256) while history holds only a reference; 64 MB arguments and a 64 MB
result go round trip; past the configured maximum a result is
`output_too_large`; a continue-as-new input over the threshold is stored too;
and the history replays with the driver configured.
"""

from __future__ import annotations

import base64
import hashlib
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from workflow_helpers import eventually, payloads_of

from durable_tools import AssistantMessage, Toolkit, tool
from durable_tools.client import Conversations
from durable_tools.codec import data_converter
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.models.base import ModelRequest
from durable_tools.storage import LocalFileStorageDriver, PayloadStorage
from durable_tools.testing import ScriptedModel, call, terminate_running
from durable_tools.transcript import ToolCallOutput
from durable_tools.worker.plugin import DurableToolsPlugin, sandbox_runner
from durable_tools.workflows.agent_workflow import AgentWorkflow

MiB = 1024 * 1024
REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"


def blob(size: int, seed: int) -> str:
    """`size` characters of incompressible base64 text, the same for the same seed."""
    raw = random.Random(seed).randbytes(size * 3 // 4 + 3)
    return base64.b64encode(raw).decode()[:size]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@tool(retry=1)
async def make_blob(size: int, seed: int) -> str:
    """Return `size` characters of base64 text."""
    return blob(size, seed)


@tool(retry=1)
async def echo_blob(data: str) -> str:
    """Return `data` as it came."""
    return data


KIT = Toolkit(make_blob, echo_blob, label="large")


def outputs(request: ModelRequest) -> list[ToolCallOutput]:
    return [i for i in request.transcript if isinstance(i, ToolCallOutput)]


def scripted(first: Any) -> ScriptedModel:
    """A model that makes the calls `first` on its first turn, then answers `digest_reply`."""

    def turn(request: ModelRequest) -> AssistantMessage:
        if outputs(request):
            return AssistantMessage(text=digest_reply(request), stop_reason="end_turn")
        return AssistantMessage(tool_calls=tuple(first), stop_reason="tool_use")

    return ScriptedModel(turn)


def digest_reply(request: ModelRequest) -> str:
    """What the model answers: the sha256 and length of each output it received."""
    return " ".join(f"{o.call_id}:{sha256(o.content)}:{len(o.content)}" for o in outputs(request))


@dataclass
class Setup:
    client: Client
    conversations: Conversations
    storage: PayloadStorage
    root: Path
    started: list[str]

    async def run(
        self,
        model: str,
        message: str = "go",
        options: ConversationOptions | None = None,
        timeout: float = 90,
    ) -> tuple[str, Any]:
        workflow_id = f"large-{uuid.uuid4().hex[:12]}"
        self.started.append(workflow_id)
        await self.conversations.start(
            workflow_id,
            agent=AgentConfig(model=model, toolkit="large"),
            message=message,
            options=options,
        )

        async def replied() -> str | None:
            texts = [
                i.text
                for i in await self.conversations.history(workflow_id)
                if isinstance(i, AssistantMessage) and i.text
            ]
            return texts[-1] if texts else None

        return workflow_id, await eventually(replied, what="the model's reply", timeout=timeout)


@asynccontextmanager
async def serving(
    env: WorkflowEnvironment,
    root: Path,
    models: dict[str, Any],
    *,
    max_payload_bytes: int = 64 * MiB,
) -> AsyncIterator[Setup]:
    storage = PayloadStorage(
        driver=LocalFileStorageDriver(root), max_payload_bytes=max_payload_bytes
    )
    plugin = DurableToolsPlugin(toolkits={"large": KIT}, models=models, storage=storage)
    client = Client(**{**env.client.config(), "plugins": [plugin]})
    task_queue = f"large-{uuid.uuid4()}"
    setup = Setup(
        client=client,
        conversations=Conversations(client, task_queue=task_queue),
        storage=storage,
        root=root,
        started=[],
    )
    async with Worker(client, task_queue=task_queue):
        try:
            yield setup
        finally:
            await terminate_running(client, setup.started)


def is_reference(payload: Payload) -> bool:
    return payload.metadata.get("messageType") == REFERENCE_TYPE


def stored_sizes(history: WorkflowHistory, event_type: EventType.ValueType) -> list[int]:
    """The sizes of the externally stored payloads the events of `event_type` refer to."""
    return [
        p.external_payloads[0].size_bytes
        for e in history.events
        if e.event_type == event_type
        for p in payloads_of(e)
        if is_reference(p)
    ]


async def test_a_20_mib_tool_result_reaches_the_model_and_history_holds_a_reference(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    size = 20 * MiB
    expected = sha256(blob(size, 7))
    model = scripted([call("c1", "make_blob", size=size, seed=7)])
    async with serving(dev_env, tmp_path / "payloads", {"m": model}) as setup:
        workflow_id, reply = await setup.run("m")
        assert reply == f"c1:{expected}:{size}"

        history = await setup.client.get_workflow_handle(workflow_id).fetch_history()
        biggest = max(p.ByteSize() for e in history.events for p in payloads_of(e))
        assert biggest < 1 * MiB
        assert max(e.ByteSize() for e in history.events) < 1 * MiB
        (result,) = stored_sizes(history, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)[-1:]
        assert result > size  # the tool activity's result, stored, not recorded
        stored = list((tmp_path / "payloads" / "sha256").glob("*/*"))
        assert any(p.stat().st_size > size for p in stored)

        # The client reads the transcript back through the same storage (queries
        # over 4 MB fail without it: their results are stored the same way).
        (output,) = [
            i
            for i in await setup.conversations.history(workflow_id)
            if isinstance(i, ToolCallOutput)
        ]
        assert sha256(output.content) == expected

        # The recorded history replays with the driver configured.
        replayer = Replayer(
            workflows=[AgentWorkflow],
            data_converter=data_converter(storage=setup.storage),
            workflow_runner=sandbox_runner(),
        )
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None


@pytest.mark.timeout(300)  # about 30 s alone on 2 cores; the machine is shared
async def test_64_mb_arguments_and_result_go_round_trip(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    size = 64_000_000  # under the default maximum, 64 MiB
    data = blob(size, 11)
    expected = sha256(data)
    model = scripted([call("c1", "echo_blob", data=data)])
    async with serving(dev_env, tmp_path / "payloads", {"m": model}) as setup:
        workflow_id, reply = await setup.run("m", timeout=240)
        assert reply == f"c1:{expected}:{size}"
        history = await setup.client.get_workflow_handle(workflow_id).fetch_history()
        assert max(e.ByteSize() for e in history.events) < 1 * MiB
        # The arguments are stored once, with the model turn's result; the tool
        # activity's input names the call (`CallReference`, slim records).
        completed = stored_sizes(history, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
        assert sum(s > size for s in completed) == 2  # the model turn; the result
        scheduled = stored_sizes(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
        assert all(s < size for s in scheduled)


async def test_past_the_configured_maximum_results_and_arguments_are_refused(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    limit = 3 * MiB
    model = scripted(
        [
            call("under", "make_blob", size=2 * MiB, seed=1),  # over today's 1.5 MB
            call("over", "make_blob", size=limit + 1, seed=2),
            call("args_under", "echo_blob", data=blob(2 * MiB, 4)),  # over today's 1 MiB
            call("args_over", "echo_blob", data=blob(limit, 5)),  # the turn's total is over
        ]
    )
    async with serving(
        dev_env, tmp_path / "payloads", {"m": model}, max_payload_bytes=limit
    ) as setup:
        workflow_id, reply = await setup.run("m")
        found = {
            i.call_id: i
            for i in await setup.conversations.history(workflow_id)
            if isinstance(i, ToolCallOutput)
        }
        assert f"over the limit of {limit} bytes (the worker's maximum payload size)" in (
            found["over"].content
        )
        assert found["over"].failure_kind == "output_too_large"
        assert found["under"].failure_kind is None
        assert len(found["under"].content) == 2 * MiB
        assert found["args_under"].failure_kind is None
        assert sha256(found["args_under"].content) == sha256(blob(2 * MiB, 4))
        assert found["args_over"].failure_kind == "input_validation_error"
        (turn, *_) = [
            i
            for i in await setup.conversations.history(workflow_id)
            if isinstance(i, AssistantMessage)
        ]
        dropped = {c.call_id: c.arguments for c in turn.tool_calls}["args_over"]
        assert "dropped: over the turn limit" in dropped
        assert " under:" in reply


async def test_a_continue_as_new_input_over_the_threshold_is_stored(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # The carried tail holds the output (under the largest carry budget,
    # 384 KiB), so the carried state is over the 256 KiB threshold.
    size = 280 * 1024

    model = scripted([call("c1", "make_blob", size=size, seed=3)])
    # Continued as new after the tool's turn: the second run's model turn reads
    # the carried output back.
    options = ConversationOptions(continue_as_new_after_turns=1, carry_transcript_bytes=384 * 1024)
    async with serving(dev_env, tmp_path / "payloads", {"m": model}) as setup:
        workflow_id, reply = await setup.run("m", options=options)
        assert reply == f"c1:{sha256(blob(size, 3))}:{size}"
        history = await setup.client.get_workflow_handle(workflow_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        assert started.continued_execution_run_id  # the reply came from a continued run
        (carried,) = stored_sizes(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)
        assert carried > size


RECORDED = Path(__file__).resolve().parent / "histories" / "storage" / "large_result.json"


async def test_the_recorded_history_with_references_replays_with_the_driver() -> None:
    """`histories/storage/` (record_storage_history.py): references decoded from its objects."""
    from record_storage_history import WORKFLOW_ID, storage

    history = WorkflowHistory.from_json(WORKFLOW_ID, RECORDED.read_text())
    references = [p for e in history.events for p in payloads_of(e) if is_reference(p)]
    assert len(references) >= 2  # at least the tool's result and a model turn
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=data_converter(storage=storage()),
        workflow_runner=sandbox_runner(),
    )
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None
    # Without the driver the references cannot be decoded: the replay fails.
    plain = Replayer(
        workflows=[AgentWorkflow], data_converter=data_converter(), workflow_runner=sandbox_runner()
    )
    failed = await plain.replay_workflow(history, raise_on_replay_failure=False)
    assert "TMPRL1105" in str(failed.replay_failure), failed.replay_failure
