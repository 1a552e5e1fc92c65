"""What a policy rule sees, on the dev server: the team, the caller, the call's history.

The policy here is a toolkit default (`App(policies={"shop": ...})`) under an
agent without a policy of its own, and a tool that declares
`needs_approval=True`: a rule that says `run` runs it without approval.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, directed, turns
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually, outputs_by_id

from durable_tools import Toolkit, tool
from durable_tools.agents import Agent
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.policies import Policy
from durable_tools.testing import ScriptedModel
from durable_tools.worker.plugin import DurableToolsPlugin

SHOP_DEFAULTS = Policy.from_text("""
name: shop-defaults
rules:
  - {id: billing-only, when: 'conversation.team != "billing"', outcome: deny,
     reason: only the billing team refunds}
  - {id: no-mallory, when: 'conversation.caller == "mallory"', outcome: deny, reason: not mallory}
  - {id: third-refund, when: 'history.tool_calls >= 2', outcome: approve, groups: [finance]}
  - {id: agent-named, when: 'conversation.agent == "refunds"', outcome: run}
""")


@tool(needs_approval=True)
async def refund(order: str) -> str:
    """Refund an order (declared as needing approval; the policy says otherwise).

    Args:
        order: The order id.
    """
    return f"refunded {order}"


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))


@asynccontextmanager
async def worker(env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Conversations]:
    plugin = DurableToolsPlugin(
        toolkits={"shop": Toolkit(refund, label="shop")},
        models={"directed": ScriptedModel(directed)},
        agents={"refunds": Agent(model="directed", toolkit="shop")},
        policies={"shop": SHOP_DEFAULTS},
    )
    client = Client(**{**env.client.config(), "plugins": [plugin]})
    async with Worker(client, task_queue=task_queue):
        yield Conversations(client, task_queue=task_queue)


async def converse(
    conversations: Conversations, team: str | None, sent_by: str, *call_ids: str
) -> str:
    workflow_id = f"policy-inputs-{uuid.uuid4()}"
    await conversations.start(
        workflow_id, agent=AgentConfig(name="refunds"), options=ConversationOptions(), team=team
    )
    calls = [(c, "refund", {"order": c}) for c in call_ids]
    await conversations.send(workflow_id, turns(calls[:1], calls[1:]), sent_by=sent_by)
    return workflow_id


async def test_team_caller_and_history_decide(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with worker(dev_env, task_queue) as conversations:
        no_team = await converse(conversations, None, "ana", "a1")
        mallory = await converse(conversations, "billing", "mallory", "m1")
        billing = await converse(conversations, "billing", "ana", "b1", "b2", "b3")

        async def answered(workflow_id: str, *call_ids: str) -> dict[str, str | None]:
            async def probe() -> dict[str, str | None] | None:
                found = outputs_by_id(await conversations.history(workflow_id))
                if all(c in found for c in call_ids):
                    return {c: found[c].failure_kind for c in call_ids}
                return None

            return await eventually(probe, what=f"outputs of {call_ids}")

        assert await answered(no_team, "a1") == {"a1": "denied"}
        assert await answered(mallory, "m1") == {"m1": "denied"}
        # b1 in the first turn, b2 in the second (one earlier call), b3 beside
        # it (two earlier calls): the third refund of the conversation waits.
        assert await answered(billing, "b1", "b2") == {"b1": None, "b2": None}

        async def third_waits() -> bool:
            pending = await conversations.pending(billing)
            return [a.call_id for a in pending.approvals] == ["b3"]

        await eventually(third_waits, what="the third refund waiting")
        rules = {
            c: v.rule if (v := await conversations.policy_verdict(w, c)) else None
            for w, c in ((no_team, "a1"), (mallory, "m1"), (billing, "b1"), (billing, "b2"),
                         (billing, "b3"))
        }  # fmt: skip
        assert rules == {
            "a1": "billing-only",
            "m1": "no-mallory",
            "b1": "agent-named",
            "b2": "agent-named",
            "b3": "third-refund",
        }
