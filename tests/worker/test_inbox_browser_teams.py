"""Two teams in one inbox, in a real Chromium (issue 23's acceptance).

Sam (group `support`) and Fay (group `finance`) sign in with basic auth to
one inbox on one namespace. Each sees only the conversations of their team
in the list; a direct URL to the other team's conversation is 404, as is its
event stream fetched from the page; and a message Sam sends shows him as its
sender, marked as an operator's note, in the transcript.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from browser_support import chromium, needs_chromium
from inbox_support import turns
from playwright.async_api import Browser, BrowserContext, expect
from workflow_helpers import Harness

from durable_tools.worker.dev_server import free_port
from durable_tools.worker.inbox import Authenticators, serve_inbox
from durable_tools.worker.inbox.auth import TokenAuth

CREDENTIALS = "sam:sam-secret:support\nfay:fay-secret:finance\n"
REFUND = {"order": "o1", "amount": 5}

pytestmark = needs_chromium


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


@pytest.fixture
async def url(harness: Harness) -> AsyncIterator[str]:
    port, stop, ready = free_port(), asyncio.Event(), list[str]()
    serving = asyncio.create_task(
        serve_inbox(
            harness.conversations,
            Authenticators([TokenAuth.parse(CREDENTIALS)], basic_realm="inbox"),
            port=port,
            stop=stop,
            on_ready=ready.append,
            refresh_seconds=0,
            csrf_secret=b"a shared csrf secret of 32 bytes+",
        )
    )
    try:
        async with asyncio.timeout(10):
            while not ready:
                assert not serving.done(), serving
                await asyncio.sleep(0.05)
        yield ready[0].rstrip("/")
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)


async def _as(browser: Browser, name: str) -> BrowserContext:
    context = await browser.new_context(
        http_credentials={"username": name, "password": f"{name}-secret"}
    )
    context.set_default_timeout(20_000)
    return context


async def test_two_teams_each_see_only_their_own(
    harness: Harness, url: str, browser: Browser
) -> None:
    support = await harness.start(turns(("r1", "refund", REFUND)), team="support")
    finance = await harness.start(turns(("r1", "refund", REFUND)), team="finance")
    for wf in (support, finance):
        await harness.wait_approval(wf, "r1")

    sam = await (await _as(browser, "sam")).new_page()
    fay = await (await _as(browser, "fay")).new_page()
    for page, mine, theirs in ((sam, support, finance), (fay, finance, support)):
        entry = page.locator(f'li.conversation[data-workflow-id="{mine}"]')
        for _ in range(40):  # visibility lists it a moment after the start
            await page.goto(url)
            if await entry.count():
                break
            await asyncio.sleep(0.25)
        await expect(entry).to_be_visible()
        assert await page.locator(f'li.conversation[data-workflow-id="{theirs}"]').count() == 0

        # A direct URL to the other team's conversation: 404, nothing of it shown.
        response = await page.goto(f"{url}/conversations/{theirs}")
        assert response is not None and response.status == 404
        assert "refund" not in await page.content()
        # Its event stream, asked for from the page: refused the same way.
        status = await page.evaluate(
            "async (path) => (await fetch(path)).status", f"/api/conversations/{theirs}/events"
        )
        assert status == 404

    # Sam writes into his team's conversation; the transcript names him.
    await sam.goto(f"{url}/conversations/{support}")
    await sam.get_by_role("textbox", name="Message").fill("The customer called: go ahead.")
    await sam.get_by_role("button", name="Send").click()
    note = sam.locator('li.msg.operator[data-sent-by="sam"]')
    for _ in range(40):  # the page shows the transcript as the worker recorded it
        if await note.count():
            break
        await asyncio.sleep(0.25)
        await sam.reload()
    await expect(note).to_contain_text("operator note")
    await expect(note).to_contain_text("The customer called: go ahead.")
    items = await harness.conversations.history(support)
    assert any(getattr(i, "sent_by", "") == "sam" and getattr(i, "operator", False) for i in items)
