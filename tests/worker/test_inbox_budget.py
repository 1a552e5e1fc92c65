"""The inbox lists a conversation stopped by its budget and raises it, for its team only."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, metered, turns
from inbox_support import basic, csrf_token, inbox_client, listed
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import eventually, running

from durable_tools.budgets import Budget, ModelPrice
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.testing import ScriptedModel

ANA = basic("ana", "ana-secret")  # group approvers: the conversation's team
BOB = basic("bob", "bob-secret")  # no team
PRICE = ModelPrice(input_per_million=1.0, cached_input_per_million=0.5, output_per_million=2.0)


async def test_the_inbox_shows_the_stop_and_its_team_raises_the_budget(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    models = {"metered": ScriptedModel(metered)}
    async with running(
        dev_env, task_queue, ledger, models=models, prices={"metered": PRICE}
    ) as harness:
        script = turns([("w1", "get_weather", {"city": "Oslo"})])
        options = ConversationOptions(search_attributes=True, budget=Budget(max_tokens=500))
        agent = AgentConfig(name="main", model="metered", toolkit="tests")
        wf = await harness.start(script, agent=agent, options=options, team="approvers")
        async with inbox_client(harness) as client:
            entry = await listed(client, ANA, wf)
            [item] = entry["items"]
            assert item["kind"] == "budget_exceeded"
            assert item["summary"] == (
                "model turn 2 waits: the conversation's budget: 400 tokens spent "
                "+ ~400 for the next call > limit 500 tokens"
            )
            page = await client.get(f"/conversations/{wf}", headers=ANA)
            assert page.status_code == 200
            assert "Raise the budget" in page.text
            assert "USD" in page.text  # the cost so far, beside the turns

            url = f"/api/conversations/{wf}/budget"
            token = await csrf_token(client, BOB)
            refused = await client.post(
                url, json={"max_tokens": 5000}, headers={**BOB, "X-CSRF-Token": token}
            )
            assert refused.status_code == 404  # not bob's team: it does not exist for him
            token = await csrf_token(client, ANA)
            headers = {**ANA, "X-CSRF-Token": token}
            bad = await client.post(url, json={"max_tokens": -1}, headers=headers)
            assert bad.status_code == 422, bad.text
            empty = await client.post(url, json={}, headers=headers)
            assert empty.status_code == 422 and empty.json()["error"] == "invalid_budget"
            ok = await client.post(url, json={"max_tokens": 5000}, headers=headers)
            assert ok.status_code == 200, ok.text

        await harness.wait_assistant_text(wf, "done (metered)")

        async def idle() -> bool:
            return (await harness.conversations.status(wf)).state == "idle"

        await eventually(idle, what="idle after the raise")
        status = await harness.conversations.status(wf)
        assert status.budget is not None and status.budget.conversation == Budget(max_tokens=5000)
