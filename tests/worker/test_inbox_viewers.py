"""Viewers cost nothing (issue 23, item 6), over real HTTP against a dev server and worker.

Ten and fifty open event streams on one conversation, then Approve through
the API: it succeeds with a receipt, every viewer sees it, and the
conversation's history holds no update per viewer (one feed per conversation
per inbox process). Streams are capped per identity (429). With the
workflow's 10 in-flight updates taken by someone else, a decision and an
answer go as the durable signals, and the person is told they were accepted
for delivery, not confirmed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from inbox_support import bearer, served, sse, turns
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowUpdateStage
from temporalio.contrib.workflow_streams import PollInput, PollResult
from workflow_helpers import Harness

_POLL = "__temporal_workflow_stream_poll"
"""The Workflow Streams long-poll update (and query)."""

ANA = bearer("ana-secret")


def _viewers(n: int) -> str:
    """A token file: ana (approvers) and `n` viewers `v0`..., each its own identity."""
    return "ana:ana-secret:approvers\n" + "".join(f"v{i}:s{i}\n" for i in range(n))


async def _updates(handle: WorkflowHandle[Any, Any]) -> dict[str, int]:
    """The accepted updates in the conversation's history, counted by update name."""
    counts: dict[str, int] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            name = event.workflow_execution_update_accepted_event_attributes.accepted_request
            counts[name.input.name] = counts.get(name.input.name, 0) + 1
    return counts


async def _history_length(handle: WorkflowHandle[Any, Any]) -> int:
    return len([e async for e in handle.fetch_history_events()])


async def _settled_polls(handle: WorkflowHandle[Any, Any]) -> int:
    """The poll updates in history once their number held for 5 poll cooldowns (0.1 s each).

    A reader polls again 0.1 s after a batch (`Conversations.events`); once the
    count holds for 0.5 s, every reader's poll is in flight.
    """
    last, since = -1, 0.0
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(15):
        while True:
            count = (await _updates(handle)).get(_POLL, 0)
            if count != last:
                last, since = count, loop.time()
            elif loop.time() - since >= 0.5:
                return count
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("viewers", [1, 10, 50])
async def test_approve_works_with_many_viewers_and_history_does_not_grow_per_viewer(
    harness: Harness, viewers: int
) -> None:
    wf = await harness.start(turns(("r1", "refund", {"order": "A-9", "amount": 3})))
    approval = await harness.wait_approval(wf, "r1")
    handle = harness.client.get_workflow_handle(wf)
    limits = httpx.Limits(max_connections=viewers + 8, max_keepalive_connections=viewers + 8)
    async with (
        served(harness, credentials=_viewers(viewers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client,
    ):
        first = [asyncio.Event() for _ in range(viewers)]

        async def view(i: int) -> list[str]:
            kinds: list[str] = []
            path = f"/api/conversations/{wf}/events"
            async with client.stream("GET", path, headers=bearer(f"s{i}")) as response:
                assert response.status_code == 200, await response.aread()
                async for name, _, data in sse(response):
                    assert name == "message", (name, data)
                    kinds.append(data["kind"])
                    first[i].set()
                    if data["kind"] == "tool_call_finished" and data["call_id"] == "r1":
                        return kinds
            raise AssertionError(f"viewer {i}'s stream ended early: {kinds}")

        watching = [asyncio.create_task(view(i)) for i in range(viewers)]
        try:
            # Every viewer got its first event: all streams are open and read.
            async with asyncio.timeout(30):
                await asyncio.gather(*(e.wait() for e in first))
            polls_open = await _settled_polls(handle)
            length_open = await _history_length(handle)

            response = await client.post(
                f"/api/conversations/{wf}/calls/r1/decision",
                json={"approved": True, "arguments_hash": approval.arguments_hash},
                headers=ANA,
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["receipt"]["call_id"] == "r1" and body["delivery"] == "confirmed"

            async with asyncio.timeout(30):
                seen = await asyncio.gather(*watching)
        finally:
            for task in watching:
                task.cancel()
            await asyncio.gather(*watching, return_exceptions=True)
    assert all("approval_decided" in kinds for kinds in seen)
    updates = await _updates(handle)
    print(
        f"\n{viewers} viewer(s): {length_open} history events while open, "
        f"{polls_open} poll updates then; after Approve {await _history_length(handle)} "
        f"events, updates {updates}"
    )
    # One feed reads for everyone: its first poll (the backlog) and the one in flight.
    assert 1 <= polls_open <= 3, polls_open
    # After: a poll per batch of events, never one per viewer.
    assert updates[_POLL] <= len(seen[0]) + 3, (updates, len(seen[0]))
    assert updates["decide_now"] == 1


async def test_event_streams_are_capped_per_identity(harness: Harness) -> None:
    wf = await harness.start(turns(("r1", "refund", {"order": "A-10", "amount": 4})))
    await harness.wait_approval(wf, "r1")
    cap = 16  # STREAMS_PER_IDENTITY
    path = f"/api/conversations/{wf}/events"
    limits = httpx.Limits(max_connections=cap + 8, max_keepalive_connections=cap + 8)
    async with (
        served(harness) as url,
        httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client,
    ):
        opened: list[httpx.Response] = []
        try:
            for _ in range(cap):
                request = client.build_request("GET", path, headers=ANA)
                response = await client.send(request, stream=True)
                opened.append(response)
                assert response.status_code == 200
            refused = await client.get(path, headers=ANA)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"] == "too_many_streams"
            assert "16" in refused.json()["message"]
            # The cap is per identity: bob still follows it.
            async with client.stream("GET", path, headers=bearer("bob-secret")) as response:
                assert response.status_code == 200
            # A stream closed is a stream free again (once the server saw it close).
            await opened.pop().aclose()
            async with asyncio.timeout(10):
                while True:
                    request = client.build_request("GET", path, headers=ANA)
                    response = await client.send(request, stream=True)
                    if response.status_code == 200:
                        opened.append(response)
                        break
                    await response.aclose()
                    await asyncio.sleep(0.05)
        finally:
            for response in opened:
                await response.aclose()


async def test_decisions_and_answers_go_as_signals_when_updates_are_exhausted(
    harness: Harness,
) -> None:
    both = json.dumps(
        {
            "turns": [
                [
                    ["r1", "refund", {"order": "A-11", "amount": 5}],
                    ["a1", "ask", {"question": "Refund it?"}],
                ]
            ]
        }
    )
    wf = await harness.start(both)
    approval = await harness.wait_approval(wf, "r1")
    question = await harness.wait_interaction(wf, "a1")
    handle = harness.client.get_workflow_handle(wf)
    # Someone else holds the workflow's 10 in-flight updates: polls for an offset to come.
    for _ in range(10):
        await handle.start_update(
            _POLL,
            PollInput(topics=[], from_offset=1_000_000),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=PollResult,
        )
    async with served(harness) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        # The page's Approve form (bearer: no CSRF token) and the API's answer, together:
        # Temporal refuses each update, the SDK retries the refusal ~15 s, then the signal.
        decided, answered = await asyncio.gather(
            client.post(
                f"/conversations/{wf}/decide",
                data={
                    "call_id": "r1",
                    "arguments_hash": approval.arguments_hash,
                    "decision": "approve",
                },
                headers=ANA,
            ),
            client.post(
                f"/api/conversations/{wf}/calls/a1/answer",
                json={"value": "yes", "arguments_hash": question.arguments_hash},
                headers=ANA,
            ),
        )
    assert decided.status_code == 303, decided.text
    notice = httpx.URL(decided.headers["location"]).params["notice"]
    assert notice.startswith("Approved call r1. Sent as a signal"), notice
    assert "accepted for delivery, not confirmed" in notice
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert (body["delivery"], body["receipt"]) == ("signal", None)
    assert "accepted for delivery, not confirmed" in body["note"]
    outputs = await harness.wait_outputs(wf, "r1", "a1")
    assert outputs["r1"].content == "refunded 5 on A-11"
    assert outputs["a1"].content == "yes"
    assert "decide_now" not in await _updates(handle)


async def test_a_stream_behind_the_feeds_buffer_reads_what_it_missed_without_updates(
    harness: Harness,
) -> None:
    from durable_tools.worker.inbox.feeds import EventFeeds

    wf = await harness.start(turns(("r1", "refund", {"order": "A-12", "amount": 6})))
    approval = await harness.wait_approval(wf, "r1")
    handle = harness.client.get_workflow_handle(wf)
    feeds = EventFeeds(harness.conversations, buffer=2, linger=0.1)

    async def read(stream: Any, until: str) -> list[Any]:
        found: list[Any] = []
        async with asyncio.timeout(30):
            async for event in stream:
                if event is not None:
                    found.append(event)
                    if event.kind == until:
                        return found
        raise AssertionError(f"the stream ended before {until}: {found}")

    first = feeds.open(wf, "ana", after=-1, keepalive=5)
    try:
        seen = await read(first, "approval_requested")
        assert len(seen) > 2  # more than the buffer keeps
        assert [e.offset for e in seen] == list(range(len(seen)))
        polls = await _settled_polls(handle)
        # From the start, and from the middle: no gap, no repeat, and no update sent.
        late = feeds.open(wf, "bob", after=-1, keepalive=5)
        middle = feeds.open(wf, "bob", after=seen[1].offset, keepalive=5)
        try:
            assert await read(late, "approval_requested") == seen
            assert await read(middle, "approval_requested") == seen[2:]
            assert len(feeds) == 1
            assert (await _updates(handle)).get(_POLL, 0) == polls
            await harness.conversations.approve(
                wf, "r1", arguments_hash=approval.arguments_hash, decided_by="bob", wait=True
            )
            for stream in (first, late, middle):
                decided = await read(stream, "approval_decided")
                assert decided[-1].decided_by == "bob"
        finally:
            await late.aclose()
            await middle.aclose()
    finally:
        await first.aclose()
        await feeds.close()
