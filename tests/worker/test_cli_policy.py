"""`durable-tools policy explain ID CALL` and the policy lines of `durable-tools pending`."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, directed, turns
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from typer.testing import CliRunner, Result
from workflow_helpers import eventually

from durable_tools import Toolkit, tool
from durable_tools.agents import Agent
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig
from durable_tools.policies import Policy
from durable_tools.testing import ScriptedModel
from durable_tools.worker.cli import app
from durable_tools.worker.plugin import DurableToolsPlugin

runner = CliRunner()

POLICY = Policy.from_text("""
name: payouts
rules:
  - {id: payout-never, when: 'args.cents > 100000', outcome: deny, reason: too much}
  - {id: payout-large, when: 'args.cents > 5000', outcome: approve, groups: [finance], quorum: 2}
""")


@tool
async def payout(cents: int) -> str:
    """Pay out.

    Args:
        cents: The amount.
    """
    return f"paid {cents}"


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))


async def cli(*args: str) -> Result:
    # The CLI runs its own event loop: in a thread, beside the test's.
    return await asyncio.to_thread(runner.invoke, app, list(args), env={"COLUMNS": "200"})


async def test_explain_and_pending_show_the_rule_that_decided(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    plugin = DurableToolsPlugin(
        toolkits={"pay": Toolkit(payout, label="pay")},
        models={"directed": ScriptedModel(directed)},
        agents={"payer": Agent(model="directed", toolkit="pay", policy=POLICY)},
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    address = dev_env.client.service_client.config.target_host
    workflow_id = f"cli-policy-{uuid.uuid4().hex[:8]}"
    conversations = Conversations(client, task_queue=task_queue)
    async with Worker(client, task_queue=task_queue):
        script = turns([("big", "payout", {"cents": 9000}), ("huge", "payout", {"cents": 10**6})])
        await conversations.start(workflow_id, agent=AgentConfig(name="payer"), message=script)

        async def waiting() -> bool:
            return bool((await conversations.pending(workflow_id)).approvals)

        await eventually(waiting, what="the gated payout")
        options = ("--address", address, "--timeout", "20")
        shown = await cli("pending", workflow_id, *options)
        assert shown.exit_code == 0, shown.output
        assert (
            "big: needs 2 distinct finance approvals: args.cents > 5000, rule payout-large "
            f"(policy payouts {POLICY.version[:19]}); approved by nobody yet (0 of 2)"
        ) in " ".join(shown.stdout.split())

        explained = await cli("policy", "explain", workflow_id, "huge", *options)
        assert explained.exit_code == 0, explained.output
        assert explained.stdout.startswith("huge: denied: args.cents > 100000, rule payout-never")
        assert f"policy:  payouts {POLICY.version}" in explained.stdout

        as_json = await cli("policy", "explain", workflow_id, "big", "--json", *options)
        assert json.loads(as_json.stdout)["rule"] == "payout-large"

        missing = await cli("policy", "explain", workflow_id, "nope", *options)
        assert missing.exit_code == 1
        assert "no policy decided call 'nope'" in missing.stderr
