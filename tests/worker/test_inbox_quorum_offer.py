"""The inbox does not offer "approve" to someone already counted toward a quorum (issue 28).

The workflow refuses a second approval by the same person (each counts once);
the inbox says so before anything is sent: the page shows a note instead of
the approve button (deny stays), and the API answers 403 `not_allowed`.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, turns
from inbox_support import DECISION_KEY, basic, csrf_token, inbox_client
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import eventually, running

from durable_tools.conversation import PendingApproval
from durable_tools.policies import Policy
from durable_tools.worker.inbox.auth import Identity, may_decide

ANA = basic("ana", "ana-secret")  # in the approvers group

POLICY = Policy.from_text("""
name: refunds
rules:
  - {id: refund-two, when: 'tool == "refund"', outcome: approve, groups: [approvers], quorum: 2}
""")


def test_may_decide_refuses_a_second_approval_not_a_denial() -> None:
    now = datetime.now(UTC)
    approval = PendingApproval(
        call_id="c1",
        tool="refund",
        arguments="{}",
        arguments_hash="h",
        summary="refund()",
        requested_at=now,
        deadline=now,
        approvers=["group:finance"],
        quorum=2,
        approved_by=["ana"],
    )
    ana = Identity(name="ana", groups=("finance",), method="proxy")
    cy = Identity(name="cy", groups=("finance",), method="proxy")
    assert not may_decide(ana, approval, approving=True)
    assert may_decide(ana, approval)  # she may still deny
    assert may_decide(cy, approval, approving=True)


async def test_the_page_and_the_api_refuse_a_counted_approver(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_id, key = DECISION_KEY
    monkeypatch.setenv("DURABLE_TOOLS_DECISION_KEYS", f"{key_id}:{base64.b64encode(key).decode()}")
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(dev_env, task_queue, ledger, policies={"tests": POLICY}) as harness:
        wf = await harness.start(turns([("r1", "refund", {"order": "A-1", "amount": 9000})]))
        approval = await harness.wait_approval(wf, "r1")
        async with inbox_client(harness, decision_key=DECISION_KEY) as client:
            token = await csrf_token(client, ANA)
            url = f"/api/conversations/{wf}/calls/r1/decision"
            body = {"approved": True, "arguments_hash": approval.arguments_hash}
            headers = {**ANA, "X-CSRF-Token": token}
            first = await client.post(url, json=body, headers=headers)
            assert first.status_code == 200, first.text

            async def counted() -> bool:
                [pending] = (await harness.conversations.pending(wf)).approvals
                return pending.approved_by == ["ana"]

            await eventually(counted, what="ana counted toward the quorum")
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert 'data-counted="r1"' in page.text
            assert 'value="approve"' not in page.text
            assert 'value="deny"' in page.text
            again = await client.post(url, json=body, headers=headers)
            assert again.status_code == 403, again.text
            assert "already approved" in again.json()["message"]
        # Nothing reached the workflow: no rejection was recorded.
        assert (await harness.conversations.pending(wf)).rejected == []
