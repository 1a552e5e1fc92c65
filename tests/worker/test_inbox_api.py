"""The inbox's HTTP JSON API against a real dev server and worker.

Every endpoint: 401 without credentials, 403 without (or with another
person's) CSRF token, and its conflicts as JSON (`{"error", "message"}`)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from agent_support import AGENT
from inbox_support import basic, bearer, csrf_token, inbox_client, listed, turns
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import ConversationOptions
from durable_tools.errors import ConfigurationError
from durable_tools.worker.inbox import Identity, build_auth, service
from durable_tools.worker.inbox.auth import CSRF_FIELD

ANA = basic("ana", "ana-secret")
BOB = basic("bob", "bob-secret")

ENDPOINTS = [
    ("GET", "/api/session", None),
    ("GET", "/api/pending", None),
    ("GET", "/api/pending/events", None),
    ("GET", "/api/conversations/c1", None),
    ("GET", "/api/conversations/c1/version", None),
    ("GET", "/api/conversations/c1/events", None),
    ("POST", "/api/conversations/c1/calls/r1/decision", {"approved": True, "arguments_hash": "x"}),
    ("POST", "/api/conversations/c1/calls/r1/answer", {"value": "yes", "arguments_hash": "x"}),
    ("POST", "/api/conversations/c1/messages", {"text": "hi"}),
    ("POST", "/api/conversations/c1/resume", {"message": "go on"}),
    ("POST", "/api/conversations/c1/retry", None),
]

STATE_CHANGING = [e for e in ENDPOINTS if e[0] == "POST"]


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
async def test_every_endpoint_answers_401_without_credentials(
    harness: Harness, method: str, path: str, body: object
) -> None:
    async with inbox_client(harness) as client:
        for headers in ({}, basic("ana", "wrong"), bearer("nope"), {"Authorization": "Basic !!"}):
            response = await client.request(method, path, json=body, headers=headers)
            assert response.status_code == 401, (headers, response.text)
            assert response.json()["error"] == "unauthenticated"
            assert response.headers["www-authenticate"].startswith("Basic ")


@pytest.mark.parametrize(("method", "path", "body"), STATE_CHANGING)
async def test_state_changing_endpoints_need_the_csrf_token_of_the_same_person(
    harness: Harness, method: str, path: str, body: object
) -> None:
    async with inbox_client(harness) as client:
        response = await client.request(method, path, json=body, headers=ANA)
        assert response.status_code == 403 and response.json()["error"] == "csrf"
        bobs = await csrf_token(client, BOB)
        response = await client.request(
            method, path, json=body, headers={**ANA, "X-CSRF-Token": bobs}
        )
        assert response.status_code == 403 and response.json()["error"] == "csrf"
        # A bearer token is never sent by a browser on its own: no CSRF token needed;
        # the request reaches the conversation (which does not exist).
        response = await client.request(method, path, json=body, headers=bearer("ana-secret"))
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "not_found"


async def test_a_form_with_a_csrf_token_of_any_characters_is_refused_never_a_500(
    harness: Harness,
) -> None:
    """hmac.compare_digest raises TypeError on str with non-ASCII characters (found by
    tests/worker/test_inbox_hostile.py)."""
    async with inbox_client(harness) as client:
        await csrf_token(client, ANA)  # the cookie's nonce is set
        for token in ("é", "x.\u2603", "\x00"):
            response = await client.post(
                "/conversations/c1/send", data={CSRF_FIELD: token, "text": "hi"}, headers=ANA
            )
            assert response.status_code == 403, (token, response.text)


async def test_session_names_the_identity_from_the_credentials(harness: Harness) -> None:
    async with inbox_client(harness) as client:
        response = await client.get("/api/session", headers=ANA)
        body = response.json()
        assert (body["name"], body["groups"], body["method"]) == ("ana", ["approvers"], "basic")
        assert "dt_csrf" in response.cookies


async def test_pending_lists_the_approval_and_a_decision_runs_it_as_the_authenticated_person(
    harness: Harness,
) -> None:
    wf = await harness.start(turns(("r1", "refund", {"order": "A-1", "amount": 5})))
    await harness.wait_approval(wf, "r1")
    async with inbox_client(harness) as client:
        entry = await listed(client, ANA, wf)
        [item] = entry["items"]
        assert (item["kind"], item["tool"], item["call_id"]) == ("approval", "refund", "r1")
        assert item["summary"].startswith("refund(")
        assert item["deadline"] and item["requested_at"]
        assert entry["agent"] == "main"
        questions = (await client.get("/api/pending?kind=question", headers=ANA)).json()
        assert all(w["workflow_id"] != wf for w in questions)
        refunds = (await client.get("/api/pending?tool=refund", headers=ANA)).json()
        assert any(w["workflow_id"] == wf for w in refunds)
        mains = (await client.get("/api/pending?agent=main&kind=approval", headers=ANA)).json()
        assert any(w["workflow_id"] == wf for w in mains)
        others = (await client.get("/api/pending?agent=other", headers=ANA)).json()
        assert all(w["workflow_id"] != wf for w in others)
        conversation = (await client.get(f"/api/conversations/{wf}", headers=ANA)).json()
        assert conversation["items"][0]["arguments_hash"] == item["arguments_hash"]
        assert conversation["transcript"][0]["role"] == "user"

        token = await csrf_token(client, ANA)
        url = f"/api/conversations/{wf}/calls/r1/decision"
        wrong = await client.post(
            url,
            json={"approved": True, "arguments_hash": "0" * 64},
            headers={**ANA, "X-CSRF-Token": token},
        )
        assert wrong.status_code == 409
        assert wrong.json()["error"] == "arguments_changed"

        # `decided_by` in the body is ignored: the identity comes from the credentials.
        response = await client.post(
            url,
            json={
                "approved": False,
                "arguments_hash": item["arguments_hash"],
                "reason": "over the limit",
                "decided_by": "mallory",
            },
            headers={**ANA, "X-CSRF-Token": token},
        )
        assert response.status_code == 200, response.text
        assert response.json()["receipt"]["call_id"] == "r1"
        outputs = await harness.wait_outputs(wf, "r1")
        assert outputs["r1"].failure_kind == "denied"
        assert "denied by ana: over the limit" in outputs["r1"].content
        assert harness.ledger_rows("refund") == []

        again = await client.post(
            url,
            json={"approved": True, "arguments_hash": item["arguments_hash"]},
            headers={**ANA, "X-CSRF-Token": token},
        )
        assert again.status_code == 409
        assert again.json()["error"] == "already_decided"
        assert "denied" in again.json()["message"]

        unknown = await client.post(
            f"/api/conversations/{wf}/calls/nope/decision",
            json={"approved": True, "arguments_hash": item["arguments_hash"]},
            headers=bearer("bob-secret"),
        )
        assert unknown.status_code == 409 and unknown.json()["error"] == "unknown_call"


async def test_approve_runs_the_call(harness: Harness) -> None:
    wf = await harness.start(turns(("r1", "refund", {"order": "A-2", "amount": 7})))
    approval = await harness.wait_approval(wf, "r1")
    async with inbox_client(harness) as client:
        response = await client.post(
            f"/api/conversations/{wf}/calls/r1/decision",
            json={"approved": True, "arguments_hash": approval.arguments_hash},
            headers=bearer("bob-secret"),
        )
        assert response.status_code == 200, response.text
    outputs = await harness.wait_outputs(wf, "r1")
    assert outputs["r1"].content == "refunded 7 on A-2"


async def test_answer_is_checked_against_its_schema(harness: Harness) -> None:
    wf = await harness.start(turns(("a1", "ask", {"question": "Refund it?"})))
    question = await harness.wait_interaction(wf, "a1")
    async with inbox_client(harness) as client:
        entry = await listed(client, ANA, wf)
        assert entry["items"][0]["kind"] == "question"
        assert entry["items"][0]["summary"] == "Refund it?"
        assert entry["items"][0]["answer_schema"] == {"type": "string", "enum": ["yes", "no"]}
        token = await csrf_token(client, ANA)
        url = f"/api/conversations/{wf}/calls/a1/answer"
        headers = {**ANA, "X-CSRF-Token": token}
        bad = await client.post(
            url, json={"value": "maybe", "arguments_hash": question.arguments_hash}, headers=headers
        )
        assert bad.status_code == 422 and bad.json()["error"] == "invalid_answer"
        good = await client.post(
            url, json={"value": "yes", "arguments_hash": question.arguments_hash}, headers=headers
        )
        assert good.status_code == 200, good.text
    outputs = await harness.wait_outputs(wf, "a1")
    assert outputs["a1"].content == "yes"


async def test_send_resume_and_retry(harness: Harness) -> None:
    wf = await harness.start(turns(("p1", "pause", {"reason": "wait for stock"})))
    await harness.wait_state(wf, "paused")
    async with inbox_client(harness) as client:
        entry = await listed(client, ANA, wf)
        assert [i["kind"] for i in entry["items"]] == ["pause"]
        assert entry["items"][0]["summary"] == "wait for stock"
        token = await csrf_token(client, ANA)
        headers = {**ANA, "X-CSRF-Token": token}
        retry = await client.post(f"/api/conversations/{wf}/retry", headers=headers)
        assert retry.status_code == 409 and retry.json()["error"] == "not_failed"
        resume = await client.post(
            f"/api/conversations/{wf}/resume", json={"message": "stock is in"}, headers=headers
        )
        assert resume.status_code == 200, resume.text
        outputs = await harness.wait_outputs(wf, "p1")
        assert "stock is in" in outputs["p1"].content
        await harness.wait_state(wf, "idle")
        again = await client.post(
            f"/api/conversations/{wf}/resume", json={"message": "x"}, headers=headers
        )
        assert again.status_code == 409 and again.json()["error"] == "not_waiting"
        sent = await client.post(
            f"/api/conversations/{wf}/messages", json={"text": "thanks"}, headers=headers
        )
        assert sent.status_code == 200, sent.text
    await harness.wait_assistant_text(wf, "echo: thanks")


async def test_an_ended_conversation_is_a_conflict_not_a_stack_trace(harness: Harness) -> None:
    wf = await harness.start("hello")
    await harness.wait_assistant_text(wf, "echo: hello")
    await harness.client.get_workflow_handle(wf).terminate("test")
    async with inbox_client(harness) as client:
        # Queries still read an ended conversation's transcript.
        response = await client.get(f"/api/conversations/{wf}", headers=ANA)
        assert response.status_code == 200, response.text
        assert response.json()["status"]["state"] == "idle"
        response = await client.post(
            f"/api/conversations/{wf}/calls/r1/decision",
            json={"approved": True, "arguments_hash": "x"},
            headers=bearer("ana-secret"),
        )
        assert response.status_code == 409, response.text
        assert response.json()["error"] == "ended"
        assert "Traceback" not in response.text


@pytest.mark.parametrize("ending", ["completed", "cancelled", "terminated"])
async def test_an_ended_conversation_offers_no_message_form(harness: Harness, ending: str) -> None:
    """A completed, cancelled or terminated conversation takes no more messages: its page says
    it ended instead of offering "Send a message", and a send is a 409 `ended`."""
    closed = {
        "completed": WorkflowExecutionStatus.COMPLETED,
        "cancelled": WorkflowExecutionStatus.CANCELED,
        "terminated": WorkflowExecutionStatus.TERMINATED,
    }[ending]
    if ending == "completed":
        wf = await harness.start(turns(("f1", "finish", {"output": "done"})))
    else:
        wf = await harness.start("hello")
        await harness.wait_assistant_text(wf, "echo: hello")
    handle = harness.client.get_workflow_handle(wf)
    if ending == "cancelled":
        await harness.conversations.cancel(wf)
    elif ending == "terminated":
        await handle.terminate("test")

    async def ended() -> bool:
        return (await handle.describe()).status == closed

    await eventually(ended, what=f"the conversation {ending}")
    async with inbox_client(harness) as client:
        page = await client.get(f"/conversations/{wf}", headers=ANA)
        assert page.status_code == 200, page.text
        assert 'class="send"' not in page.text
        assert f"This conversation has ended ({ending}); it takes no more messages." in page.text
        token = await csrf_token(client, ANA)
        sent = await client.post(
            f"/api/conversations/{wf}/messages",
            json={"text": "one more thing"},
            headers={**ANA, "X-CSRF-Token": token},
        )
        assert sent.status_code == 409, sent.text
        assert sent.json()["error"] == "ended"
        form = await client.post(
            f"/conversations/{wf}/send", data={"csrf_token": token, "text": "hi"}, headers=ANA
        )
        assert form.status_code == 409 and "has already ended" in form.text
        assert 'class="send"' not in form.text


async def test_openapi_schema_describes_every_operation(harness: Harness) -> None:
    async with inbox_client(harness) as client:
        schema = (await client.get("/api/openapi.json")).json()
    paths = schema["paths"]
    for method, path, _ in ENDPOINTS:
        templated = path.replace("/c1", "/{workflow_id}").replace("/r1/", "/{call_id}/")
        assert method.lower() in paths[templated], templated
    decision = paths["/api/conversations/{workflow_id}/calls/{call_id}/decision"]["post"]
    assert {"401", "403", "409"} <= set(decision["responses"])
    assert not any(p.startswith("/conversations") for p in paths)  # pages stay out


async def test_proxy_header_is_trusted_only_when_configured(harness: Harness) -> None:
    header = {"X-Forwarded-User": "carol", "X-Forwarded-Groups": "approvers, ops"}
    async with inbox_client(harness) as client:
        assert (await client.get("/api/session", headers=header)).status_code == 401
    async with inbox_client(harness, proxy=True) as client:
        body = (await client.get("/api/session", headers=header)).json()
        assert (body["name"], body["groups"], body["method"]) == (
            "carol",
            ["approvers", "ops"],
            "proxy",
        )


def test_build_auth_refuses_dev_mode_off_localhost_and_no_auth(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="127.0.0.1"):
        build_auth(host="0.0.0.0", dev_user="dev")
    with pytest.raises(ConfigurationError, match="no authentication"):
        build_auth(host="0.0.0.0")
    tokens = tmp_path / "tokens"
    tokens.write_text("# comment\nana\n")
    with pytest.raises(ConfigurationError, match="line 2"):
        build_auth(host="0.0.0.0", tokens_file=tokens)
    assert build_auth(host="127.0.0.1", dev_user="dev").chain


PAGES = [
    ("GET", "/"),
    ("GET", "/conversations/c1"),
    *(
        ("POST", f"/conversations/c1/{a}")
        for a in ("decide", "answer", "send", "resume", "retry", "budget")
    ),
]


@pytest.mark.parametrize(("method", "path"), PAGES)
async def test_every_page_and_form_answers_401_without_credentials(
    harness: Harness, method: str, path: str
) -> None:
    async with inbox_client(harness) as client:
        for headers in ({}, basic("bob", "ana-secret"), bearer("")):
            response = await client.request(method, path, data={"text": "hi"}, headers=headers)
            assert response.status_code == 401, (headers, response.text)
            assert "Sign in" in response.text and "<form" not in response.text
            assert response.headers["www-authenticate"].startswith("Basic ")


@pytest.mark.parametrize("action", ["decide", "answer", "send", "resume", "retry", "budget"])
async def test_page_forms_refuse_a_missing_or_foreign_csrf_token(
    harness: Harness, action: str
) -> None:
    async with inbox_client(harness) as client:
        page = await client.get("/", headers=ANA)
        assert page.status_code == 200 and "dt_csrf" in page.cookies
        url = f"/conversations/c1/{action}"
        response = await client.post(url, data={"text": "hi"}, headers=ANA)
        assert response.status_code == 403
        assert "security token" in response.text
        bobs = await csrf_token(client, BOB)
        response = await client.post(url, data={"csrf_token": bobs, "text": "hi"}, headers=ANA)
        assert response.status_code == 403
        anas = await csrf_token(client, ANA)
        fields = {"text": "hi", "decision": "approve", "value_json": "1", "call_id": "r1"}
        response = await client.post(
            url, data={"csrf_token": anas, "arguments_hash": "x", **fields}, headers=ANA
        )
        assert response.status_code != 403, response.text  # past CSRF: the conversation is missing
        assert "does not exist" in response.text


async def test_an_expired_approval_is_told_apart(harness: Harness) -> None:
    wf = await harness.start(
        turns(("r1", "refund", {"order": "A-3", "amount": 1})),
        options=ConversationOptions(approval_deadline=1.0),
    )
    approval = await harness.wait_approval(wf, "r1")
    outputs = await harness.wait_outputs(wf, "r1")
    assert outputs["r1"].failure_kind == "expired"
    async with inbox_client(harness) as client:
        response = await client.post(
            f"/api/conversations/{wf}/calls/r1/decision",
            json={"approved": True, "arguments_hash": approval.arguments_hash},
            headers=bearer("ana-secret"),
        )
    assert response.status_code == 409
    assert response.json()["error"] == "expired"
    assert "expired before a decision" in response.json()["message"]


async def test_may_decide_is_the_seam_for_approver_groups(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def approvers_only(identity: Identity, approval: object) -> bool:
        return "approvers" in identity.groups

    monkeypatch.setattr(service, "may_decide", approvers_only)
    wf = await harness.start(turns(("r1", "refund", {"order": "A-4", "amount": 2})))
    approval = await harness.wait_approval(wf, "r1")
    body = {"approved": True, "arguments_hash": approval.arguments_hash}
    url = f"/api/conversations/{wf}/calls/r1/decision"
    async with inbox_client(harness) as client:
        refused = await client.post(url, json=body, headers=bearer("bob-secret"))
        assert refused.status_code == 403 and refused.json()["error"] == "not_allowed"
        assert [a.call_id for a in (await harness.conversations.pending(wf)).approvals] == ["r1"]
        allowed = await client.post(url, json=body, headers=bearer("ana-secret"))
        assert allowed.status_code == 200, allowed.text
    await harness.wait_outputs(wf, "r1")


async def test_version_changes_when_the_conversation_does(harness: Harness) -> None:
    wf = await harness.start(turns(("r1", "refund", {"order": "A-5", "amount": 2})))
    approval = await harness.wait_approval(wf, "r1")
    async with inbox_client(harness) as client:
        url = f"/api/conversations/{wf}/version"
        before = (await client.get(url, headers=ANA)).json()["version"]
        assert (await client.get(url, headers=ANA)).json()["version"] == before
        await harness.conversations.approve(
            wf, "r1", arguments_hash=approval.arguments_hash, wait=True
        )
        await harness.wait_outputs(wf, "r1")
        assert (await client.get(url, headers=ANA)).json()["version"] != before


async def test_a_conversation_without_a_worker_is_listed_with_the_problem(
    harness: Harness, dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    orphan = f"orphan-{uuid.uuid4().hex[:8]}"
    async with running(dev_env, f"gone-{uuid.uuid4()}", tmp_path / "gone.jsonl") as gone:
        await gone.conversations.start(
            orphan,
            agent=AGENT,
            message=turns(("r1", "refund", {"order": "A-9", "amount": 1})),
            options=ConversationOptions(search_attributes=True),
        )
        await gone.wait_approval(orphan, "r1")
    # Its worker is gone; a conversation with a worker is listed beside it.
    wf = await harness.start(turns(("r1", "refund", {"order": "A-10", "amount": 1})))
    await harness.wait_approval(wf, "r1")
    try:
        async with inbox_client(harness) as client:
            await listed(client, ANA, wf)
            everything = (await client.get("/api/pending", headers=ANA)).json()
            [entry] = [w for w in everything if w["workflow_id"] == orphan]
            assert entry["items"] == []
            assert entry["problem"].startswith("no worker answered its queries within 3 s")
            assert "approval" in entry["problem"]
    finally:
        await harness.client.get_workflow_handle(orphan).terminate("test over")
