"""Grants from the inbox: the form's "rest of this conversation" box and the API (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, turns
from inbox_support import basic, csrf_token, inbox_client
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import eventually, running

from durable_tools.conversation import ConversationOptions
from durable_tools.grants import GrantScope
from durable_tools.worker.inbox.auth import CSRF_FIELD

ANA = basic("ana", "ana-secret")


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))


SCRIPT = turns(
    [("r1", "refund", {"order": "A-1", "amount": 100})],
    [("r2", "refund", {"order": "A-1", "amount": 7})],
    [("r3", "refund", {"order": "B-2", "amount": 7})],
)


async def test_the_form_grants_by_the_fields_named(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger.jsonl") as harness:
        wf = await harness.start(SCRIPT, options=ConversationOptions(idle_timeout=60))
        first = await harness.wait_approval(wf, "r1")
        async with inbox_client(harness) as client:
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert 'name="grant_fields"' in page.text
            token = await csrf_token(client, ANA)
            form = {
                CSRF_FIELD: token,
                "call_id": "r1",
                "arguments_hash": first.arguments_hash,
                "decision": "approve",
                "grant": "1",
                "grant_fields": "order",
            }
            sent = await client.post(f"/conversations/{wf}/decide", data=form, headers=ANA)
            assert sent.status_code in (200, 303), sent.text
            await harness.wait_approval(wf, "r3")  # r2 ran by the grant; B-2 waits
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert "Approved for the rest of this conversation" in page.text
            assert "grant g1 by ana at " in page.text and "; ran r2" in page.text
        pending = await harness.conversations.pending(wf)
        [grant] = pending.grants
        assert grant.scope == GrantScope(tool="refund", arguments={"/order": "A-1"})
        assert (grant.granted_by, grant.uses) == ("ana", ["r2"])


async def test_the_form_sets_how_long_a_grant_lasts_and_refuses_a_bad_length(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger.jsonl") as harness:
        wf = await harness.start(SCRIPT, options=ConversationOptions(idle_timeout=60))
        first = await harness.wait_approval(wf, "r1")
        async with inbox_client(harness) as client:
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert 'name="grant_for"' in page.text and '<option value="86400">1 day' in page.text
            token = await csrf_token(client, ANA)
            form = {
                CSRF_FIELD: token,
                "call_id": "r1",
                "arguments_hash": first.arguments_hash,
                "decision": "approve",
                "grant": "1",
                "grant_fields": "order",
            }
            url = f"/conversations/{wf}/decide"
            for bad in ("soon", "-5", "nan", "inf", "1e12"):
                refused = await client.post(url, data={**form, "grant_for": bad}, headers=ANA)
                assert refused.status_code == 422, (bad, refused.status_code)
                assert "grant" in refused.text
            assert [a.call_id for a in (await harness.conversations.pending(wf)).approvals] == [
                "r1"
            ]
            sent = await client.post(url, data={**form, "grant_for": "86400"}, headers=ANA)
            assert sent.status_code in (200, 303), sent.text
            await harness.wait_approval(wf, "r3")  # r2 ran by the grant; B-2 waits
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert "; until " in page.text
        [grant] = (await harness.conversations.pending(wf)).grants
        assert grant.scope == GrantScope(
            tool="refund", arguments={"/order": "A-1"}, expires_after=86400.0
        )
        assert grant.expires_at is not None and grant.uses == ["r2"]


async def test_the_api_takes_a_grant_and_refuses_a_hostile_one(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger.jsonl") as harness:
        wf = await harness.start(SCRIPT, options=ConversationOptions(idle_timeout=60))
        first = await harness.wait_approval(wf, "r1")
        async with inbox_client(harness) as client:
            token = await csrf_token(client, ANA)
            url = f"/api/conversations/{wf}/calls/r1/decision"
            headers = {**ANA, "X-CSRF-Token": token}
            for hostile in [
                {"tool": "refund", "arguments": {"order": "A-1"}},  # not a pointer
                {"tool": "refund", "arguments": {"/order": ["A-1"]}},  # not a scalar
                {"tool": "refund", "arguments": {"/order": "A-1"}, "extra": 1},
                {"tool": "refund", "arguments": {"/n": 2**60}},
                "refund",
            ]:
                body = {"approved": True, "arguments_hash": first.arguments_hash, "grant": hostile}
                refused = await client.post(url, json=body, headers=headers)
                assert refused.status_code == 422, (hostile, refused.text)
            # A grant for another tool is the workflow's refusal (409), recorded.
            other = {"tool": "pay", "arguments": {}}
            body = {"approved": True, "arguments_hash": first.arguments_hash, "grant": other}
            refused = await client.post(url, json=body, headers=headers)
            assert refused.status_code == 409 and "names tool 'pay'" in refused.text
            grant = {"tool": "refund", "arguments": {"/order": "A-1"}}
            body = {"approved": True, "arguments_hash": first.arguments_hash, "grant": grant}
            taken = await client.post(url, json=body, headers=headers)
            assert taken.status_code == 200, taken.text
            await harness.wait_approval(wf, "r3")
        [kept] = (await harness.conversations.pending(wf)).grants
        assert kept.uses == ["r2"]


async def test_the_page_and_the_api_revoke_a_grant(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger.jsonl") as harness:
        script = turns([("r1", "refund", {"order": "A-1", "amount": 100})])
        wf = await harness.start(script, options=ConversationOptions(idle_timeout=60))
        first = await harness.wait_approval(wf, "r1")
        scope = GrantScope(tool="refund", arguments={"/order": "A-1"}, expires_after=3600)
        await harness.conversations.approve(
            wf, "r1", arguments_hash=first.arguments_hash, decided_by="ana", grant=scope
        )
        await harness.wait_outputs(wf, "r1")
        async with inbox_client(harness) as client:
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert "Revoke g1" in page.text and "; until " in page.text
            token = await csrf_token(client, ANA)
            form = {CSRF_FIELD: token, "grant_id": "g1", "reason": "order closed"}
            sent = await client.post(f"/conversations/{wf}/revoke", data=form, headers=ANA)
            assert sent.status_code in (200, 303), sent.text

            async def revoked() -> bool:
                [grant] = (await harness.conversations.pending(wf)).grants
                return grant.revoked_at is not None

            await eventually(revoked, what="g1 revoked from the page")
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert "revoked by ana: order closed" in page.text
            assert "Revoke g1" not in page.text  # nothing left to revoke
            headers = {**ANA, "X-CSRF-Token": token}
            api = f"/api/conversations/{wf}/grants"
            refused = await client.post(f"{api}/{'g' * 201}/revoke", json={}, headers=headers)
            assert refused.status_code == 422 and "invalid_grant" in refused.text
            again = await client.post(f"{api}/g1/revoke", json={"reason": "x"}, headers=headers)
            assert again.status_code == 200, again.text  # sent; the workflow refuses it

            async def refusal() -> list[str] | None:
                pending = await harness.conversations.pending(wf)
                found = [r.reason for r in pending.rejected if r.signal == "revoke_grant"]
                return found or None

            [reason] = await eventually(refusal, what="the second revocation refused") or []
            assert "revoked already, by ana" in reason
        await harness.conversations.send(
            wf, turns([("r2", "refund", {"order": "A-1", "amount": 5})])
        )
        await harness.wait_approval(wf, "r2")  # the revoked grant runs nothing
