"""The inbox in a real Chromium (Debian's `chromium`, driven by Playwright; nothing downloads a
browser): a person approves the demo's `write_file`, answers its question through the form
generated from the answer schema, denies with a reason, meets a stale page's conflicts
(already decided, arguments changed), cannot approve outside the tool's approvers, and sees
the transcript and the list change live (server-sent events) without reloading.

The screenshots of docs/inbox.md are taken here: with `DT_UPDATE_SCREENSHOTS=1`
they are written to docs/images/inbox-*.png (commit them), otherwise to a
temporary directory, so `make test` leaves the checkout clean.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from browser_support import accessible, chromium, needs_chromium, shot
from inbox_support import (
    DECISION_KEY,
    FORMS,
    FORMS_AGENT,
    IBAN_PATTERN,
    PAYMENTS,
    PAYMENTS_AGENT,
    SHIFTY,
    SHIFTY_AGENT,
    reset_to_first_task,
    turns,
)
from playwright.async_api import Browser, Page, Route, expect
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import AgentConfig, ConversationOptions, ModelRetry
from durable_tools.models.base import ModelRequest
from durable_tools.models.errors import ProviderContext, status_error
from durable_tools.models.scripted import ScriptedFileModel
from durable_tools.transcript import AssistantMessage
from durable_tools.worker.dev_server import free_port
from durable_tools.worker.inbox import Authenticators, DevAuth, ProxyHeaderAuth, serve_inbox
from examples.demo import AGENT, MODEL, REPORTER, SCRIPT, TIME_SERVER, make_kit

# This worker declares no agents (development mode): the demo's agent, spelled out.
DEMO_AGENT = AGENT.model_copy(
    update={
        "model": REPORTER.model,
        "toolkit": REPORTER.toolkit,
        "instructions": REPORTER.instructions,
    }
)

pytestmark = needs_chromium


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
    browser: Browser


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


@pytest.fixture
async def inbox(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    browser: Browser,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Inbox]:
    """The demo's worker (its toolkit, scripted model and MCP time server; `payments` too,
    and decision keys), the inbox served on a free port as `ana` (dev mode; a trusted proxy's
    `X-Forwarded-User` first) signing with the worker's key, and a browser page. Live updates
    are on when `request.param` (seconds between the list's visibility checks) is given;
    default off, so no redraw races a click."""
    workspace = tmp_path / "workspace"
    key_id, key = DECISION_KEY
    monkeypatch.setenv("DURABLE_TOOLS_DECISION_KEYS", f"{key_id}:{base64.b64encode(key).decode()}")
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger.jsonl",
        toolkits={"demo": make_kit(workspace), "payments": PAYMENTS, "forms": FORMS},
        models={MODEL: ScriptedFileModel(SCRIPT), "broken": BROKEN, "shifty": SHIFTY},
        mcp_servers=[TIME_SERVER],
    ) as harness:
        port = free_port()
        stop = asyncio.Event()
        ready: list[str] = []
        serving = asyncio.create_task(
            serve_inbox(
                harness.conversations,
                Authenticators([ProxyHeaderAuth(), DevAuth("ana")]),
                port=port,
                stop=stop,
                on_ready=ready.append,
                refresh_seconds=getattr(request, "param", 0),
                decision_key=DECISION_KEY,
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
            yield Inbox(ready[0], harness, page, workspace, browser)
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
    await shot(page, "list")
    await accessible(page)

    await item.get_by_role("link", name="Open to decide").click()
    await expect(page.get_by_role("heading", name="Transcript")).to_be_visible()
    await expect(page.locator("ol.transcript")).to_contain_text("check_service")
    await shot(page, "approval")
    await accessible(page)
    await page.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_have_text("Approved call write.")

    question = await harness.wait_interaction(wf, "ask")
    assert question.tool == "ask_user"
    await page.goto(page.url.split("?")[0])
    form = page.locator("form.answer")
    field = form.get_by_label("recipient (required)")
    await expect(field).to_be_visible()
    await accessible(page)
    await form.get_by_role("button", name="Send answer").click()  # empty: refused in the page
    await expect(form.locator(".errors")).to_contain_text("recipient is required")
    await expect(field).to_be_focused()
    await shot(page, "answer-refused")
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


async def test_the_answer_form_follows_the_schema_and_shows_descriptions(inbox: Inbox) -> None:
    """The generated fields come in the schema's order (not alphabetical), labelled by their
    titles and described by their descriptions; a pattern checks the value but is never shown
    as text: a value that breaks it is refused with the field's description."""
    harness, page = inbox.harness, inbox.page
    wf = await harness.start(
        turns(("q1", "open_account", {"question": "Where do we pay?"})), agent=FORMS_AGENT
    )
    await harness.wait_interaction(wf, "q1")
    await page.goto(f"{inbox.url}conversations/{wf}")
    form = page.locator("form.answer")
    labels = form.locator(".gen-field label")
    await expect(labels).to_have_text(
        ["IBAN (required)", "Account holder (required)", "currency", "bic"]
    )
    iban = form.get_by_label("IBAN (required)")
    await expect(iban).to_have_accessible_description(
        "The account's IBAN, capitals and digits without spaces."
    )
    await expect(form.get_by_label("Account holder (required)")).to_have_accessible_description(
        "The name on the account."
    )
    await expect(form.get_by_label("bic")).to_have_accessible_description(
        "The bank's BIC, if you know it."
    )
    # An interaction tool's question is answered, never declined (that is an MCP server's).
    await expect(page.get_by_role("button", name="Decline")).to_have_count(0)
    await accessible(page)

    await iban.fill("not an iban")
    await form.get_by_label("Account holder (required)").fill("Ana Example")
    await form.get_by_role("button", name="Send answer").click()
    errors = form.locator(".errors")
    await expect(errors).to_have_text(
        "IBAN is not in the expected form: The account's IBAN, capitals and digits without spaces."
    )
    await expect(iban).to_be_focused()
    assert IBAN_PATTERN not in await page.locator("main").inner_text()
    await expect(iban).to_have_attribute("pattern", IBAN_PATTERN)  # the browser's check
    assert [i.call_id for i in (await harness.conversations.pending(wf)).interactions] == ["q1"]

    await iban.fill("DE89370400440532013000")
    await form.get_by_label("currency").select_option("EUR")
    await form.get_by_role("button", name="Send answer").click()
    await expect(page.get_by_role("status")).to_have_text("Answered call q1.")
    outputs = await harness.wait_outputs(wf, "q1")
    assert json.loads(outputs["q1"].content) == {
        "iban": "DE89370400440532013000",
        "holder": "Ana Example",
        "currency": "EUR",
    }


async def test_a_denial_with_a_reason_reaches_the_model(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    wf = await harness.start(turns(("r1", "refund", {"order": "A-1001", "amount": 1290})))
    await harness.wait_approval(wf, "r1")
    await page.goto(f"{inbox.url}conversations/{wf}")
    # With the keyboard only: Tab to the reason, type it, Tab past Approve to Deny, Enter.
    reason = page.get_by_label("Reason (the model reads it when you deny)")
    for _ in range(60):
        if await reason.evaluate("(el) => el === document.activeElement"):
            break
        await page.keyboard.press("Tab")
    await expect(reason).to_be_focused()
    await page.keyboard.type("over the limit")
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("button", name="Approve")).to_be_focused()
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("button", name="Deny")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("status")).to_have_text("Denied call r1.")
    outputs = await harness.wait_outputs(wf, "r1")
    assert outputs["r1"].failure_kind == "denied"
    assert "denied by ana: over the limit" in outputs["r1"].content
    assert harness.ledger_rows("refund") == []
    await page.reload()
    tool_output = page.locator('li.msg.tool[data-call-id="r1"]')
    await expect(tool_output).to_contain_text("failed: denied")
    await expect(tool_output).to_contain_text("over the limit")
    await shot(page, "denied")


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
    await shot(page, "conflict")
    assert harness.ledger_rows("refund") == []


async def test_a_stale_page_whose_arguments_changed_shows_the_conflict(inbox: Inbox) -> None:
    """Call ids never repeat within a run (a re-issued id is renamed `r1~2`), but an operator's
    reset runs the conversation again from its start: the model, asked again, issues call
    `r1` with other arguments, and a page opened before the reset shows the old ones."""
    harness, page = inbox.harness, inbox.page
    wf = await harness.start("refund it", agent=SHIFTY_AGENT)
    shown = await harness.wait_approval(wf, "r1")
    await page.goto(f"{inbox.url}conversations/{wf}")
    await expect(page.locator("li.item dl.arguments")).to_contain_text("100")
    await reset_to_first_task(harness.client, wf)

    async def reissued() -> str | None:
        pending = await harness.conversations.pending(wf)
        changed = [a for a in pending.approvals if a.arguments_hash != shown.arguments_hash]
        return changed[0].arguments_hash if changed else None

    current = await eventually(reissued, what="call r1 re-issued with other arguments")
    await page.get_by_role("button", name="Approve").click()  # the page still shows 100
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text(
        "The arguments of call r1 are not the ones this page showed"
    )
    await expect(page.locator("[data-conflict]")).to_have_attribute(
        "data-conflict", "arguments_changed"
    )
    # The page under the message shows the call as it is now, to decide on again.
    await expect(page.locator("li.item dl.arguments")).to_contain_text("900")
    assert "Traceback" not in await page.content()
    await shot(page, "arguments-changed")
    pending = await harness.conversations.pending(wf)
    assert [(a.call_id, a.arguments_hash) for a in pending.approvals] == [("r1", current)]
    assert harness.ledger_rows("refund") == []


async def test_someone_outside_the_approvers_cannot_approve(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    wf = await harness.start(
        turns(("p1", "pay", {"to": "acme", "cents": 9900})), agent=PAYMENTS_AGENT
    )
    await harness.wait_approval(wf, "p1")
    bo = {"X-Forwarded-User": "bo", "X-Forwarded-Groups": "support"}
    await page.set_extra_http_headers(bo)
    await page.goto(f"{inbox.url}conversations/{wf}")
    await expect(page.get_by_test_id("identity")).to_have_text("bo")
    refused = page.locator('[data-refused="p1"]')
    await expect(refused).to_have_text(
        "Only group:approvers may decide on this call; you are signed in as bo (groups: support)."
    )
    await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    await shot(page, "not-allowed")
    await accessible(page)
    # Posting the decision anyway (the page's own CSRF token) is refused on the server.
    token = await page.locator('form.send input[name="csrf_token"]').input_value()
    digest = (await harness.conversations.pending(wf)).approvals[0].arguments_hash
    response = await page.request.post(
        f"{inbox.url}conversations/{wf}/decide",
        form={
            "csrf_token": token,
            "call_id": "p1",
            "arguments_hash": digest,
            "decision": "approve",
        },
        headers=bo,
    )
    assert response.status == 403
    assert "Only group:approvers may decide" in await response.text()
    pending = await harness.conversations.pending(wf)
    assert [a.call_id for a in pending.approvals] == ["p1"]
    assert pending.rejected == []  # no decision reached the workflow
    assert harness.ledger_rows("pay") == []

    # A member of the group approves from the same inbox; the decision is signed.
    await page.set_extra_http_headers({"X-Forwarded-User": "cy", "X-Forwarded-Groups": "approvers"})
    await page.goto(f"{inbox.url}conversations/{wf}")
    await page.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_have_text("Approved call p1.")
    outputs = await harness.wait_outputs(wf, "p1")
    assert outputs["p1"].content == "paid 9900 to acme"


@pytest.mark.parametrize("inbox", [0.5], indirect=True)
async def test_the_transcript_changes_live_without_a_reload(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    wf = await harness.start(turns(("r1", "refund", {"order": "A-8", "amount": 4})))
    approval = await harness.wait_approval(wf, "r1")
    await page.goto(f"{inbox.url}conversations/{wf}")
    await expect(page.get_by_role("button", name="Approve")).to_be_visible()
    await page.evaluate("window.sameDocument = true")
    await harness.conversations.approve(
        wf, "r1", arguments_hash=approval.arguments_hash, decided_by="bob", wait=True
    )
    # No click, no reload: the event stream redraws the transcript and what it waits for.
    await expect(page.locator('li.msg.tool[data-call-id="r1"]')).to_contain_text(
        "refunded 4 on A-8"
    )
    await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    await harness.conversations.send(wf, "anything new?")
    await expect(page.locator("ol.transcript")).to_contain_text("echo: anything new?")
    await expect(page.get_by_test_id("live")).to_contain_text("Live: ")
    assert await page.evaluate("window.sameDocument") is True
    await shot(page, "live")


@pytest.mark.parametrize("inbox", [0.5], indirect=True)
async def test_the_page_ignores_event_kinds_it_does_not_know(inbox: Inbox) -> None:
    """Kinds the page does not show (model text deltas, kinds added later) and malformed
    data neither break the page nor redraw it; a known kind after them does."""
    harness, page = inbox.harness, inbox.page
    wf = await harness.start(turns(("r1", "refund", {"order": "A-14", "amount": 6})))
    await harness.wait_approval(wf, "r1")
    streams: list[str] = []
    redraws: list[str] = []
    known = {"on": False}

    async def fake_stream(route: Route) -> None:
        streams.append(route.request.url)
        at = '"at": "2026-01-01T00:00:00Z"'
        if known["on"]:
            data = f'{{"kind": "approval_decided", "call_id": "r1", "outcome": "approved", {at}}}'
            body = f"retry: 600000\n\nid: 8\ndata: {data}\n\n"
        else:
            body = (
                f'retry: 100\n\nid: 6\ndata: {{"kind": "model_text_delta", {at}}}\n\n'
                f'id: 7\ndata: {{"kind": "text_delta", "text": "he", {at}}}\n\n'
                "id: 7\ndata: not json\n\n"
            )
        await route.fulfill(status=200, content_type="text/event-stream", body=body)

    await page.route("**/api/conversations/*/events*", fake_stream)
    page.on(
        "request",
        lambda r: redraws.append(r.url) if r.url.endswith(f"/conversations/{wf}") else None,
    )
    await page.goto(f"{inbox.url}conversations/{wf}")
    for _ in range(100):
        if len(streams) >= 3:
            break
        await asyncio.sleep(0.05)
    assert len(streams) >= 3, streams  # read to the end twice, reconnected
    await expect(page.get_by_test_id("live")).to_have_text("")
    assert len(redraws) == 1  # the page's own load: unknown kinds caused no redraw
    await expect(page.get_by_role("button", name="Approve")).to_be_visible()
    known["on"] = True
    await expect(page.get_by_test_id("live")).to_have_text(
        "Live: approval decided (call r1): approved", timeout=10_000
    )
    for _ in range(100):
        if len(redraws) > 1:
            break
        await asyncio.sleep(0.05)
    assert len(redraws) > 1  # the known kind redrew the page


@pytest.mark.parametrize("inbox", [0.5], indirect=True)
async def test_the_list_shows_a_new_waiting_conversation_by_itself(inbox: Inbox) -> None:
    harness, page = inbox.harness, inbox.page
    await page.goto(f"{inbox.url}?kind=approval")
    wf = await harness.start(turns(("r1", "refund", {"order": "A-13", "amount": 5})))
    await harness.wait_approval(wf, "r1")
    # No reload from the test: the list's stream sees it in visibility and the page reloads.
    entry = page.locator(f'li.conversation[data-workflow-id="{wf}"]')
    await expect(entry.locator("code.tool")).to_have_text("refund")
    await expect(page.get_by_label("Kind")).to_have_value("approval")  # filters kept


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
    # The page tells the retry's outcome as it finds it: still running, or through.
    await expect(page.get_by_role("status")).to_have_text(
        re.compile(r"Retrying the model turn\.|Retried the model turn: it succeeded\.")
    )
    await harness.wait_assistant_text(wf, "fixed and answered")
    await page.reload()
    await expect(page.get_by_role("status")).to_have_text("Retried the model turn: it succeeded.")


@pytest.mark.parametrize("inbox", [0.5], indirect=True)
async def test_a_retry_that_fails_again_says_so(inbox: Inbox) -> None:
    """After Retry, the page tells the new outcome: the turn failed again (a newer failure
    than the one retried), not a green "Retrying" above the same failure."""
    harness, page = inbox.harness, inbox.page
    BROKEN.broken = True
    wf = await harness.start(
        "hello",
        agent=AgentConfig(name="fragile", model="broken", toolkit="tests"),
        options=ConversationOptions(model_retry=ModelRetry(max_attempts=1)),
    )
    await harness.wait_state(wf, "model_failed")
    first = (await harness.conversations.status(wf)).model_failed
    assert first is not None
    await page.goto(f"{inbox.url}conversations/{wf}")
    await page.get_by_role("button", name="Retry the model turn").click()
    # The retried turn fails a moment later; the page follows the event stream and says so.
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text("The retry failed again: model turn 1 failed: ")
    await expect(alert).to_contain_text("HTTP 400")
    await expect(page.locator("p.notice")).to_have_count(0)
    again = (await harness.conversations.status(wf)).model_failed
    assert again is not None and again.failed_at > first.failed_at
    await expect(page.get_by_role("button", name="Retry the model turn")).to_be_visible()
    # A reload keeps the outcome (the retried failure is in the page's address).
    await page.reload()
    await expect(page.get_by_role("alert")).to_contain_text("The retry failed again")


@pytest.mark.parametrize("inbox", [0.5], indirect=True)
async def test_an_ended_conversation_stops_offering_a_message(inbox: Inbox) -> None:
    """A page open while its conversation is terminated drops its message and policy forms."""
    harness, page = inbox.harness, inbox.page
    wf = await harness.start("hello")
    await harness.wait_assistant_text(wf, "echo: hello")
    await page.goto(f"{inbox.url}conversations/{wf}")
    await expect(page.get_by_role("heading", name="Send a message")).to_be_visible()
    policy = page.get_by_role("heading", name="Install an approval policy")
    await expect(policy).to_be_visible()
    await harness.client.get_workflow_handle(wf).terminate("test")
    await expect(page.get_by_test_id("ended")).to_have_text(
        "This conversation has ended (terminated); it takes no more messages."
    )
    await expect(page.locator("form.send")).to_have_count(0)
    await expect(policy).to_have_count(0)  # nor a policy
    await expect(page.locator("#meta")).to_contain_text("ended (terminated)")
    await accessible(page)
