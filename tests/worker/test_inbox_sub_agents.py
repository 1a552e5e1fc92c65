"""The inbox leads from a conversation whose call runs a sub-agent to the sub-agent's own.

The child conversation belongs to the parent's team: its approval is listed
for that team's people, and decided there, by the child's workflow id.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, metered, turns
from inbox_support import basic, inbox_client, listed
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import eventually, running

from durable_tools.agent_tools import sub_agent_workflow_id
from durable_tools.agents import Agent
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.testing import ScriptedModel
from durable_tools.worker.inbox.paths import quote_segment

ANA = basic("ana", "ana-secret")  # group approvers: the conversation's team
BOB = basic("bob", "bob-secret")  # no team


async def test_the_parent_links_to_the_sub_agent_whose_approval_its_team_sees(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    agents = {
        "desk": Agent(model="metered", toolkit="desk"),
        "researcher": Agent(model="metered", toolkit="tests"),
    }
    models = {"metered": ScriptedModel(metered)}
    async with running(dev_env, task_queue, ledger, models=models, agents=agents) as harness:
        child_script = turns([("f1", "refund", {"order": "o1", "amount": 5})])
        script = turns([("r1", "researcher", {"message": child_script})])
        options = ConversationOptions(search_attributes=True)
        wf = await harness.start(
            script, agent=AgentConfig(name="desk"), options=options, team="approvers"
        )
        child = sub_agent_workflow_id(wf, 1, "r1")
        harness.started.append(child)
        async with inbox_client(harness) as client:
            entry = await listed(client, ANA, child)  # the child waits for ana's team
            [item] = entry["items"]
            assert item["kind"] == "approval" and item["call_id"] == "f1"

            async def linked() -> str | None:
                page = await client.get(f"/conversations/{wf}", headers=ANA)
                assert page.status_code == 200
                return page.text if "Open the sub-agent" in page.text else None

            text = await eventually(linked, what="the link to the sub-agent")
            assert f'href="/conversations/{quote_segment(child)}"' in text
            page = await client.get(f"/conversations/{quote_segment(child)}", headers=ANA)
            assert page.status_code == 200 and "refund" in page.text
            hidden = await client.get(f"/conversations/{quote_segment(child)}", headers=BOB)
            assert hidden.status_code == 404  # not bob's team
