"""The inbox in a real Chromium (Debian's `chromium`, driven by Playwright; nothing downloads a
browser): a person approves the demo's `write_file`, answers its question through the form
generated from the answer schema, denies with a reason, and meets a stale page's conflict.

The screenshots of docs/inbox.md are taken here: with `DT_UPDATE_SCREENSHOTS=1`
they are written to docs/images/inbox-*.png (commit them), otherwise to a
temporary directory, so `make test` leaves the checkout clean.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from inbox_support import turns
from playwright.async_api import Browser, Page, async_playwright, expect
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, running

from durable_tools.conversation import AgentConfig, ConversationOptions, ModelRequest, ModelRetry
from durable_tools.models.errors import ProviderContext, status_error
from durable_tools.models.scripted import ScriptedFileModel
from durable_tools.transcript import AssistantMessage
from durable_tools.worker.dev_server import free_port
from durable_tools.worker.inbox import Authenticators, DevAuth, serve_inbox
from examples.demo import AGENT, MODEL, REPORTER, SCRIPT, TIME_SERVER, make_kit

# This worker declares no agents (development mode): the demo's agent, spelled out.
DEMO_AGENT = AGENT.model_copy(
    update={
        "model": REPORTER.model,
        "toolkit": REPORTER.toolkit,
        "instructions": REPORTER.instructions,
    }
)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
IMAGES = (
    Path(__file__).resolve().parents[2] / "docs" / "images"
    if os.environ.get("DT_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "durable-tools-inbox-screenshots"
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is missing (`make test` installs it)"
)


class BrokenModel:
    """Fails with a non-retryable provider error while `broken`; then answers."""

    def __init__(self) -> None:
        self.broken = True

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        if self.broken:
            raise status_error(
                ProviderContext(
                    provider="OpenAI",
                    api="Chat Completions",
                    model="gpt-test",
                    base_url="http://127.0.0.1:9/v1",
                    key_env="OPENAI_API_KEY",
                ),
                status=400,
                headers={},
                body={"error": {"message": "bad request", "code": None}},
                fallback_message="bad request",
            )
        return AssistantMessage(text="fixed and answered")


BROKEN = BrokenModel()


@dataclass
class Inbox:
    url: str
    harness: Harness
    page: Page
    workspace: Path


UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea, button, a[href]')]
  .filter((el) => el.type !== 'hidden' && !el.hidden && el.offsetParent !== null)
  .filter((el) => !((el.labels && el.labels.length) || el.getAttribute('aria-label')
                    || (['BUTTON', 'A'].includes(el.tagName) && el.textContent.trim())))
  .map((el) => el.outerHTML)"""


async def _accessible(page: Page) -> None:
    """Every visible control has a label (or text); the skip link comes first and shows on focus."""
    assert await page.evaluate(UNLABELLED) == []
    first = "document.querySelector('a[href], button, input, select, textarea').textContent"
    assert await page.evaluate(first) == "Skip to content"
    skip = page.get_by_role("link", name="Skip to content")
    await skip.focus()
    box = await skip.bounding_box()
    assert box is not None and box["x"] >= 0


async def _shot(page: Page, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(IMAGES / f"inbox-{name}.png"), full_page=True)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def inbox(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    browser: Browser,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Inbox]:
    """The demo's worker (its toolkit, scripted model and MCP time server), the inbox served
    on a free port in dev mode as `ana`, and a browser page. Pages poll for changes every
    `request.param` seconds (default 0: never, so no reload races a click)."""
    workspace = tmp_path / "workspace"
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger.jsonl",
        toolkits={"demo": make_kit(workspace)},
        models={MODEL: ScriptedFileModel(SCRIPT), "broken": BROKEN},
        mcp_servers=[TIME_SERVER],
    ) as harness:
        port = free_port()
        stop = asyncio.Event()
        ready: list[str] = []
        serving = asyncio.create_task(
            serve_inbox(
                harness.conversations,
                Authenticators([DevAuth("ana")]),
                port=port,
                stop=stop,
                on_ready=ready.append,
                refresh_seconds=getattr(request, "param", 0),
            )
        )
        try:
            async with asyncio.timeout(10):
                while not ready:
                    assert not serving.done(), serving
                    await asyncio.sleep(0.05)
            context = await browser.new_context(viewport={"width": 1100, "height": 900})
            page = await context.new_page()
            page.set_default_timeout(20_000)
            yield Inbox(ready[0], harness, page, workspace)
            await context.close()
        finally:
            stop.set()
            await asyncio.wait_for(serving, 10)


async def test_approve_the_demo_write_then_answer_its_question(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    wf = "demo-inbox"
    harness.started.append(wf)
    harness.handles[wf] = await harness.conversations.start(
        wf, agent=DEMO_AGENT, message="Status report"
    )
    await harness.wait_approval(wf, "write")

    await page.goto(inbox.url)
    entry = page.locator(f'li.conversation[data-workflow-id="{wf}"]')
    for _ in range(40):  # visibility lists it a moment after the upsert
        if await entry.count():
            break
        await asyncio.sleep(0.25)
        await page.reload()
    item = entry.locator('li.item[data-call-id="write"]')
    await expect(item.locator("code.tool")).to_have_text("write_file")
    await expect(item.locator(".summary")).to_contain_text("write_file(path='reports/status.md'")
    await expect(item.locator("dl.arguments")).to_contain_text("# Status")
    await expect(item.locator(".countdown")).to_contain_text("d ")
    await expect(entry.locator(".meta")).to_contain_text("agent reporter")
    await expect(page.get_by_test_id("identity")).to_have_text("ana")
    await _shot(page, "list")
    await _accessible(page)

    await item.get_by_role("link", name="Open to decide").click()
    await expect(page.get_by_role("heading", name="Transcript")).to_be_visible()
    await expect(page.locator("ol.transcript")).to_contain_text("check_service")
    await _shot(page, "approval")
    await _accessible(page)
    await page.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_have_text("Approved call write.")

    question = await harness.wait_interaction(wf, "ask")
    assert question.tool == "ask_user"
    await page.goto(page.url.split("?")[0])
    form = page.locator("form.answer")
    field = form.get_by_label("recipient (required)")
    await expect(field).to_be_visible()
    await _accessible(page)
    await form.get_by_role("button", name="Send answer").click()  # empty: refused in the page
    await expect(form.locator(".errors")).to_contain_text("recipient is required")
    await expect(field).to_be_focused()
    await _shot(page, "answer-refused")
    assert [i.call_id for i in (await harness.conversations.pending(wf)).interactions] == ["ask"]

    await field.fill("ops@example.com")
    await form.get_by_role("button", name="Send answer").click()
    await expect(page.get_by_role("status")).to_have_text("Answered call ask.")
    result = await harness.result(wf, timeout=30)
    assert result.status == "finished"
    assert (inbox.workspace / "reports" / "status.md").read_text().startswith("# Status")
    items = await harness.conversations.history(wf)
    answer = next(i for i in items if getattr(i, "call_id", "") == "ask" and i.role == "tool")
    assert json.loads(answer.content) == {"recipient": "ops@example.com"}  # type: ignore[union-attr]


async def test_a_denial_with_a_reason_reaches_the_model(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    wf = await harness.start(turns(("r1", "refund", {"order": "A-1001", "amount": 1290})))
    await harness.wait_approval(wf, "r1")
    await page.goto(f"{inbox.url}conversations/{wf}")
    await page.get_by_label("Reason (the model reads it when you deny)").fill("over the limit")
    await page.get_by_role("button", name="Deny").click()
    await expect(page.get_by_role("status")).to_have_text("Denied call r1.")
    outputs = await harness.wait_outputs(wf, "r1")
    assert outputs["r1"].failure_kind == "denied"
    assert "denied by ana: over the limit" in outputs["r1"].content
    assert harness.ledger_rows("refund") == []
    await page.reload()
    tool_output = page.locator('li.msg.tool[data-call-id="r1"]')
    await expect(tool_output).to_contain_text("failed: denied")
    await expect(tool_output).to_contain_text("over the limit")
    await _shot(page, "denied")


async def test_a_stale_page_shows_the_conflict(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    wf = await harness.start(turns(("r1", "refund", {"order": "A-7", "amount": 3})))
    approval = await harness.wait_approval(wf, "r1")
    await page.goto(f"{inbox.url}conversations/{wf}")
    await expect(page.get_by_role("button", name="Approve")).to_be_visible()
    # Someone else decides while this page is open.
    await harness.conversations.deny(
        wf, "r1", arguments_hash=approval.arguments_hash, decided_by="bob", reason="no", wait=True
    )
    await harness.wait_outputs(wf, "r1")
    await page.get_by_role("button", name="Approve").click()
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text("Someone already decided on call r1")
    await expect(alert).to_contain_text("denied by bob: no")
    await expect(page.locator("[data-conflict]")).to_have_attribute(
        "data-conflict", "already_decided"
    )
    assert "Traceback" not in await page.content()
    await _shot(page, "conflict")
    assert harness.ledger_rows("refund") == []


@pytest.mark.parametrize("inbox", [0.5], indirect=True)
async def test_an_open_page_follows_a_decision_made_elsewhere(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    wf = await harness.start(turns(("r1", "refund", {"order": "A-8", "amount": 4})))
    approval = await harness.wait_approval(wf, "r1")
    await page.goto(f"{inbox.url}conversations/{wf}")
    await expect(page.get_by_role("button", name="Approve")).to_be_visible()
    await harness.conversations.approve(
        wf, "r1", arguments_hash=approval.arguments_hash, decided_by="bob", wait=True
    )
    # No click: the page polls its version and reloads once the call has run.
    await expect(page.locator('li.msg.tool[data-call-id="r1"]')).to_contain_text(
        "refunded 4 on A-8"
    )
    await expect(page.get_by_role("button", name="Approve")).to_have_count(0)


async def test_a_failed_model_turn_is_listed_and_retried(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    BROKEN.broken = True
    wf = await harness.start(
        "hello",
        agent=AgentConfig(name="fragile", model="broken", toolkit="tests"),
        options=ConversationOptions(model_retry=ModelRetry(max_attempts=1)),
    )
    await harness.wait_state(wf, "model_failed")
    await page.goto(f"{inbox.url}?kind=model_failed&agent=fragile")
    item = page.locator(f'li.conversation[data-workflow-id="{wf}"] li.item')
    for _ in range(40):  # visibility lists it a moment after the upsert
        if await item.count():
            break
        await asyncio.sleep(0.25)
        await page.reload()
    await expect(item.locator(".summary")).to_contain_text("model turn 1 failed")
    await expect(item.locator(".summary")).to_contain_text("HTTP 400")
    await item.get_by_role("link", name="Open to decide").click()
    BROKEN.broken = False
    await page.get_by_role("button", name="Retry the model turn").click()
    await expect(page.get_by_role("status")).to_have_text("Retrying the model turn.")
    await harness.wait_assistant_text(wf, "fixed and answered")
