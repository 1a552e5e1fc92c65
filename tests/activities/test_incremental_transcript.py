"""The model activity reads only the transcript items it has not seen, and sees the same.

Each worker keeps, per conversation, the items it read and their digest
(`activities/transcript_cache.py`); a turn asks the workflow for the items
after them with that digest, and reads everything again (across runs) on a
miss or a mismatch. What the model sees must be exactly the transcript a full read
gives: checked turn by turn against the conversation's whole transcript,
across continue-as-new, two workers taking turns, and stale cache entries.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from agent_support import AGENT, TOOLKITS, directed, turns
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually

from durable_tools._wire import DeltaEntry, TranscriptDelta
from durable_tools.activities import context_window
from durable_tools.activities.transcript_cache import CachedTranscript, TranscriptCache
from durable_tools.client import Conversations
from durable_tools.context_view import item_chars
from durable_tools.conversation import ConversationOptions, ConversationStatus
from durable_tools.descriptor import ToolDescriptor
from durable_tools.models.base import ModelRequest
from durable_tools.results import ToolCall
from durable_tools.testing import ScriptedModel
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import AssistantMessage, ToolCallOutput, TranscriptItem, UserMessage
from durable_tools.transcript_digest import EMPTY_DIGEST, extend_digest, item_json
from durable_tools.worker.plugin import DurableToolsPlugin

SIZE = 300
# A stopped worker's sticky queue holds the workflow's next task this long.
_STICKY = timedelta(seconds=1)


def _worker(
    env: WorkflowEnvironment, *, deltas: bool = False
) -> tuple[Client, DurableToolsPlugin, ScriptedModel]:
    """A worker; `deltas=False` makes every read take the query path (as a
    worker that ran none of the activities a `TranscriptDelta` names)."""
    model = ScriptedModel(directed)
    plugin = DurableToolsPlugin(
        toolkits=TOOLKITS, models={"directed": model}, search_attributes=False
    )
    if not deltas:
        plugin.agent_activities.transcripts = QueriesOnly()
    config: dict[str, Any] = {**env.client.config(), "plugins": [plugin]}
    return Client(**config), plugin, model


class QueriesOnly(TranscriptCache):
    """A cache that never answers from a `TranscriptDelta`: every turn reads (`read`)."""

    def extend_by_delta(self, *args: Any, **kwargs: Any) -> None:
        return None


def _options(every: int | None = None) -> ConversationOptions:
    return ConversationOptions(
        continue_as_new_after_turns=every, idle_timeout=60.0, search_attributes=False
    )


def _loop(turns: int) -> str:
    return json.dumps({"loop": turns, "size": SIZE})


def _assert_saw_full_transcript(
    requests: Sequence[ModelRequest], transcript: Sequence[TranscriptItem], turns: int
) -> None:
    """Model turn t saw exactly the items before the t-th assistant message."""
    before = [i for i, item in enumerate(transcript) if isinstance(item, AssistantMessage)]
    assert len(before) == turns
    seen = sorted({r.turn for r in requests})
    assert seen == list(range(1, turns + 1))
    for request in requests:
        assert request.transcript == list(transcript[: before[request.turn - 1]]), request.turn


async def _idle_after(conversations: Conversations, workflow_id: str, turns: int) -> None:
    async def probe() -> bool:
        status = await conversations.status(workflow_id)
        return status.state == "idle" and status.turns == turns

    await eventually(probe, what=f"{workflow_id} idle after {turns} turns", timeout=60)


async def _converse(
    client: Client, task_queue: str, name: str, calls: int, every: int
) -> tuple[str, list[TranscriptItem], ConversationStatus]:
    """A conversation of `calls` echo turns and "done", continuing as new every
    `every` turns, run to idle on a worker; its id, transcript and status."""
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"{name}-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue):
        await conversations.start(
            workflow_id, agent=AGENT, message=_loop(calls), options=_options(every=every)
        )
        await _idle_after(conversations, workflow_id, calls + 1)
        transcript = await conversations.history(workflow_id)
        status = await conversations.status(workflow_id)
    return workflow_id, transcript, status


def _digest(items: Sequence[TranscriptItem]) -> str:
    digest = EMPTY_DIGEST
    for item in items:
        digest = extend_digest(digest, item_json(item))
    return digest


def _whole(before: Sequence[TranscriptItem], added: Sequence[TranscriptItem]) -> TranscriptDelta:
    """The delta appending `added` to `before`, every item given whole."""
    return TranscriptDelta(
        start=len(before),
        start_digest=_digest(before),
        entries=[DeltaEntry(item=item) for item in added],
        digest=_digest([*before, *added]),
    )


async def test_each_turn_reads_only_new_items_across_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client, plugin, model = _worker(dev_env)
    cache = plugin.agent_activities.transcripts
    turns = 31  # 30 calling `echo`, then "done"
    workflow_id, transcript, status = await _converse(client, task_queue, "incremental", 30, 7)

    assert status.runs == 5  # 7 turns per run: 31 turns in 5 runs
    _assert_saw_full_transcript(model.requests, transcript, turns)
    stats = cache.stats
    # One full read (the first turn), then one read per turn: the cache is
    # the conversation's, and the new run holds the digest of what it did not carry.
    assert (stats.misses, stats.full_reads, stats.mismatches) == (1, 1, 0)
    assert stats.hits == turns - 1
    # Each from the run in this process (durable_tools.live_runs): no query.
    assert (stats.local_reads, stats.queries, stats.earlier_queries) == (turns, 0, 0)
    assert (stats.inconsistent, stats.legacy_reads) == (0, 0)
    entry = cache.get(workflow_id)
    assert entry is not None
    held = transcript[: len(entry.items)]
    assert entry.digest == _digest(held)
    calls = {c.call_id for i in held if isinstance(i, AssistantMessage) for c in i.tool_calls}
    assert entry.call_ids == calls and len(calls) == 30


class TakingTurns(QueriesOnly):
    """Two workers' caches serving model turns alternately (odd turns, even turns).

    One Temporal runtime refuses two workers on one task queue, and which of
    two worker processes gets an activity is up to the server; this makes the
    alternation exact: each read extends a prefix one turn behind the workflow.
    """

    def __init__(self) -> None:
        super().__init__()
        self.workers = (QueriesOnly(), QueriesOnly())
        self.reads = 0

    async def read(self, *args: Any, **kwargs: Any) -> list[TranscriptItem]:
        self.reads += 1
        return await self.workers[self.reads % 2].read(*args, **kwargs)


async def test_two_workers_taking_turns_see_the_same_transcript(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """Each worker reads what it lacks: from 0 on its first turn, then from its own prefix."""
    client, plugin, model = _worker(dev_env)
    alternating = TakingTurns()
    plugin.agent_activities.transcripts = alternating
    plugin.agent_activities.live_reads = False  # two processes: neither holds the other's run
    turns = 41
    _, transcript, status = await _converse(client, task_queue, "incremental-two", 40, 15)

    assert status.runs == 3
    _assert_saw_full_transcript(model.requests, transcript, turns)
    odd, even = alternating.workers[1].stats, alternating.workers[0].stats
    # Each worker misses once (its first turn), then extends its own prefix,
    # across the continues-as-new at turns 16 and 31 too.
    assert (odd.misses, even.misses) == (1, 1)
    assert (odd.full_reads, even.full_reads) == (1, 1)
    assert (odd.mismatches, even.mismatches) == (0, 0)
    assert (odd.hits, even.hits) == (21 - 1, 20 - 1)
    assert odd.queries + even.queries == turns


async def test_a_stale_cache_entry_is_detected_and_read_again(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client, plugin, model = _worker(dev_env)
    cache: TranscriptCache = plugin.agent_activities.transcripts
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"incremental-stale-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue):
        await conversations.start(workflow_id, agent=AGENT, message=_loop(3), options=_options())
        await _idle_after(conversations, workflow_id, 4)
        entry = cache.get(workflow_id)
        assert entry is not None and len(entry.items) == 7  # up to the last model turn

        # A consistent entry (its digest is that of its items) with other content.
        stale = (UserMessage(text="another conversation"), *entry.items[1:])
        cache.put(workflow_id, CachedTranscript(stale, _digest(stale), 1000, entry.call_ids))
        await conversations.send(workflow_id, _loop(2))
        await _idle_after(conversations, workflow_id, 7)
        assert cache.stats.mismatches == 1

        # An entry longer than what the next turn asks for.
        entry = cache.get(workflow_id)
        assert entry is not None
        longer = (*entry.items, *entry.items[-3:])
        cache.put(workflow_id, CachedTranscript(longer, _digest(longer), 1, entry.call_ids))
        await conversations.send(workflow_id, _loop(1))
        await _idle_after(conversations, workflow_id, 9)
        assert cache.stats.mismatches == 2
        transcript = await conversations.history(workflow_id)

    _assert_saw_full_transcript(model.requests, transcript, 9)
    assert cache.stats.full_reads == 3  # the first turn and the two mismatches
    assert cache.stats.hits == 9 - 3
    entry = cache.get(workflow_id)
    assert entry is not None and entry.digest == _digest(transcript[: len(entry.items)])


async def test_a_worker_restart_reads_the_transcript_again(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """A new worker process has an empty cache: its first turn reads from item 0."""
    client, plugin, model = _worker(dev_env)
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"incremental-restart-{uuid.uuid4()}"
    async with Worker(
        client, task_queue=task_queue, sticky_queue_schedule_to_start_timeout=_STICKY
    ):
        await conversations.start(workflow_id, agent=AGENT, message=_loop(2), options=_options())
        await _idle_after(conversations, workflow_id, 3)
    client2, plugin2, model2 = _worker(dev_env)
    async with Worker(client2, task_queue=task_queue):
        await Conversations(client2, task_queue=task_queue).send(workflow_id, _loop(3))
        await asyncio.wait_for(_idle_after(conversations, workflow_id, 7), 60)
        transcript = await conversations.history(workflow_id)
    _assert_saw_full_transcript([*model.requests, *model2.requests], transcript, 7)
    assert plugin.agent_activities.transcripts.stats.full_reads == 1
    stats = plugin2.agent_activities.transcripts.stats
    assert (stats.full_reads, stats.hits) == (1, 3)


async def test_a_reused_call_id_is_renamed_when_the_transcript_comes_from_the_cache(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """The call ids already used come from the cache's running set, not a scan."""
    client, plugin, _ = _worker(dev_env)
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"incremental-ids-{uuid.uuid4()}"
    script = turns(
        *[[("same", "get_weather", {"city": city})] for city in ("Oslo", "Lima", "Rome")]
    )
    async with Worker(client, task_queue=task_queue):
        await conversations.start(workflow_id, agent=AGENT, message=script, options=_options())
        await _idle_after(conversations, workflow_id, 4)
        transcript = await conversations.history(workflow_id)
    outputs = [item.call_id for item in transcript if isinstance(item, ToolCallOutput)]
    assert outputs == ["same", "same~2", "same~3"]
    assert plugin.agent_activities.transcripts.stats.hits == 3


# ------------------------------------------------------------- deltas


async def test_most_turns_need_no_query(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that ran the previous turn's activities rebuilds the new items itself.

    Every turn is a `TranscriptDelta` hit, a new run's first turn too: the
    run carried the items since the previous model turn and where they
    start (`CarriedState.delta_from`), and the worker's cache is the
    conversation's, so it holds the items before them. The context window
    looks at each item once in the whole conversation, not once per run.
    """
    looked_at: list[TranscriptItem] = []

    def counted(item: TranscriptItem) -> int:
        looked_at.append(item)
        return item_chars(item)

    monkeypatch.setattr(context_window, "item_chars", counted)
    rendered: list[Toolkit] = []
    descriptors = Toolkit.descriptors

    def render(toolkit: Toolkit) -> list[ToolDescriptor]:
        rendered.append(toolkit)
        return descriptors(toolkit)

    monkeypatch.setattr(Toolkit, "descriptors", render)
    client, plugin, model = _worker(dev_env, deltas=True)
    cache = plugin.agent_activities.transcripts
    turns = 31
    _, transcript, status = await _converse(client, task_queue, "incremental-delta", 30, 7)
    assert status.runs == 5
    _assert_saw_full_transcript(model.requests, transcript, turns)
    stats = cache.stats
    assert stats.delta_hits == turns
    assert (stats.queries, stats.full_reads, stats.misses) == (0, 0, 0)
    assert (stats.mismatches, stats.delta_mismatches, stats.inconsistent) == (0, 0, 0)
    assert len(looked_at) == len(transcript) - 1  # all but the final answer, once each
    assert len(rendered) == 1  # the descriptors and their digest: once, not every turn


async def test_a_remembered_output_that_differs_is_not_used(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """What a worker remembers is checked against the workflow's digest before use."""
    client, plugin, model = _worker(dev_env, deltas=True)
    activities = plugin.agent_activities
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"incremental-delta-check-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue):
        await conversations.start(workflow_id, agent=AGENT, message=_loop(1), options=_options())
        await _idle_after(conversations, workflow_id, 2)
        # As if an attempt whose result was not recorded had returned this.
        for item in await conversations.history(workflow_id):
            if isinstance(item, ToolCallOutput):
                activities.produced.remember(
                    workflow_id,
                    DeltaEntry(call_id=item.call_id),
                    item.model_copy(update={"content": "forged"}),
                )
        activities.produced.remember(
            workflow_id, DeltaEntry(turn=2), AssistantMessage(text="not what was recorded")
        )
        await conversations.send(workflow_id, _loop(1))
        await _idle_after(conversations, workflow_id, 4)
        transcript = await conversations.history(workflow_id)
    _assert_saw_full_transcript(model.requests, transcript, 4)
    assert all("forged" not in str(r.transcript) for r in model.requests)
    stats = activities.transcripts.stats
    assert stats.delta_mismatches == 1
    assert stats.hits == 1  # that turn read the new items by query instead


def test_a_delta_is_used_only_when_it_rebuilds_the_workflows_prefix() -> None:
    cache = TranscriptCache()
    first = [UserMessage(text="hello")]
    reply = AssistantMessage(text="hi")
    delta = _whole([], first)
    assert cache.extend_by_delta("w", delta, lambda _: None) == first
    # A retried turn asks for what is already held: answered as it is.
    assert cache.extend_by_delta("w", delta, lambda _: None) == first
    grown = [*first, reply, UserMessage(text="more")]
    by_reference = TranscriptDelta(
        start=1,
        start_digest=_digest(first),
        entries=[DeltaEntry(turn=1), DeltaEntry(item=grown[2])],
        digest=_digest(grown),
    )
    # Nothing remembered for turn 1: no answer (the caller queries).
    assert cache.extend_by_delta("w", by_reference, lambda _: None) is None
    # Something else remembered: no answer either.
    other = AssistantMessage(text="other")
    assert cache.extend_by_delta("w", by_reference, lambda _: other) is None
    assert cache.stats.delta_mismatches == 1
    # Another start than what is held: no answer.
    shifted = by_reference.model_copy(update={"start": 0})
    assert cache.extend_by_delta("w", shifted, lambda _: reply) is None
    assert cache.extend_by_delta("w", by_reference, lambda _: reply) == grown
    assert cache.stats.delta_hits == 3
    assert cache.stats.queries == 0


def test_a_delta_grows_the_cached_entry_in_place() -> None:
    # The cost of a turn is its delta's: the entry is appended to and handed
    # out as it is, never copied (copies of 20,000 items every turn made the
    # 10,000-turn bench's turns grow).
    cache = TranscriptCache()
    items: list[TranscriptItem] = [UserMessage(text="hello")]
    start = _whole([], items)
    first = cache.extend_by_delta("w", start, lambda _: None)
    assert first == items
    entry = cache.get("w")
    assert entry is not None
    held, held_ids, size = entry.items, entry.call_ids, cache.bytes
    for turn in range(1, 4):
        call = ToolCall(call_id=f"c{turn}", name="echo", arguments="{}")
        reply = AssistantMessage(tool_calls=(call,))
        output = ToolCallOutput(call_id=call.call_id, tool="echo", content=f"out {turn}")
        grown = [*items, reply, output]
        delta = TranscriptDelta(
            start=len(items),
            start_digest=_digest(items),
            entries=[DeltaEntry(turn=turn), DeltaEntry(item=output)],
            digest=_digest(grown),
        )
        seen = cache.extend_by_delta("w", delta, lambda _, reply=reply: reply)
        assert seen == grown and seen is held
        items = grown
    entry = cache.get("w")
    assert entry is not None and entry.items is held and entry.call_ids is held_ids
    assert held_ids == {"c1", "c2", "c3"} and first is held
    assert cache.bytes == entry.size > size == sum(len(item_json(i)) for i in items[:1])
    assert entry.size == sum(len(item_json(i)) for i in items)
    # A delta that does not rebuild the prefix leaves the entry as it was.
    bad = TranscriptDelta(
        start=len(items),
        start_digest=_digest(items),
        entries=[DeltaEntry(item=UserMessage(text="x"))],
        digest=EMPTY_DIGEST,
    )
    assert cache.extend_by_delta("w", bad, lambda _: None) is None
    assert entry.items == items and entry.digest == _digest(items)


def test_a_cache_over_its_byte_bound_evicts_a_grown_entry() -> None:
    cache = TranscriptCache(max_bytes=2_000)
    items: list[TranscriptItem] = [UserMessage(text="a" * 100)]
    assert cache.extend_by_delta("w", _whole([], items), lambda _: None) == items
    grown = [*items, UserMessage(text="b" * 3_000)]
    delta = _whole(items, grown[1:])
    assert cache.extend_by_delta("w", delta, lambda _: None) == grown  # used, not kept
    assert cache.get("w") is None and cache.bytes == 0


def test_a_cached_list_changed_by_its_reader_is_dropped_and_read_again() -> None:
    # The cache hands out its own list (ModelRequest.transcript says: do not
    # change it); a model that appends to it or cuts it must not corrupt later turns.
    items: list[TranscriptItem] = [UserMessage(text="hello"), AssistantMessage(text="hi")]
    delta = _whole([], items)
    for change in (
        lambda held: held.append(UserMessage(text="made up")),
        lambda held: held.pop(),
        lambda held: held.__setitem__(-1, AssistantMessage(text="made up")),
    ):
        cache = TranscriptCache()
        held = cache.extend_by_delta("w", delta, lambda _: None)
        assert held == items
        change(held)
        assert cache.get("w") is None and cache.stats.tampered == 1 and cache.bytes == 0
        # The next turn's delta no longer finds a prefix: the activity queries.
        grown = [*items, UserMessage(text="more")]
        more = _whole(items, grown[2:])
        assert cache.extend_by_delta("w", more, lambda _: None) is None
