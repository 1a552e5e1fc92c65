"""Long conversations complete across continue-as-new, with a bounded carry and a whole record.

History stays bounded per run: the transcript is read by the model activity
through a query (never recorded as activity input), and the run continues as
new every `continue_as_new_after_turns` turns, so the largest run is far below
Temporal's 4 MB continue-as-new suggestion and the bytes a turn adds to
history do not grow with the conversation (DESIGN.md, invariant 5). What a
run carries to the next is the transcript's newest items only
(`durable_tools.carry`), so it stays under 512 KiB however long the
conversation; `Conversations.history` reads the older items back from the
earlier runs, and so does a worker whose cache is empty.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from datetime import timedelta
from typing import Any

from agent_support import AGENT, MODELS, TOOLKITS, directed
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually

from durable_tools.carry import CARRY_LIMIT_BYTES
from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import (
    AssistantMessage,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
    is_reconciled,
)
from durable_tools.worker.plugin import DurableToolsPlugin

TURNS = 200
SIZE = 5000
EVERY = 50
SUGGESTED_BYTES = 4 * 1024 * 1024  # the server suggests continue-as-new at 4 MB


def _forget_requests(workflow_id: str) -> None:
    """Drop the shared scripted model's records of this conversation (~100 MB)."""
    for model in MODELS.values():
        model.requests[:] = [r for r in model.requests if r.workflow_id != workflow_id]


def _client(env: WorkflowEnvironment, plugin: DurableToolsPlugin | None = None) -> Client:
    plugin = plugin or DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    config: dict[str, Any] = {**env.client.config(), "plugins": [plugin]}
    return Client(**config)


def _carried_sizes(runs: list[History]) -> list[int]:
    """Payload bytes of every continue-as-new input in the chain (as recorded in history)."""
    sizes: list[int] = []
    for run in runs:
        for event in run.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attributes = event.workflow_execution_continued_as_new_event_attributes
                sizes.append(sum(p.ByteSize() for p in attributes.input.payloads))
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                attributes = event.workflow_execution_started_event_attributes
                sizes.append(sum(p.ByteSize() for p in attributes.input.payloads))
    return sizes


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _check_loop_transcript(transcript: list[TranscriptItem], loops: list[tuple[int, int]]) -> None:
    """Every item of conversations of `{"loop": n, "size": s}` messages, in order, by identity.

    Each message makes n assistant messages calling `echo` (call ids
    `loop-0`...; the model activity renames a reused id `loop-0~2`) with
    their outputs, then the assistant's "done".
    """
    expected: list[tuple[str, str]] = []
    for n, size in loops:
        expected.append(("user", _digest(json.dumps({"loop": n, "size": size}))))
        for k in range(n):
            expected.append(("call", f"loop-{k}"))
            expected.append(("output", f"loop-{k}:" + _digest(f"{k}:" + "y" * size)))
        expected.append(("text", "done"))
    got: list[tuple[str, str]] = []
    for item in transcript:
        if isinstance(item, UserMessage):
            got.append(("user", _digest(item.text)))
        elif isinstance(item, AssistantMessage) and item.tool_calls:
            got.extend(("call", c.call_id.split("~")[0]) for c in item.tool_calls)
        elif isinstance(item, AssistantMessage):
            got.append(("text", item.text))
        elif isinstance(item, ToolCallOutput):
            assert item.tool == "echo" and not item.is_error
            got.append(("output", f"{item.call_id.split('~')[0]}:" + _digest(item.content)))
    assert got == expected
    calls = [c.call_id for i in transcript if isinstance(i, AssistantMessage) for c in i.tool_calls]
    outputs = [i.call_id for i in transcript if isinstance(i, ToolCallOutput)]
    assert calls == outputs and len(set(calls)) == len(calls)
    assert is_reconciled(transcript)


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
    # carried state holds the transcript's newest items only, so it does not
    # grow with the conversation (it carried the whole transcript before:
    # ~1 MB after 200 turns of 5 KB); what a turn adds does not either (the
    # naive loop records the whole transcript every turn instead: ~50 MB by
    # turn 100).
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
    # What a run carries out is what the next run starts with, and it is
    # bounded: the same from the second run on, under the limit.
    for k in range(len(runs) - 1):
        assert carried[k][1] < carried[k + 1][0] + 1000
    later = [c for pair in carried[1:-1] for c in pair]
    assert max(later) < 1.1 * min(later), carried
    assert max(_carried_sizes(runs)) <= CARRY_LIMIT_BYTES


async def test_a_transcript_over_5_mb_goes_on_with_a_bounded_carry_and_reads_back_whole(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """18 tool outputs of 300 KB (5.4 MB), continuing as new every 2 turns.

    Each output is larger than the carried tail's budget, so a run carries
    none of them: the model, `history` and a page of it read them back from
    the earlier runs. Every continue-as-new input stays under 512 KiB (it
    carried the whole transcript before, and stopped continuing as new past
    2 MB).
    """
    client = _client(dev_env)
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"huge-{uuid.uuid4()}"
    loops, size = 18, 300_000
    async with Worker(client, task_queue=task_queue):
        handle = await conversations.start(
            workflow_id,
            agent=AGENT,
            message=json.dumps({"loop": loops, "size": size}),
            options=ConversationOptions(
                continue_as_new_after_turns=2, idle_timeout=1.0, search_attributes=False
            ),
        )
        result = await asyncio.wait_for(conversations.result(workflow_id), 240)
        transcript = await conversations.history(workflow_id)
        page = await conversations.history(workflow_id, start=5, limit=7)
        tail = await conversations.history(workflow_id, start=len(transcript) - 2)
        status = await conversations.status(workflow_id)
        assert handle.first_execution_run_id is not None
        runs = await _runs(client, workflow_id, handle.first_execution_run_id)

    assert (result.status, result.turns, result.output) == ("idle_timeout", loops + 1, "done")
    assert result.transcript_items == status.transcript_items == len(transcript) == 2 * loops + 2
    assert sum(len(i.content) for i in transcript if isinstance(i, ToolCallOutput)) > 5_000_000
    _check_loop_transcript(transcript, [(loops, size)])
    assert page == transcript[5:12] and tail == transcript[-2:]
    assert status.runs == len(runs) == loops // 2 + 1
    carried = _carried_sizes(runs)
    print(
        f"\n{loops} outputs of {size:,} B: {len(runs)} runs, continue-as-new inputs "
        f"{min(carried):,}-{max(carried):,} B, history {sum(r.ByteSize() for r in runs):,} B"
    )
    assert len(carried) == 2 * len(runs) - 1  # every start but the first, every continue
    assert max(carried) <= CARRY_LIMIT_BYTES, carried
    # The model saw the whole transcript on its last turn.
    last = [r for r in MODELS["directed"].requests if r.workflow_id == workflow_id][-1]
    assert last.transcript == transcript[:-1]
    _forget_requests(workflow_id)


async def test_a_worker_with_an_empty_cache_reads_the_earlier_runs(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """A new worker mid-conversation gives the model every item, read back across runs."""
    size = 200_000  # over the carried tail's budget: the new run carries no output
    first_model, second_model = ScriptedModel(directed), ScriptedModel(directed)
    first = DurableToolsPlugin(
        toolkits=TOOLKITS, models={"directed": first_model}, search_attributes=False
    )
    second = DurableToolsPlugin(
        toolkits=TOOLKITS, models={"directed": second_model}, search_attributes=False
    )
    options = ConversationOptions(
        continue_as_new_after_turns=2, idle_timeout=120.0, search_attributes=False
    )
    workflow_id = f"cold-{uuid.uuid4()}"

    async def idle_after(conversations: Conversations, turns: int) -> None:
        async def probe() -> bool:
            status = await conversations.status(workflow_id)
            return status.state == "idle" and status.turns == turns

        await eventually(probe, what=f"idle after {turns} turns", timeout=120)

    client = _client(dev_env, first)
    conversations = Conversations(client, task_queue=task_queue)
    sticky = timedelta(seconds=1)  # the stopped worker's sticky queue lets go soon
    async with Worker(client, task_queue=task_queue, sticky_queue_schedule_to_start_timeout=sticky):
        await conversations.start(
            workflow_id,
            agent=AGENT,
            message=json.dumps({"loop": 6, "size": size}),
            options=options,
        )
        await idle_after(conversations, 7)
    client2 = _client(dev_env, second)
    conversations2 = Conversations(client2, task_queue=task_queue)
    async with Worker(client2, task_queue=task_queue):
        await conversations2.send(workflow_id, json.dumps({"loop": 3, "size": size}))
        await idle_after(conversations2, 11)
        transcript = await conversations2.history(workflow_id)
        status = await conversations2.status(workflow_id)
        await conversations2.cancel(workflow_id)

    assert status.runs > 3
    _check_loop_transcript(transcript, [(6, size), (3, size)])
    answers = [k for k, item in enumerate(transcript) if isinstance(item, AssistantMessage)]
    requests = [*first_model.requests, *second_model.requests]
    assert sorted(r.turn for r in requests) == list(range(1, 12))
    for request in requests:  # turn t saw every item before the t-th assistant message
        assert request.transcript == transcript[: answers[request.turn - 1]], request.turn
    assert min(r.turn for r in second_model.requests) == 8
    stats = second.agent_activities.transcripts.stats
    print(f"\nwarm worker: {first.agent_activities.transcripts.stats}\ncold worker: {stats}")
    # The cold worker's first turn reads everything, most of it from earlier runs.
    assert (stats.misses, stats.full_reads) == (1, 1)
    assert stats.hits + stats.delta_hits == 3
    assert stats.earlier_queries >= 3  # the new run holds none of the first 7 turns' outputs
    # The warm worker never reads from 0; it asks an earlier run only for
    # what a run did not carry since its last model turn (the one 200 KB
    # output), once per continue-as-new (turns 2, 4 and 6).
    warm = first.agent_activities.transcripts.stats
    assert (warm.full_reads, warm.mismatches) == (0, 0)
    assert warm.earlier_queries == 3
