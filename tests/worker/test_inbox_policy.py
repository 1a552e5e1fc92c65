"""The inbox shows which policy rule gated an approval, in its listing and its JSON API."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, turns
from inbox_support import basic, inbox_client, listed
from markupsafe import escape
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import running

from durable_tools.policies import Policy

ANA = basic("ana", "ana-secret")

POLICY = Policy.from_text("""
name: refunds
rules:
  - {id: refund-large, when: 'tool == "refund" && args.amount > 5000', outcome: approve,
     groups: [approvers]}
""")


async def test_the_listing_names_the_rule_and_the_policy_version(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(dev_env, task_queue, ledger, policies={"tests": POLICY}) as harness:
        wf = await harness.start(turns([("r1", "refund", {"order": "A-1", "amount": 9000})]))
        await harness.wait_approval(wf, "r1")
        line = (
            'needs approvers approval: tool == "refund" && args.amount > 5000, '
            f"rule refund-large (policy refunds {POLICY.version[:19]})"
        )
        async with inbox_client(harness) as client:
            entry = await listed(client, ANA, wf)
            [item] = entry["items"]
            assert item["policy"] == line
            assert (item["quorum"], item["approved_by"]) == (1, [])
            page = await client.get("/", headers=ANA)
            assert page.status_code == 200
            assert str(escape(line)) in page.text
