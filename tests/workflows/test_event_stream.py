"""The conversation's event stream (Workflow Streams) on the dev server.

Two calls to the same tool, one of them retried: the events arrive in order
with the right call ids; resuming after an offset yields only later events;
the events survive continue-as-new; the stream ends with the conversation.
Activities publish attempt starts and progress only for retries and calls
that run longer than `STARTED_DELAY`: quick calls cost no signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_support import turns
from temporalio.api.common.v1 import Payload
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, running

from durable_tools import AssistantMessage, RetryPolicy, Toolkit, tool
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions, ModelRetry
from durable_tools.events import EVENTS_TOPIC, STARTED_DELAY, ConversationEvent
from durable_tools.models.base import ModelRequest
from durable_tools.models.streaming import text_delta
from durable_tools.tools import Emit, ToolContext
from durable_tools.worker.follow import Commands, Follower


@tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.05, maximum_interval=0.1))
async def fetch(key: str, ctx: ToolContext) -> str:
    """Fetch a key; the key `bad` fails its first attempt.

    Args:
        key: The key.
    """
    if key == "bad" and ctx.attempt == 1:
        raise ConnectionError(f"connection reset fetching {key}")
    return f"got {key}"


@tool(retry=RetryPolicy(max_attempts=2, initial_interval=0.05, maximum_interval=0.1))
async def count(to: int, emit: Emit, ctx: ToolContext) -> str:
    """Count to `to`, one step each 0.2 s, emitting progress; `to` 3 fails its first attempt.

    Args:
        to: Where to stop.
    """
    if to == 3 and ctx.attempt == 1:
        raise ConnectionError("lost count")
    for i in range(1, to + 1):
        emit({"at": i, "of": to})
        await asyncio.sleep(0.2)
    return f"counted to {to}"


KIT = Toolkit(fetch, count, label="events")
AGENT = AgentConfig(name="main", model="directed", toolkit="events")
TWO_FETCHES = turns([("c1", "fetch", {"key": "good"}), ("c2", "fetch", {"key": "bad"})])


async def collect(
    conversations: Conversations,
    workflow_id: str,
    until: Callable[[list[ConversationEvent]], bool],
    *,
    after: int = -1,
    timeout: float = 30,
) -> list[ConversationEvent]:
    seen: list[ConversationEvent] = []
    async with asyncio.timeout(timeout):
        async for event in conversations.events(workflow_id, after=after):
            seen.append(event)
            if until(seen):
                return seen
    return seen


def turn_finished(n: int) -> Callable[[list[ConversationEvent]], bool]:
    return lambda seen: any(e.kind == "turn_finished" and e.turn == n for e in seen)


def index(events: list[ConversationEvent], kind: str, call_id: str | None = None) -> int:
    return next(
        i
        for i, e in enumerate(events)
        if e.kind == kind and (call_id is None or e.call_id == call_id)
    )


async def test_events_of_two_calls_to_one_tool_arrive_in_order_with_their_call_ids(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"events": KIT}) as h:
        workflow_id = await h.start(TWO_FETCHES, agent=AGENT)
        events = await collect(h.conversations, workflow_id, turn_finished(2))

        assert [e.offset for e in events] == list(range(len(events)))
        kinds = [e.kind for e in events]
        assert kinds[:3] == ["message_received", "turn_started", "turn_finished"]
        assert events[2].turn == 1 and events[2].calls == 2
        assert kinds[-2:] == ["turn_started", "turn_finished"]
        assert [(e.call_id, e.attempt) for e in events if e.kind == "tool_attempt_failed"] == [
            ("c2", 1)
        ]
        failed = next(e for e in events if e.kind == "tool_attempt_failed")
        assert failed.tool == "fetch" and "connection reset fetching bad" in (failed.reason or "")
        for call_id in ("c1", "c2"):
            assert index(events, "tool_call_scheduled", call_id) < index(
                events, "tool_call_finished", call_id
            )
        assert (
            index(events, "tool_call_scheduled", "c2")
            < index(events, "tool_attempt_failed", "c2")
            < index(events, "tool_call_finished", "c2")
        )
        finished = {e.call_id: e.outcome for e in events if e.kind == "tool_call_finished"}
        assert finished == {"c1": "ok", "c2": "ok"}

        # Resuming after an offset yields exactly the later events.
        middle = index(events, "tool_call_scheduled", "c2")
        resumed = await collect(
            h.conversations,
            workflow_id,
            lambda seen: len(seen) >= len(events) - middle - 1,
            after=middle,
        )
        assert resumed == events[middle + 1 :]

        # The stream ends with the conversation.
        await h.conversations.cancel(workflow_id)
        rest = await collect(h.conversations, workflow_id, lambda _: False, after=events[-1].offset)
        assert [e.kind for e in rest][-1] == "conversation_finished"
        assert rest[-1].outcome == "cancelled"


async def test_events_survive_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"events": KIT}) as h:
        workflow_id = await h.start(
            TWO_FETCHES,
            agent=AGENT,
            options=ConversationOptions(search_attributes=False, continue_as_new_after_turns=1),
        )
        first = await collect(h.conversations, workflow_id, turn_finished(2))
        await h.conversations.send(workflow_id, "hello")
        everything = await collect(
            h.conversations,
            workflow_id,
            lambda seen: any(e.kind == "turn_finished" and e.text == "echo: hello" for e in seen),
        )
        assert (await h.conversations.status(workflow_id)).runs >= 3
        assert everything[: len(first)] == first
        assert [e.offset for e in everything] == list(range(len(everything)))
        assert [e.text for e in everything if e.kind == "message_received"] == [
            TWO_FETCHES,
            "hello",
        ]


def publish_signals(history: object) -> int:
    events = getattr(history, "events", [])
    return sum(
        1
        for e in events
        if e.HasField("workflow_execution_signaled_event_attributes")
        and e.workflow_execution_signaled_event_attributes.signal_name
        == "__temporal_workflow_stream_publish"
    )


async def test_long_calls_and_retries_publish_starts_and_progress_per_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    # Two calls to one tool: c1 counts for 2 s (longer than STARTED_DELAY),
    # c2 fails fast once, then counts for 0.6 s; c3 is quick and publishes nothing.
    assert STARTED_DELAY < 2
    calls = turns(
        [("c1", "count", {"to": 10}), ("c2", "count", {"to": 3}), ("c3", "fetch", {"key": "k"})]
    )
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"events": KIT}) as h:
        workflow_id = await h.start(calls, agent=AGENT)
        events = await collect(h.conversations, workflow_id, turn_finished(2))
        assert [e.offset for e in events] == list(range(len(events)))

        started = [(e.call_id, e.attempt) for e in events if e.kind == "tool_attempt_started"]
        assert sorted(started) == [("c1", 1), ("c2", 2)]
        c1 = next(e for e in events if e.kind == "tool_attempt_started" and e.call_id == "c1")
        assert c1.tool == "count" and c1.max_attempts == 2

        progress = [e for e in events if e.kind == "tool_progress"]
        assert {e.call_id for e in progress} == {"c1", "c2"}
        c1_steps = [e.text for e in progress if e.call_id == "c1"]
        # Throttled: at most about one a second of 10 steps over 2 s, the latest value each.
        assert 1 <= len(c1_steps) <= 4, c1_steps
        assert all(t is not None and t.startswith('{"at": ') for t in c1_steps)
        for call_id in ("c1", "c2"):
            assert index(events, "tool_call_scheduled", call_id) < index(
                events, "tool_attempt_started", call_id
            )
            assert max(
                i
                for i, e in enumerate(events)
                if e.call_id == call_id and e.kind != "tool_call_finished"
            ) < index(events, "tool_call_finished", call_id)
        assert not any(e.call_id == "c3" for e in events if e.kind.startswith("tool_attempt"))

        finished = {e.call_id: e for e in events if e.kind == "tool_call_finished"}
        assert {k: (e.outcome, e.attempt) for k, e in finished.items()} == {
            "c1": ("ok", 1),
            "c2": ("ok", 2),
            "c3": ("ok", 1),
        }
        assert (finished["c1"].duration or 0) >= 2.0
        assert 0 <= (finished["c3"].duration or 0) < 2.0

        # c1: one signal after STARTED_DELAY (start + progress), maybe one more;
        # c2: the failure, then the retry's start; c3: none.
        history = await h.client.get_workflow_handle(workflow_id).fetch_history()
        signals = publish_signals(history)
        assert 3 <= signals <= 5, signals


async def test_quick_tool_calls_publish_nothing_from_their_activities(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    calls = turns([("c1", "fetch", {"key": "a"}), ("c2", "fetch", {"key": "b"})])
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"events": KIT}) as h:
        workflow_id = await h.start(calls, agent=AGENT)
        events = await collect(h.conversations, workflow_id, turn_finished(2))
        assert not [
            e for e in events if e.kind.startswith("tool_attempt") or e.kind == "tool_progress"
        ]
        assert [e.attempt for e in events if e.kind == "tool_call_finished"] == [1, 1]
        history = await h.client.get_workflow_handle(workflow_id).fetch_history()
        assert publish_signals(history) == 0


class FlakyModel:
    """Fails its first call with a connection error; streams its answer once `followed` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.followed = asyncio.Event()

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("provider reset the connection")
        await self.followed.wait()
        for piece in ("all ", "good ", "now"):
            text_delta(piece)
            await asyncio.sleep(0.05)
        return AssistantMessage(text="all good now")


async def test_a_retried_model_turn_is_reported_by_run_from_its_event(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    retry = ModelRetry(max_attempts=3, initial_interval=0.1, maximum_interval=0.2)
    agent = AgentConfig(name="main", model="flaky", toolkit="events", model_retry=retry)
    lines: list[str] = []
    model = FlakyModel()
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger",
        toolkits={"events": KIT},
        models={"flaky": model},
    ) as h:
        workflow_id = await h.start("hello", agent=agent)
        await collect(h.conversations, workflow_id, lambda seen: bool(seen))
        model.followed.set()  # a poll was answered: text deltas are published from now on
        follower = Follower(
            h.conversations,
            workflow_id,
            emit=lines.append,
            commands=Commands(address="localhost:7233", namespace="default"),
        )
        async with asyncio.timeout(30):
            followed = await follower.follow(asyncio.Event())
        events = await collect(h.conversations, workflow_id, turn_finished(1))

    assert followed.outcome == "idle" and followed.answer == "all good now"
    failed = [e for e in events if e.kind == "model_attempt_failed"]
    assert [(e.turn, e.attempt, e.max_attempts) for e in failed] == [(1, 1, 3)]
    assert "provider reset the connection" in (failed[0].reason or "")
    deltas = [e for e in events if e.kind == "model_text_delta"]
    assert {e.attempt for e in deltas} == {2}
    assert "".join(e.text or "" for e in deltas) == "all good now"
    retried = [line for line in lines if "↻" in line]
    assert len(retried) == 1 and "model turn 1[/] attempt 2 of 3" in retried[0], lines
    assert "provider reset the connection" in retried[0]


async def test_items_a_client_publishes_that_are_not_events_are_skipped(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    # Anyone who may signal the workflow can publish to its stream.
    garbage: list[object] = [
        None,
        42,
        "text",
        {"kind": "no_such_kind", "at": "2026-01-01T00:00:00Z"},
        {"kind": "turn_started"},  # no `at`
        {"kind": "turn_started", "at": "yesterday"},
        Payload(metadata={"encoding": b"binary/plain"}, data=b"\xff\xfe"),
        Payload(metadata={"encoding": b"json/plain"}, data=b"{not json"),
    ]
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"events": KIT}) as h:
        workflow_id = await h.start("hello", agent=AGENT)
        first = await collect(h.conversations, workflow_id, turn_finished(1))
        hostile = WorkflowStreamClient.create(h.client, workflow_id)
        topic = hostile.topic(EVENTS_TOPIC)
        for value in garbage:
            topic.publish(value)
        await hostile.flush()
        await h.conversations.send(workflow_id, "again")
        events = await collect(
            h.conversations,
            workflow_id,
            lambda seen: any(e.kind == "turn_finished" and e.text == "echo: again" for e in seen),
        )
    assert events[: len(first)] == first
    later = events[len(first) :]
    assert [e.kind for e in later][:1] == ["message_received"]
    assert later[0].offset == first[-1].offset + 1 + len(garbage)  # skipped, never yielded


async def test_run_says_when_no_worker_answers_and_detaches_on_stop(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger", toolkits={"events": KIT}) as h:
        nobody = Conversations(h.client, task_queue=f"{task_queue}-nobody-polls")
        workflow_id = f"no-worker-{task_queue}"
        await nobody.start(workflow_id, agent=AGENT, message="hello")
        lines: list[str] = []
        stop = asyncio.Event()
        follower = Follower(
            nobody,
            workflow_id,
            emit=lines.append,
            commands=Commands(address="localhost:7233", namespace="default"),
            step_timeout=0.5,
        )
        following = asyncio.create_task(follower.follow(stop))
        try:
            async with asyncio.timeout(20):
                while not any("is a worker polling task queue" in line for line in lines):
                    await asyncio.sleep(0.1)
            stop.set()
            async with asyncio.timeout(10):
                followed = await following
        finally:
            following.cancel()
            await h.client.get_workflow_handle(workflow_id).terminate("test over")
    assert followed.outcome == "detached"
    assert sum("is a worker polling" in line for line in lines) == 1, lines  # said once


async def test_a_cancel_during_the_model_turn_ends_the_stream_with_conversation_finished(
    harness: Harness,
) -> None:
    """The cancel reaches the loop as the model activity's error, not CancelledError."""
    slow = AgentConfig(name="main", model="slow-model", toolkit="tests")
    workflow_id = await harness.start("30", agent=slow)  # a 30 s model turn
    await harness.wait_state(workflow_id, "model")
    await harness.conversations.cancel(workflow_id)
    events = await collect(
        harness.conversations, workflow_id, lambda seen: seen[-1].kind == "conversation_finished"
    )
    assert events[-1].kind == "conversation_finished" and events[-1].outcome == "cancelled"
    assert (await harness.conversations.status(workflow_id)).state == "cancelled"
