"""The inbox's live parts over real HTTP (uvicorn on 127.0.0.1) against a dev server and worker:
a conversation's event stream as server-sent events, resumed by `Last-Event-ID`; the list's
stream of changes; the age filters; the offset and age parsers on hostile input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from inbox_support import basic, inbox_client, listed, served, sse, turns
from workflow_helpers import Harness

from durable_tools.worker.inbox.params import MAX_AGE_SECONDS, parse_age, parse_offset

ANA = basic("ana", "ana-secret")


async def _read_until(
    events: AsyncIterator[tuple[str, str, Any]], done: Any, found: list[tuple[str, str, Any]]
) -> None:
    async for event in events:
        found.append(event)
        if done(event):
            return


async def test_the_events_endpoint_streams_the_conversation_live_and_resumes(
    harness: Harness,
) -> None:
    wf = await harness.start(turns(("r1", "refund", {"order": "A-6", "amount": 2})))
    approval = await harness.wait_approval(wf, "r1")
    async with served(harness) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        missing = await client.get("/api/conversations/nope/events", headers=ANA)
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
        for bad in ("x", "1.5", "-2", "9" * 20, "1e3"):
            response = await client.get(
                f"/api/conversations/{wf}/events", headers={**ANA, "Last-Event-ID": bad}
            )
            assert response.status_code == 422, (bad, response.text)
            assert response.json()["error"] == "invalid_offset"

        found: list[tuple[str, str, Any]] = []
        path = f"/api/conversations/{wf}/events"
        async with asyncio.timeout(30), client.stream("GET", path, headers=ANA) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = sse(response)
            await _read_until(events, lambda e: e[2]["kind"] == "approval_requested", found)
            # Live: the decision made elsewhere arrives on the open stream.
            await harness.conversations.approve(
                wf, "r1", arguments_hash=approval.arguments_hash, decided_by="bob", wait=True
            )
            await _read_until(
                events,
                lambda e: e[2]["kind"] == "tool_call_finished" and e[2]["call_id"] == "r1",
                found,
            )
        assert {name for name, _, _ in found} == {"message"}
        offsets = [int(event_id) for _, event_id, _ in found]
        assert offsets == list(range(len(found)))
        assert [data["offset"] for _, _, data in found] == offsets
        kinds = [data["kind"] for _, _, data in found]
        assert kinds[0] == "message_received"
        decided = next(data for _, _, data in found if data["kind"] == "approval_decided")
        assert (decided["decided_by"], decided["outcome"]) == ("bob", "approved")

        # Resumed after the approval request: the same events from there, no gap, no repeat.
        resume_after = next(int(i) for _, i, data in found if data["kind"] == "approval_requested")
        again: list[tuple[str, str, Any]] = []
        headers = {**ANA, "Last-Event-ID": str(resume_after)}
        async with asyncio.timeout(30), client.stream("GET", path, headers=headers) as response:
            await _read_until(sse(response), lambda e: int(e[1]) == offsets[-1], again)
        assert [e[2] for e in again] == [e[2] for e in found[resume_after + 1 :]]
        # `?after=` does the same for a client that cannot set headers.
        again.clear()
        async with (
            asyncio.timeout(30),
            client.stream("GET", f"{path}?after={offsets[-2]}", headers=ANA) as response,
        ):
            await _read_until(sse(response), lambda e: True, again)
        assert int(again[0][1]) == offsets[-1]


async def test_the_events_endpoint_ends_with_the_conversation(harness: Harness) -> None:
    wf = await harness.start(turns(("f1", "finish", {"output": "done"})))
    await harness.result(wf)
    async with served(harness) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        found: list[tuple[str, str, Any]] = []
        path = f"/api/conversations/{wf}/events"
        async with asyncio.timeout(30), client.stream("GET", path, headers=ANA) as response:
            await _read_until(sse(response), lambda e: e[0] != "message", found)
    assert found[-1][0] == "end"
    assert found[-2][2]["kind"] == "conversation_finished"


async def test_the_list_stream_says_when_a_conversation_starts_waiting(harness: Harness) -> None:
    async with (
        served(harness, refresh_seconds=0.3) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        async with (
            asyncio.timeout(30),
            client.stream("GET", "/api/pending/events", headers=ANA) as response,
        ):
            assert response.headers["content-type"].startswith("text/event-stream")
            events = sse(response)
            name, _, first = await anext(events)
            assert name == "changed"
            wf = await harness.start(turns(("r1", "refund", {"order": "A-11", "amount": 2})))
            await harness.wait_approval(wf, "r1")
            name, _, second = await anext(events)
            assert name == "changed" and second["version"] != first["version"]
            await events.aclose()


async def test_the_age_filters_pick_items_by_when_they_were_asked(harness: Harness) -> None:
    wf = await harness.start(turns(("r1", "refund", {"order": "A-12", "amount": 2})))
    await harness.wait_approval(wf, "r1")
    async with inbox_client(harness) as client:
        await listed(client, ANA, wf)

        async def ids(query: str) -> set[str]:
            response = await client.get(f"/api/pending?{query}", headers=ANA)
            assert response.status_code == 200, response.text
            return {w["workflow_id"] for w in response.json()}

        assert wf in await ids("newer_than=1h")
        assert wf not in await ids("older_than=1h")
        assert wf in await ids("older_than=0s&newer_than=7d")
        await asyncio.sleep(1.2)
        assert wf in await ids("older_than=1")
        assert wf not in await ids("newer_than=1s")
        for bad in ("soon", "-5m", "1y", "99999999999d", "1e9", "5 m s"):
            response = await client.get(f"/api/pending?older_than={bad}", headers=ANA)
            assert response.status_code == 422, (bad, response.text)
            assert response.json()["error"] == "invalid_filter"
        page = await client.get("/?older_than=soon", headers=ANA)
        assert page.status_code == 200
        assert "is not an age" in page.text
        page = await client.get("/?newer_than=1h", headers=ANA)
        assert f'data-workflow-id="{wf}"' in page.text
        page = await client.get("/?older_than=1h", headers=ANA)
        assert f'data-workflow-id="{wf}"' not in page.text


@given(st.text(max_size=40))
def test_parse_age_accepts_only_bounded_durations(text: str) -> None:
    try:
        seconds = parse_age(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert seconds is None or 0 <= seconds <= MAX_AGE_SECONDS
    assert (seconds is None) == (text.strip() == "")


@given(st.one_of(st.text(max_size=40), st.integers().map(str)))
def test_parse_offset_accepts_only_stream_offsets(text: str) -> None:
    try:
        offset = parse_offset(text)
    except ValueError:
        return
    assert offset is None or -1 <= offset <= 2**53


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("15 min", 900), ("2h", 7200), ("7d", 604800)],
)
def test_parse_age_units(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds
