"""What MCP servers ask, answered in the inbox in a real Chromium (issue 27's acceptance).

The test server (tests/mcp/mcp_test_server.py, written with the `mcp` SDK's
own server API) runs beside a worker on the dev server; the inbox is served
on 127.0.0.1 and `ana` answers in the page:

* `paint`'s form, two rounds: the fields are generated from the requested
  schema; an answer, then Decline (and, in a second conversation, Cancel,
  then an answer): the server's tool body sees `decline` and `cancel`;
* `connect`'s link: the page shows its host and the link; *I am done
  there* reaches the server as `accept`, Decline as `decline`;
* `poem`'s sampling request under `sampling = "approve"`: Approve lets the
  conversation's model answer it; Deny (with a reason) ends the call
  `denied` and the server's tool body never runs;
* `survey`, a task that outlives its tool activity's timeout: its question
  mid-task is answered in the page and sent with `tasks/update`;
* a server that requires OAuth (tests/mcp/oauth_test_servers.py with
  `--ask`), once logged in: its `open_notes` asks whose notes, answered in
  the page.

Every wait is bounded by what it waits for: a click by the inbox's update
timeout (`UPDATE_TIMEOUT`), a question by the worker's round trip
(`WAIT_SECONDS`), the task by its length.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from browser_support import accessible, chromium, needs_chromium, shot
from inbox_support import basic, served
from mcp_oauth_support import consent, oauth_servers
from mcp_support import (
    HAIKU,
    POET,
    TASK_ACTIVITY_TIMEOUT,
    poet,
    server_log,
    stdio_test_server,
    task_test_server,
)
from playwright.async_api import Locator, Page, expect
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import WAIT_SECONDS, Harness, running

from durable_tools.mcp import McpServerConfig
from durable_tools.mcp.oauth_login import login
from durable_tools.testing import ScriptedModel
from durable_tools.worker.inbox.conflicts import UPDATE_TIMEOUT

pytestmark = needs_chromium

LINK = "https://auth.example.com/login"
SURVEY_SECONDS = TASK_ACTIVITY_TIMEOUT + 2.0
"""The task runs longer than any one tool activity may."""


@dataclass
class McpInbox:
    url: str
    harness: Harness
    page: Page
    log: Path
    """The `notes` server's log (`tasks`' is `tasks.jsonl` beside it)."""


async def _start(inbox: McpInbox, call_id: str, tool: str, arguments: dict[str, Any]) -> str:
    """Start a conversation whose model calls `tool` (the `poet` agent for `poem`)."""
    turns = json.dumps({"turns": [[[call_id, tool, arguments]]]})
    agent = {"agent": POET} if tool == "notes__poem" else {}
    return await inbox.harness.start(turns, **agent)


async def _shown(inbox: McpInbox, wf: str, what: Locator, *, timeout: float = WAIT_SECONDS) -> None:
    """Open (and reload) the conversation's page until `what` is there: the worker asks first."""
    page = inbox.page
    async with asyncio.timeout(timeout):
        while True:
            await page.goto(f"{inbox.url}conversations/{wf}")
            if await what.count():
                return
            await asyncio.sleep(0.25)


async def _answer(
    inbox: McpInbox,
    wf: str,
    call_id: str,
    asks: str,
    field: tuple[str, str],
    *,
    timeout: float = WAIT_SECONDS,
) -> None:
    """Once the page shows the question `asks`, fill `field` (label, value) and send it."""
    page = inbox.page
    control = page.get_by_label(field[0])
    await _shown(inbox, wf, control, timeout=timeout)
    await expect(page.locator(f'li.item[data-call-id="{call_id}"] .summary')).to_contain_text(asks)
    await control.fill(field[1])
    await page.get_by_role("button", name="Send answer").click()
    await expect(page.get_by_role("status")).to_have_text(f"Answered call {call_id}.")


@asynccontextmanager
async def _inbox_on(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    servers: list[McpServerConfig],
    log: Path,
) -> AsyncIterator[McpInbox]:
    """A worker with `servers` (and the `poet` model), the inbox on 127.0.0.1 (token auth)
    and a page signed in as `ana`."""
    async with (
        running(
            dev_env,
            task_queue,
            tmp_path / "ledger.jsonl",
            mcp_servers=servers,
            models={"poet": ScriptedModel(poet)},
        ) as harness,
        served(harness) as url,
        chromium() as browser,
    ):
        context = await browser.new_context(extra_http_headers=basic("ana", "ana-secret"))
        page = await context.new_page()
        page.set_default_timeout(UPDATE_TIMEOUT * 1000)
        try:
            yield McpInbox(url, harness, page, log)
        finally:
            await context.close()


@pytest.fixture
async def inbox(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[McpInbox]:
    """The test server twice (`notes`: forms, links, sampling to approve; `tasks`: a 1 s call
    timeout, for `survey`) on a worker, the inbox, and `ana`'s page."""
    log = tmp_path / "notes.jsonl"
    servers = [
        stdio_test_server(log, trust_annotations=True, sampling="approve"),
        task_test_server(tmp_path / "tasks.jsonl", "tasks"),
    ]
    async with _inbox_on(dev_env, task_queue, tmp_path, servers, log) as inbox:
        yield inbox


async def test_a_form_in_two_rounds_answered_declined_and_cancelled(inbox: McpInbox) -> None:
    page = inbox.page
    wf = await _start(inbox, "p", "notes__paint", {"thing": "boat"})
    name = page.get_by_label("Name (required)")
    await _shown(inbox, wf, name)
    item = page.locator('li.item[data-call-id="p"]')
    await expect(item.locator(".summary")).to_contain_text("What is your name?")
    # The page generated the field from the requested schema; refuse and dismiss are offered.
    await expect(item.get_by_role("button", name="Decline", exact=True)).to_be_visible()
    await expect(item.get_by_role("button", name="Cancel", exact=True)).to_be_visible()
    await shot(page, "mcp-form")
    await accessible(page)
    await name.fill("Eve")
    await item.get_by_role("button", name="Send answer").click()
    await expect(page.get_by_role("status")).to_have_text("Answered call p.")

    await _shown(inbox, wf, page.get_by_text("Which color, Eve?"))
    await expect(page.get_by_label("Color (required)")).to_be_visible()
    await expect(page.get_by_label("Coats")).to_be_visible()
    await page.get_by_role("button", name="Decline", exact=True).click()
    await expect(page.get_by_role("status")).to_have_text("Declined call p.")
    declined = await inbox.harness.wait_outputs(wf, "p")

    other = await _start(inbox, "p", "notes__paint", {"thing": "gate"})
    await _shown(inbox, other, page.get_by_label("Name (required)"))
    await page.get_by_role("button", name="Cancel", exact=True).click()
    await expect(page.get_by_role("status")).to_have_text("Cancelled call p.")
    await _answer(inbox, other, "p", "Which color, stranger?", ("Color (required)", "red"))
    cancelled = await inbox.harness.wait_outputs(other, "p")

    painted = [json.loads(json.loads(o["p"].content)["result"]) for o in (declined, cancelled)]
    assert [(p["name"], p["color"]) for p in painted] == [
        ({"name": "Eve"}, "decline"),
        ("cancel", {"color": "red", "coats": 1}),
    ]
    # The server's tool body ran once per call and saw the person's choices as such.
    assert [(c["name"], c["color"]) for c in server_log(inbox.log, "call")] == [
        ({"name": "Eve"}, "decline"),
        ("cancel", {"color": "red", "coats": 1}),
    ]


async def test_a_link_shows_its_host_and_is_done_or_declined(inbox: McpInbox) -> None:
    page = inbox.page
    done_there = page.get_by_role("button", name="I am done there")
    outcomes: list[str] = []
    for button in ("I am done there", "Decline"):
        wf = await _start(inbox, "u", "notes__connect", {"url": LINK})
        await _shown(inbox, wf, done_there)
        await expect(page.get_by_test_id("link-host")).to_have_text("auth.example.com")
        link = page.get_by_role("link", name=f"{LINK}?token=one-time-7f3a")
        await expect(link).to_have_attribute("href", f"{LINK}?token=one-time-7f3a")
        await expect(link).to_have_attribute("rel", "noopener noreferrer")
        await expect(link).to_have_attribute("target", "_blank")
        if not outcomes:
            await shot(page, "mcp-link")
            await accessible(page)
        assert len(server_log(inbox.log, "call")) == len(outcomes)  # nothing sent yet
        await page.get_by_role("button", name=button, exact=True).click()
        verb = "Answered" if button == "I am done there" else "Declined"
        await expect(page.get_by_role("status")).to_have_text(f"{verb} call u.")
        outputs = await inbox.harness.wait_outputs(wf, "u")
        outcomes.append(json.loads(outputs["u"].content)["result"])
    assert outcomes == ["connect: accept", "connect: decline"]
    assert [c["action"] for c in server_log(inbox.log, "call")] == ["accept", "decline"]


async def test_a_sampling_request_is_approved_in_the_page(inbox: McpInbox) -> None:
    page = inbox.page
    wf = await _start(inbox, "s", "notes__poem", {"topic": "the sea"})
    approve = page.get_by_role("button", name="Approve")
    await _shown(inbox, wf, approve)
    item = page.locator('li.item[data-call-id="s"]')
    await expect(item.locator(".asks")).to_contain_text("A haiku about the sea.")
    assert server_log(inbox.log, "call") == []
    await approve.click()
    await expect(page.get_by_role("status")).to_have_text("Approved call s.")
    outputs = await inbox.harness.wait_outputs(wf, "s")
    result = json.loads(json.loads(outputs["s"].content)["result"])
    assert result == {"topic": "the sea", "poem": HAIKU, "model": "poet"}
    assert [c["text"] for c in server_log(inbox.log, "call")] == [HAIKU]


async def test_a_sampling_request_is_denied_in_the_page_with_a_reason(inbox: McpInbox) -> None:
    """Deny with a reason: the call ends `denied` with it, the model is never asked to
    sample and the server's tool body never runs."""
    page = inbox.page
    wf = await _start(inbox, "d", "notes__poem", {"topic": "the rain"})
    deny = page.get_by_role("button", name="Deny")
    await _shown(inbox, wf, deny)
    item = page.locator('li.item[data-call-id="d"]')
    await expect(item.locator(".asks")).to_contain_text("A haiku about the rain.")
    await item.get_by_label("Reason (the model reads it when you deny)").fill("no poems today")
    await item.get_by_role("button", name="Deny").click()
    await expect(page.get_by_role("status")).to_have_text("Denied call d.")
    outputs = await inbox.harness.wait_outputs(wf, "d")
    assert outputs["d"].failure_kind == "denied"
    assert "no poems today" in outputs["d"].content
    assert server_log(inbox.log, "call") == []


async def test_a_tasks_question_is_answered_in_the_page_while_it_runs(inbox: McpInbox) -> None:
    wf = await _start(inbox, "t", "tasks__survey", {"topic": "tides", "seconds": SURVEY_SECONDS})
    asks = "Who is the survey for?"  # halfway through the task
    await _answer(inbox, wf, "t", asks, ("Name (required)", "Ada"), timeout=SURVEY_SECONDS)
    outputs = await inbox.harness.wait_outputs(wf, "t", timeout=SURVEY_SECONDS + WAIT_SECONDS)
    assert "survey of tides for Ada (accept)" in outputs["t"].content
    log = inbox.log.with_name("tasks.jsonl")
    (call,) = server_log(log, "call")
    assert [u["keys"] for u in server_log(log, "task_update")] == [[f"who-{call['task_id']}"]]


async def test_an_oauth_servers_form_is_answered_in_the_page(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    with oauth_servers(tmp_path, "--ask") as servers:
        config = servers.config(tmp_path, needs_approval=False)

        def browse(url: str) -> None:  # the person consents in a browser of their own
            threading.Thread(target=consent, args=(url,), daemon=True).start()

        await login(config, show_url=browse)
        async with _inbox_on(dev_env, task_queue, tmp_path, [config], servers.log) as inbox:
            wf = await _start(inbox, "o", "notes__open_notes", {})
            asks = "Whose notes should I open?"
            await _answer(inbox, wf, "o", asks, ("Name (required)", "Ada"))
            outputs = await inbox.harness.wait_outputs(wf, "o")
        calls = servers.events("call")
    assert "the notes of Ada" in outputs["o"].content, outputs["o"]
    assert [c.get("owner") for c in calls] == ["Ada"]
