"""Activities read a run this process holds without a query, and let go when it ends.

`durable_tools.live_runs` (issue 26, items 1 and 4): a worker's activities
ask the run in process for what a query would answer (the agent
configuration, the open call, transcript pages, whether anyone follows),
so on one worker no activity waits on a workflow task; and a run that ends
takes every per-conversation entry of the worker's caches with it.
"""

from __future__ import annotations

import gc
import json
import uuid
from typing import Any

import pytest
from agent_support import AGENT, TOOLKITS, directed
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually

from durable_tools.activities.conversation_memory import ByConversation
from durable_tools.activities.transcript_cache import TranscriptCache
from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.live_runs import LIVE_RUNS, LiveRuns, Release
from durable_tools.testing import ScriptedModel
from durable_tools.worker.plugin import DurableToolsPlugin
from durable_tools.worker.runner import sizing


class _Run:
    """A stand-in for a run (only its identity matters to the registry)."""

    def live_agent_config(self, name: str) -> None:
        return None

    def live_open_call(self, call_id: str) -> None:
        return None

    def live_transcript(self, request: Any) -> None:
        return None

    def live_policy(self, version: str) -> None:
        return None

    def live_followed(self, now: Any) -> bool:
        return False


def test_a_run_is_found_while_held_and_released_as_evicted_when_collected() -> None:
    runs = LiveRuns()
    feed = runs.feed()
    run = _Run()
    runs.register("w", "r1", run)
    assert runs.get("w", "r1") is run
    assert runs.get("w", "r2") is None
    assert runs.holds("w") and not runs.holds("v")
    del run
    gc.collect()
    assert runs.get("w", "r1") is None and len(runs) == 0
    assert not runs.holds("w")
    # Collected while its conversation went on: evicted, not the conversation's end.
    assert feed.take() == [Release("w", "r1", "evicted")]
    assert feed.take() == []


def test_a_run_that_ended_is_reported_once_as_the_conversations_end() -> None:
    runs = LiveRuns()
    feed = runs.feed()
    run = _Run()
    runs.register("w", "r1", run)
    runs.ended("w", "r1", continued=False)
    runs.ended("w", "r1", continued=False)  # replayed to its end again: no second report
    assert feed.take() == [Release("w", "r1", "ended")]
    assert not runs.holds("w")
    del run
    gc.collect()
    assert feed.take() == []


def test_a_run_that_continued_as_new_leaves_its_conversation_going() -> None:
    runs = LiveRuns()
    feed = runs.feed()
    old, new = _Run(), _Run()
    runs.register("w", "r1", old)
    runs.register("w", "r2", new)
    runs.ended("w", "r1", continued=True)
    assert feed.take() == []  # nothing until it is collected
    del old
    gc.collect()
    assert feed.take() == [Release("w", "r1", "continued")]
    assert runs.holds("w")  # the new run


def test_feeds_are_bounded_and_each_sees_every_release() -> None:
    runs = LiveRuns()
    first, second = runs.feed(maxlen=2), runs.feed()
    for n in range(3):
        run = _Run()
        runs.register("w", f"r{n}", run)
        runs.ended("w", f"r{n}", continued=False)
    assert [r.run_id for r in first.take()] == ["r1", "r2"]  # the oldest dropped
    assert [r.run_id for r in second.take()] == ["r0", "r1", "r2"]


def test_memories_by_conversation_drop_the_least_recent_conversation_whole() -> None:
    memory: ByConversation[str, int] = ByConversation(max_conversations=2, max_entries=5)
    memory.put("a", "x", 1)
    memory.put("a", "y", 2)
    memory.put("b", "x", 3)
    assert memory.get("a", "x") == 1  # "a" is now the most recent
    memory.put("c", "x", 4)
    assert memory.get("b", "x") is None  # "b" went, whole
    assert (memory.conversations(), len(memory)) == (2, 3)
    for n in range(6):
        memory.put("c", f"k{n}", n)
    # Past max_entries: "a" goes, then "c" alone keeps the newest within the bound.
    assert memory.get("a", "x") is None
    assert len(memory) == 5 and memory.get("c", "k5") == 5
    memory.release("c", lambda key: key.startswith("k"))
    assert len(memory) == 0 and memory.conversations() == 0
    memory.put("d", "x", 1)
    assert memory.pop("d", "x") == 1 and memory.pop("d", "x") is None
    assert memory.conversations() == 0


class NoDeltas(TranscriptCache):
    """A cache that keeps nothing and never answers from a `TranscriptDelta`."""

    def extend_by_delta(self, *args: Any, **kwargs: Any) -> None:
        return None


def _worker(env: WorkflowEnvironment) -> tuple[Client, DurableToolsPlugin]:
    plugin = DurableToolsPlugin(
        toolkits=TOOLKITS, models={"directed": ScriptedModel(directed)}, search_attributes=False
    )
    config: dict[str, Any] = {**env.client.config(), "plugins": [plugin]}
    return Client(**config), plugin


def _options() -> ConversationOptions:
    return ConversationOptions(
        continue_as_new_after_turns=3, idle_timeout=60.0, search_attributes=False
    )


async def test_one_worker_never_queries_its_own_runs_and_lets_go_when_they_end(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every memory missing (no cache, no plan, no configuration kept): reads stay in process.

    A run that ends then takes every entry kept for its conversation.
    """
    client, plugin = _worker(dev_env)
    activities = plugin.agent_activities
    activities.transcripts = NoDeltas(max_entries=0)  # every turn reads whole
    monkeypatch.setattr(activities._planned, "get", lambda *_: None)  # pyright: ignore[reportPrivateUsage]
    monkeypatch.setattr(activities._agent_configs, "get", lambda *_: None)  # pyright: ignore[reportPrivateUsage]
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"live-{uuid.uuid4()}"
    calls = 7
    async with Worker(client, task_queue=task_queue):
        await conversations.start(
            workflow_id,
            agent=AGENT,
            message=json.dumps({"loop": calls, "size": 50}),
            options=_options(),
        )
        await eventually(lambda: _idle(conversations, workflow_id), what="the conversation idle")
        status = await conversations.status(workflow_id)
        assert status.runs >= 3  # continued as new twice: later runs hold only a tail
        stats = activities.transcripts.stats
        assert stats.queries == 0 and stats.local_reads >= calls + 1
        assert activities.reads.queries == 0
        # An agent configuration per turn, an open call per tool call, all in process.
        assert activities.reads.local >= 2 * calls
        # The idle conversation's entries are kept: its run is live.
        assert activities.produced.bytes > 0
        await conversations.cancel(workflow_id)
        handle = client.get_workflow_handle(workflow_id)
        await eventually(lambda: _closed(handle), what="the conversation cancelled")
    gc.collect()
    activities.let_go()
    assert activities.produced.bytes == 0 and len(activities.produced) == 0
    assert activities.transcripts.get(workflow_id) is None
    assert len(activities._planned) == 0  # pyright: ignore[reportPrivateUsage]
    assert activities._agent_configs.conversations() == 0  # pyright: ignore[reportPrivateUsage]
    assert not LIVE_RUNS.holds(workflow_id)


async def _idle(conversations: Conversations, workflow_id: str) -> bool:
    status = await conversations.status(workflow_id)
    return status.state == "idle"


async def _closed(handle: Any) -> bool:
    return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING


async def test_the_activities_memories_are_sized_with_the_workflow_cache(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client, plugin = _worker(dev_env)
    worker = Worker(client, task_queue=task_queue, max_cached_workflows=7)
    activities = plugin.agent_activities
    assert activities.transcripts.max_entries == 7
    assert activities._agent_configs.max_conversations == 7  # pyright: ignore[reportPrivateUsage]
    assert activities._planned.max_conversations == 7  # pyright: ignore[reportPrivateUsage]
    assert activities.context.max_runs == 7
    assert sizing(worker) == (
        "sized for 7 cached conversations, 100 activity slots, 100 workflow task slots"
    )
