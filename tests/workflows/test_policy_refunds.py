"""Issue 28's refund example on the dev server: approval policies as code.

"Refunds up to 50 EUR run, above that a finance person approves, above
1,000 EUR two of them, never above 10,000 EUR." Each outcome (run, one
approval, two distinct approvals with the same person twice counting once,
deny) records its policy version and rule in history (the model turn's
plan), in `pending`, in the event stream and in `policy explain`'s source
(`Conversations.policy_verdict`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agent_support import LEDGER_ENV, directed, read_ledger, record, turns
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually, outputs_by_id

from durable_tools import ToolContext, Toolkit, tool
from durable_tools.agents import Agent
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions, PendingApproval
from durable_tools.errors import DecisionRejected
from durable_tools.policies import Policy
from durable_tools.policy_verdict import explain_verdict
from durable_tools.testing import ScriptedModel
from durable_tools.worker.plugin import DurableToolsPlugin
from durable_tools.worker.render import approval_policy_line

KEY = ("k1", b"k1-secret-key-0123456789abcdef-k1")

REFUNDS_TEXT = """
name: refunds
rules:
  - id: refund-never
    when: 'tool == "refund" && args.amount_cents > 1000000'
    outcome: deny
    reason: refunds above 10,000 EUR are never made by the agent
  - id: refund-two
    when: 'tool == "refund" && args.amount_cents > 100000'
    outcome: approve
    groups: [finance]
    quorum: 2
  - id: refund-large
    when: 'tool == "refund" && args.amount_cents > 5000'
    outcome: approve
    groups: [finance]
  - id: refund-small
    when: 'tool == "refund"'
    outcome: run
"""
REFUNDS = Policy.from_text(REFUNDS_TEXT)


@tool
async def refund(order: str, amount_cents: int, ctx: ToolContext) -> str:
    """Refund an order.

    Args:
        order: The order id.
        amount_cents: The amount in euro cents.
    """
    record({"tool": "refund", "call_id": ctx.call_id, "amount_cents": amount_cents})
    return f"refunded {amount_cents} on {order}"


SHOP = Toolkit(refund, label="shop")
AGENT = AgentConfig(name="refunds")


@asynccontextmanager
async def shop_worker(
    env: WorkflowEnvironment, task_queue: str, policy: Policy = REFUNDS
) -> AsyncIterator[Conversations]:
    plugin = DurableToolsPlugin(
        toolkits={"shop": SHOP},
        models={"directed": ScriptedModel(directed)},
        agents={"refunds": Agent(model="directed", toolkit="shop", policy=policy)},
        decision_keys={KEY[0]: KEY[1]},
    )
    client = Client(**{**env.client.config(), "plugins": [plugin]})
    async with Worker(client, task_queue=task_queue):
        yield Conversations(client, task_queue=task_queue)


async def start(conversations: Conversations, *calls: tuple[str, int]) -> str:
    workflow_id = f"refund-{uuid.uuid4()}"
    script = turns(
        [(call_id, "refund", {"order": "o1", "amount_cents": a}) for call_id, a in calls]
    )
    await conversations.start(
        workflow_id, agent=AGENT, message=script, options=ConversationOptions()
    )
    return workflow_id


async def approval(conversations: Conversations, workflow_id: str, call_id: str) -> PendingApproval:
    async def probe() -> PendingApproval | None:
        pending = await conversations.pending(workflow_id)
        return next((a for a in pending.approvals if a.call_id == call_id), None)

    return await eventually(probe, what=f"pending approval of {call_id}")


async def approve(
    conversations: Conversations,
    workflow_id: str,
    pending: PendingApproval,
    who: str,
    wait: bool = False,
) -> None:
    await conversations.approve(
        workflow_id,
        pending.call_id,
        arguments_hash=pending.arguments_hash,
        decided_by=who,
        groups=["finance"],
        sign_with=KEY,
        instance=pending.instance,
        wait=wait,
    )


async def outputs(conversations: Conversations, workflow_id: str, *call_ids: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        found = outputs_by_id(await conversations.history(workflow_id))
        return found if all(c in found for c in call_ids) else None

    return await eventually(probe, what=f"outputs of {call_ids}")


async def events_of(conversations: Conversations, workflow_id: str) -> list[Any]:
    events, _ = await conversations.retained_events(workflow_id)
    return events


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    return path


async def test_small_refund_runs_and_records_its_rule(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with shop_worker(dev_env, task_queue) as conversations:
        workflow_id = await start(conversations, ("small", 4_999))
        out = await outputs(conversations, workflow_id, "small")
        assert not out["small"].is_error
        verdict = await conversations.policy_verdict(workflow_id, "small")
        assert verdict is not None
        assert (verdict.rule, verdict.outcome, verdict.version) == (
            "refund-small",
            "run",
            REFUNDS.version,
        )


async def test_large_refund_waits_for_one_finance_approval(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with shop_worker(dev_env, task_queue) as conversations:
        workflow_id = await start(conversations, ("large", 50_000))
        pending = await approval(conversations, workflow_id, "large")
        assert pending.approvers == ["group:finance"]
        assert pending.quorum == 1
        assert pending.policy is not None
        assert (pending.policy.rule, pending.policy.version) == ("refund-large", REFUNDS.version)
        line = approval_policy_line(pending)
        assert line.startswith(
            'needs finance approval: tool == "refund" && args.amount_cents > 5000'
        )
        assert "rule refund-large" in line
        requested = [
            e for e in await events_of(conversations, workflow_id) if e.kind == "approval_requested"
        ]
        assert requested and requested[0].policy is not None
        assert requested[0].policy.rule == "refund-large"
        await approve(conversations, workflow_id, pending, "ana")
        out = await outputs(conversations, workflow_id, "large")
        assert out["large"].content == "refunded 50000 on o1"


async def test_very_large_refund_needs_two_people_and_one_person_counts_once(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with shop_worker(dev_env, task_queue) as conversations:
        workflow_id = await start(conversations, ("huge", 500_000))
        pending = await approval(conversations, workflow_id, "huge")
        assert (pending.quorum, pending.policy and pending.policy.rule) == (2, "refund-two")
        await approve(conversations, workflow_id, pending, "ana")

        async def counted() -> PendingApproval | None:
            now = await approval(conversations, workflow_id, "huge")
            return now if now.approved_by == ["ana"] else None

        await eventually(counted, what="ana's approval counted")
        with pytest.raises(DecisionRejected, match="each person counts once"):
            await approve(conversations, workflow_id, pending, "ana", wait=True)  # the update
        await approve(conversations, workflow_id, pending, "ana")  # the signal: recorded

        async def refused() -> bool:
            state = await conversations.pending(workflow_id)
            return any("already approved" in r.reason for r in state.rejected)

        await eventually(refused, what="ana's second approval refused")
        state = await conversations.pending(workflow_id)
        assert [a.call_id for a in state.approvals] == ["huge"]  # still waiting
        assert state.approvals[0].approved_by == ["ana"]
        assert "approved by ana (1 of 2)" in approval_policy_line(state.approvals[0])
        assert not [r for r in ledger_rows(ledger) if r.get("call_id") == "huge"]

        await approve(conversations, workflow_id, pending, "bob")
        out = await outputs(conversations, workflow_id, "huge")
        assert not out["huge"].is_error
        kinds = [e.kind for e in await events_of(conversations, workflow_id)]
        assert kinds.count("approval_counted") == 1


async def test_refund_above_the_limit_is_denied_with_the_reason_the_model_reads(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with shop_worker(dev_env, task_queue) as conversations:
        workflow_id = await start(conversations, ("never", 2_000_000))
        out = await outputs(conversations, workflow_id, "never")
        assert out["never"].is_error and out["never"].failure_kind == "denied"
        assert "rule refund-never" in out["never"].content
        assert "never made by the agent" in out["never"].content
        verdict = await conversations.policy_verdict(workflow_id, "never")
        assert verdict is not None and verdict.outcome == "deny"
        assert explain_verdict(verdict).startswith("denied: ")
        finished = [
            e
            for e in await events_of(conversations, workflow_id)
            if e.kind == "tool_call_finished" and e.call_id == "never"
        ]
        assert finished[0].policy is not None and finished[0].policy.rule == "refund-never"
        assert not ledger_rows(ledger)


def ledger_rows(path: Path) -> list[dict[str, Any]]:
    return read_ledger(path) if path.exists() else []
