"""Decisions from the inbox when the worker requires signatures, against a real dev server.

The worker holds `DURABLE_TOOLS_DECISION_KEYS`; `pay` has approvers (`group:approvers`), so
only a signed decision from a member counts. The inbox signs with its decision key, the
authenticated name and the groups its authentication reported; the worker accepts that,
and refuses an unsigned decision or one signed with a key it does not hold.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from inbox_support import (
    DECISION_KEY,
    PAYMENTS,
    PAYMENTS_AGENT,
    basic,
    bearer,
    csrf_token,
    inbox_client,
    turns,
)
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, running

from durable_tools.decision_keys import generate_ed25519_entries
from durable_tools.errors import ConfigurationError
from durable_tools.worker.inbox.server import parse_decision_key

ANA = basic("ana", "ana-secret")  # in the approvers group


@pytest.fixture
async def signed_worker(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    """A worker that verifies decisions with `DECISION_KEY` (read from the environment)."""
    key_id, key = DECISION_KEY
    monkeypatch.setenv("DURABLE_TOOLS_DECISION_KEYS", f"{key_id}:{base64.b64encode(key).decode()}")
    monkeypatch.setenv("DT_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    async with running(
        dev_env, task_queue, tmp_path / "ledger.jsonl", toolkits={"payments": PAYMENTS}
    ) as harness:
        yield harness


async def _pay(harness: Harness, order: str) -> tuple[str, str]:
    wf = await harness.start(
        turns(("p1", "pay", {"to": order, "cents": 900})), agent=PAYMENTS_AGENT
    )
    approval = await harness.wait_approval(wf, "p1")
    assert approval.signed and approval.approvers == ["group:approvers"]
    return wf, approval.arguments_hash


async def test_the_worker_accepts_the_inbox_signed_decision(signed_worker: Harness) -> None:
    harness = signed_worker
    wf, digest = await _pay(harness, "acme")
    async with inbox_client(harness, decision_key=DECISION_KEY) as client:
        page = await client.get(f"/conversations/{wf}", headers=ANA)
        assert "needs a signed decision" not in page.text
        token = await csrf_token(client, ANA)
        response = await client.post(
            f"/api/conversations/{wf}/calls/p1/decision",
            json={"approved": True, "arguments_hash": digest},
            headers={**ANA, "X-CSRF-Token": token},
        )
        assert response.status_code == 200, response.text
    outputs = await harness.wait_outputs(wf, "p1")
    assert outputs["p1"].content == "paid 900 to acme"
    assert [r["call_id"] for r in harness.ledger_rows("pay")] == ["p1"]
    assert (await harness.conversations.pending(wf)).rejected == []


async def test_an_ed25519_signing_inbox_and_workers_holding_the_public_key_only(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: with HMAC every worker host could sign; with Ed25519 only the inbox can."""
    signing_entry, verifying_entry = generate_ed25519_entries("ed1")
    monkeypatch.setenv("DURABLE_TOOLS_DECISION_KEYS", verifying_entry)
    monkeypatch.setenv("DT_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    inbox_key = parse_decision_key(signing_entry)
    assert inbox_key is not None
    async with running(
        dev_env, task_queue, tmp_path / "ledger.jsonl", toolkits={"payments": PAYMENTS}
    ) as harness:
        wf, digest = await _pay(harness, "acme")
        async with inbox_client(harness, decision_key=inbox_key) as client:
            token = await csrf_token(client, ANA)
            response = await client.post(
                f"/api/conversations/{wf}/calls/p1/decision",
                json={"approved": True, "arguments_hash": digest},
                headers={**ANA, "X-CSRF-Token": token},
            )
            assert response.status_code == 200, response.text
        outputs = await harness.wait_outputs(wf, "p1")
        assert outputs["p1"].content == "paid 900 to acme"
        assert (await harness.conversations.pending(wf)).rejected == []


async def test_an_unsigned_decision_is_refused_when_keys_are_required(
    signed_worker: Harness,
) -> None:
    harness = signed_worker
    wf, digest = await _pay(harness, "unsigned")
    async with inbox_client(harness) as client:  # the inbox holds no key
        page = await client.get(f"/conversations/{wf}", headers=ANA)
        assert "needs a signed decision and this inbox holds no decision key" in page.text
        response = await client.post(
            f"/api/conversations/{wf}/calls/p1/decision",
            json={"approved": True, "arguments_hash": digest},
            headers=bearer("ana-secret"),
        )
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "signature_required"
    assert "holds no decision key" in response.json()["message"]
    pending = await harness.conversations.pending(wf)
    assert [a.call_id for a in pending.approvals] == ["p1"]
    assert pending.rejected == []  # refused by the update's validator: nothing recorded
    assert harness.ledger_rows("pay") == []


async def test_a_decision_signed_with_another_key_is_refused(signed_worker: Harness) -> None:
    harness = signed_worker
    wf, digest = await _pay(harness, "forged")
    forged = (DECISION_KEY[0], b"not-the-worker-key-0123456789abcdef")
    async with inbox_client(harness, decision_key=forged) as client:
        response = await client.post(
            f"/api/conversations/{wf}/calls/p1/decision",
            json={"approved": True, "arguments_hash": digest},
            headers=bearer("ana-secret"),
        )
        assert response.status_code == 403, response.text
        assert response.json()["error"] == "signature_rejected"
        assert "invalid signature" in response.json()["message"]
        pending = await harness.conversations.pending(wf)
        assert [a.call_id for a in pending.approvals] == ["p1"]
        assert "signature rejected" in pending.rejected[-1].reason
        # The form says the same on the page, as a sentence.
        token = await csrf_token(client, ANA)
        page = await client.post(
            f"/conversations/{wf}/decide",
            data={
                "csrf_token": token,
                "call_id": "p1",
                "arguments_hash": digest,
                "decision": "approve",
            },
            headers=ANA,
        )
        assert page.status_code == 403
        assert 'data-conflict="signature_rejected"' in page.text
        assert "Traceback" not in page.text
    assert harness.ledger_rows("pay") == []


async def test_someone_outside_the_approvers_is_refused_before_anything_is_sent(
    signed_worker: Harness,
) -> None:
    harness = signed_worker
    wf, digest = await _pay(harness, "bob")
    async with inbox_client(harness, decision_key=DECISION_KEY) as client:
        page = await client.get(f"/conversations/{wf}", headers=basic("bob", "bob-secret"))
        assert "Only group:approvers may decide on this call" in page.text
        assert 'data-refused="p1"' in page.text and 'value="approve"' not in page.text
        response = await client.post(
            f"/api/conversations/{wf}/calls/p1/decision",
            json={"approved": True, "arguments_hash": digest},
            headers=bearer("bob-secret"),
        )
    assert response.status_code == 403 and response.json()["error"] == "not_allowed"
    pending = await harness.conversations.pending(wf)
    assert [a.call_id for a in pending.approvals] == ["p1"]
    assert pending.rejected == []  # nothing reached the workflow


def test_decision_key_parsing() -> None:
    encoded = base64.b64encode(DECISION_KEY[1]).decode()
    assert parse_decision_key(f"  k1:{encoded}\n") == DECISION_KEY
    assert parse_decision_key("   ") is None
    for bad in ("k1", "k1:", "k1:not base64!", f"k1:{encoded},k2:{encoded}", ":abc"):
        with pytest.raises(ConfigurationError, match="DURABLE_TOOLS_INBOX_DECISION_KEY"):
            parse_decision_key(bad)
