"""`durable-tools policy install FILE ID...`: a live policy change from the command line."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, directed, turns
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from typer.testing import CliRunner, Result
from workflow_helpers import eventually, outputs_by_id

from durable_tools import Toolkit, tool
from durable_tools.agents import Agent
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig
from durable_tools.policies import Policy
from durable_tools.testing import ScriptedModel
from durable_tools.worker.cli import app
from durable_tools.worker.plugin import DurableToolsPlugin

runner = CliRunner()

GATED = Policy.from_text("""
name: payouts
rules:
  - {id: all, when: 'true', outcome: approve, groups: [finance]}
""")
RELEASED = """
name: payouts
rules:
  - {id: small, when: 'args.cents <= 5000', outcome: run}
"""


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


async def test_install_releases_a_waiting_call_and_refuses_a_bad_file(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    plugin = DurableToolsPlugin(
        toolkits={"pay": Toolkit(payout, label="pay")},
        models={"directed": ScriptedModel(directed)},
        agents={"payer": Agent(model="directed", toolkit="pay", policy=GATED)},
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    address = dev_env.client.service_client.config.target_host
    options = ("--address", address, "--timeout", "20")
    conversations = Conversations(client, task_queue=task_queue)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: payouts\nrules:\n  - {id: a, when: 'true', outcome: maybe}\n")
    refused = await cli("policy", "install", str(bad), "anything", *options)
    assert refused.exit_code == 1
    assert "not a policy" in refused.stderr

    good = tmp_path / "released.yaml"
    good.write_text(RELEASED)
    ids = [f"cli-install-{uuid.uuid4().hex[:8]}-{n}" for n in range(2)]
    async with Worker(client, task_queue=task_queue):
        for workflow_id in ids:
            script = turns([("p1", "payout", {"cents": 100})])
            await conversations.start(workflow_id, agent=AgentConfig(name="payer"), message=script)

            async def waiting(wid: str = workflow_id) -> bool:
                return bool((await conversations.pending(wid)).approvals)

            await eventually(waiting, what="the gated payout")
        shown = await cli("policy", "install", str(good), *ids, "--by", "ops", *options)
        assert shown.exit_code == 0, shown.output
        version = Policy.from_text(RELEASED).version
        assert f"policy payouts {version} sent to 2 conversations" in " ".join(shown.stdout.split())
        for workflow_id in ids:

            async def ran(wid: str = workflow_id) -> bool:
                return "p1" in outputs_by_id(await conversations.history(wid))

            await eventually(ran, what="the released payout")
            events, _ = await conversations.retained_events(workflow_id)
            [installed] = [e for e in events if e.kind == "policy_installed"]
            assert installed.sent_by == "ops"
        status = await cli("status", ids[0], *options)
        assert status.exit_code == 0, status.output
        assert f"payouts {version} (installed by ops at " in " ".join(status.stdout.split())
