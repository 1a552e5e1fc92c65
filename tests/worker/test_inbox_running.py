"""The conversation page shows the tool calls in flight and their latest progress (issue 27).

A long call (an MCP task's status messages, a tool's `emit`) used to show
nothing in the inbox until it ended. The page now lists each call started and
not finished, with its latest `tool_progress`, read from the conversation's
recent events, and redraws it live as progress arrives. Against a dev server
and worker, the inbox served on 127.0.0.1, in Debian's Chromium.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
from browser_support import chromium, needs_chromium
from inbox_support import basic, served, turns
from playwright.async_api import expect
from workflow_helpers import WAIT_SECONDS, Harness, eventually

from durable_tools.events import PROGRESS_INTERVAL, ConversationEvent
from durable_tools.worker.inbox.views import RunningLine, running_lines

ANA = basic("ana", "ana-secret")

SECONDS = 8 * PROGRESS_INTERVAL
"""How long the call runs: several progress events, each at most `PROGRESS_INTERVAL` apart."""


def _event(kind: str, call_id: str, **fields: object) -> ConversationEvent:
    return ConversationEvent.model_validate(
        {"kind": kind, "at": datetime.now(UTC), "call_id": call_id, "tool": "t", **fields}
    )


def test_running_lines_follow_starts_progress_attempts_and_ends() -> None:
    events = [
        _event("tool_attempt_started", "a", attempt=1),
        _event("tool_progress", "a", attempt=1, text='{"left": 3}'),
        _event("tool_attempt_started", "b", attempt=1),
        _event("tool_progress", "c", attempt=2, text='"half"'),  # its start was not read
        _event("tool_attempt_started", "a", attempt=2),  # a retry restarts the progress
        _event("tool_call_finished", "b", outcome="ok"),
        _event("message_received", "ignored"),
    ]
    assert running_lines(events) == [
        RunningLine(call_id="a", tool="t", attempt=2, progress=""),
        RunningLine(call_id="c", tool="t", attempt=2, progress='"half"'),
    ]
    ended = [_event("tool_call_finished", "a"), _event("tool_call_finished", "c")]
    assert running_lines([*events, *ended]) == []


@needs_chromium
async def test_the_page_shows_a_calls_progress_live_and_drops_it_when_it_ends(
    harness: Harness,
) -> None:
    wf = await harness.start(turns(("s1", "slow_heartbeat", {"seconds": SECONDS})))

    async def progressed() -> bool:
        events, _ = await harness.conversations.retained_events(wf)
        return any(e.kind == "tool_progress" and e.call_id == "s1" for e in events)

    await eventually(progressed, what="the call's first progress")
    async with served(harness) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert page.status_code == 200
            assert 'class="running-line" data-call-id="s1"' in page.text
            assert "left" in page.text
        async with chromium() as browser:
            context = await browser.new_context(extra_http_headers=ANA)
            view = await context.new_page()
            # The call's length, and the worker's round trip after it.
            bound = (SECONDS + WAIT_SECONDS) * 1000
            await view.goto(f"{url}conversations/{wf}")
            progress = view.get_by_test_id("progress-s1")
            await expect(progress).to_contain_text("left", timeout=bound)
            first = json.loads(await progress.inner_text())["left"]
            await view.evaluate("window.sameDocument = true")
            # Live, no reload: a later progress replaces it...
            await expect(progress).not_to_have_text(json.dumps({"left": first}), timeout=bound)
            # ...and once the call ends, the line goes and its output shows.
            await expect(view.locator("li.running-line")).to_have_count(0, timeout=bound)
            await expect(view.locator('li.msg.tool[data-call-id="s1"]')).to_contain_text(
                f"slept {SECONDS}", timeout=bound
            )
            assert await view.evaluate("window.sameDocument") is True
            await context.close()
