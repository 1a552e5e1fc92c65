"""A 200-turn conversation with 5 KB tool outputs completes across continue-as-new.

History stays bounded per run: the transcript is read by the model activity
through a query (never recorded as activity input), and the run continues as
new every `continue_as_new_after_turns` turns, so the largest run is far below
Temporal's 4 MB continue-as-new suggestion and the bytes a turn adds to
history do not grow with the conversation (DESIGN.md, invariant 5).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from agent_support import AGENT, MODELS, TOOLKITS, turns
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.transcript import AssistantMessage, ToolCallOutput, is_reconciled
from durable_tools.worker.plugin import DurableToolsPlugin

TURNS = 200
SIZE = 5000
EVERY = 50
SUGGESTED_BYTES = 4 * 1024 * 1024  # the server suggests continue-as-new at 4 MB


def _forget_requests(workflow_id: str) -> None:
    """Drop the shared scripted model's records of this conversation (~100 MB)."""
    for model in MODELS.values():
        model.requests[:] = [r for r in model.requests if r.workflow_id != workflow_id]


def _client(env: WorkflowEnvironment) -> Client:
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    config: dict[str, Any] = {**env.client.config(), "plugins": [plugin]}
    return Client(**config)


async def _runs(client: Client, workflow_id: str, first_run_id: str) -> list[History]:
    """The history of every run of the continue-as-new chain, in order."""
    runs: list[History] = []
    run_id: str | None = first_run_id
    while run_id:
        fetched = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(History(events=fetched.events))
        last = fetched.events[-1]
        run_id = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return runs


async def test_200_turns_with_5kb_outputs_across_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = _client(dev_env)
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"long-{uuid.uuid4()}"
    started = time.monotonic()
    async with Worker(client, task_queue=task_queue):
        handle = await conversations.start(
            workflow_id,
            agent=AGENT,
            message=json.dumps({"loop": TURNS, "size": SIZE}),
            options=ConversationOptions(
                continue_as_new_after_turns=EVERY, idle_timeout=1.0, search_attributes=False
            ),
        )
        result = await conversations.result(workflow_id)
        elapsed = time.monotonic() - started
        transcript = await conversations.history(workflow_id)
        status = await conversations.status(workflow_id)

        assert result.status == "idle_timeout"
        assert result.output == "done"
        assert result.turns == TURNS + 1  # 200 turns calling `echo`, then "done"
        assert result.transcript_items == len(transcript) == 1 + 2 * TURNS + 1
        assert status.runs == TURNS // EVERY + 1 > 1
        assert status.turns == TURNS + 1
        assert status.reconciled and is_reconciled(transcript)

        outputs = [item for item in transcript if isinstance(item, ToolCallOutput)]
        assert len(outputs) == TURNS
        assert all(o.tool == "echo" and not o.is_error for o in outputs)
        assert [o.content for o in outputs] == [f"{k}:" + "y" * SIZE for k in range(TURNS)]
        assert len({o.call_id for o in outputs}) == TURNS
        final = transcript[-1]
        assert isinstance(final, AssistantMessage) and final.text == "done"

        assert handle.first_execution_run_id is not None
        runs = await _runs(client, workflow_id, handle.first_execution_run_id)
    _forget_requests(workflow_id)

    assert len(runs) == status.runs
    sizes = [run.ByteSize() for run in runs]
    events = [len(run.events) for run in runs]
    # A run's history = what its own turns add + the carried state at both ends
    # (the first event's input and the continue-as-new event's input). The
    # carried state is the transcript, which grows with the conversation
    # (~1 MB after 200 turns of 5 KB), so the *largest* run grows linearly with
    # the conversation; what a turn adds does not (the naive loop records the
    # whole transcript every turn instead: ~50 MB by turn 100).
    carried = [
        (len(run.events[0].SerializeToString()), len(run.events[-1].SerializeToString()))
        for run in runs
    ]
    own = [size - first - last for size, (first, last) in zip(sizes, carried, strict=True)]
    print(
        f"\n{TURNS} turns in {elapsed:.1f} s; runs: {len(runs)}; events: {events}; "
        f"bytes: {sizes}; without the carried state: {own}"
    )
    assert max(sizes) < SUGGESTED_BYTES * 0.6, sizes
    assert max(events) < 1000, events
    full_runs = own[:-1]  # the runs with EVERY turns each
    assert max(full_runs) < 1.1 * min(full_runs), own
    assert max(full_runs) / EVERY < 2 * SIZE, own  # ~8 KB per 5 KB turn
    # What a run carries out is what the next run starts with, and it is the
    # transcript: about the tool outputs so far, not a multiple of them.
    for k in range(len(runs) - 1):
        assert carried[k][1] < carried[k + 1][0] + 1000
        assert carried[k][1] < 1.2 * (k + 1) * EVERY * SIZE + 20_000, carried


async def test_transcript_over_2_mb_is_read_in_pages_and_stays_in_one_run(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """Three 1.1 MB tool outputs: a 3.3 MB transcript.

    One query result over 2 MB fails ("Blob data size exceeds limit"), and a
    continue-as-new input over 2 MiB fails the workflow task forever: the model
    activity reads the transcript in pages, and the loop does not continue as
    new once the carried state would be too large.
    """
    client = _client(dev_env)
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"huge-{uuid.uuid4()}"
    n_bytes = 1_100_000
    script = turns(*[[(f"b{k}", "big", {"n_bytes": n_bytes})] for k in range(3)])
    async with Worker(client, task_queue=task_queue):
        await conversations.start(
            workflow_id,
            agent=AGENT,
            message=script,
            options=ConversationOptions(
                continue_as_new_after_turns=2, idle_timeout=1.0, search_attributes=False
            ),
        )
        result = await asyncio.wait_for(conversations.result(workflow_id), 60)
        transcript = await conversations.history(workflow_id)
        status = await conversations.status(workflow_id)

    assert (result.status, result.turns, result.output) == ("idle_timeout", 4, "done (directed)")
    assert status.runs == 1  # continuing after turn 2 would carry 2.2 MB
    assert is_reconciled(transcript) and len(transcript) == result.transcript_items == 8
    outputs = [item for item in transcript if isinstance(item, ToolCallOutput)]
    assert [len(o.content) for o in outputs] == [n_bytes] * 3
    # The model saw the whole transcript on its last turn (read in 4 pages).
    last = [r for r in MODELS["directed"].requests if r.workflow_id == workflow_id][-1]
    assert last.transcript == transcript[:-1]
    _forget_requests(workflow_id)
