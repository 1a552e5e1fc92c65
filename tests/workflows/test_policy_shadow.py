"""Shadow mode on the dev server: a candidate policy beside the active one (issue 28, item 3).

100 conversations make refund calls of assorted amounts; the agent's active
policy and its candidate draw the lines at different amounts. The candidate
never changes what happens (the calls run, wait or are denied by the active
policy), each disagreement is recorded on the call's plan and published as
a `policy_disagreement` event, and `Conversations.policy_diff` (what
`durable-tools policy diff` prints) counts them exactly: the expected counts
are computed here from the amounts, without the policy code.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
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
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.policies import Policy
from durable_tools.policy_reads import PolicyDiff
from durable_tools.testing import ScriptedModel
from durable_tools.worker.cli import app
from durable_tools.worker.plugin import DurableToolsPlugin

runner = CliRunner()

ACTIVE = Policy.from_text("""
name: refunds
rules:
  - {id: never, when: 'args.amount_cents > 1000000', outcome: deny, reason: too much}
  - {id: two, when: 'args.amount_cents > 100000', outcome: approve, groups: [finance], quorum: 2}
  - {id: large, when: 'args.amount_cents > 5000', outcome: approve, groups: [finance]}
  - {id: small, when: 'true', outcome: run}
""")
CANDIDATE = Policy.from_text("""
name: refunds-next
rules:
  - {id: never, when: 'args.amount_cents > 500000', outcome: deny, reason: too much}
  - {id: two, when: 'args.amount_cents > 50000', outcome: approve, groups: [finance], quorum: 2}
  - {id: large, when: 'args.amount_cents > 2000', outcome: approve, groups: [finance]}
  - {id: small, when: 'true', outcome: run}
""")
AMOUNTS = [1000, 3000, 4000, 6000, 60000, 90000, 200000, 600000, 2_000_000]
CONVERSATIONS = 100
ACTIVE_LINES = (1_000_000, 100_000, 5000)
CANDIDATE_LINES = (500_000, 50_000, 2000)


def effect(amount: int, lines: tuple[int, int, int], policy: str) -> tuple[str, str]:
    """The rule label and effect text a policy with these lines gives (never, two, large)."""
    never, two, large = lines
    if amount > never:
        return f"{policy}/never", "deny"
    if amount > two:
        return f"{policy}/two", "approve(2 finance)"
    if amount > large:
        return f"{policy}/large", "approve(1 finance)"
    return f"{policy}/small", "run"


def expected_rows(scripts: list[list[int]]) -> Counter[tuple[str, str, str]]:
    rows: Counter[tuple[str, str, str]] = Counter()
    for amounts in scripts:
        for amount in amounts:
            rule, now = effect(amount, ACTIVE_LINES, "refunds")
            other, then = effect(amount, CANDIDATE_LINES, "refunds-next")
            if now != then:
                rows[(rule, other, f"{now} -> {then}")] += 1
    return rows


@tool
async def refund(order: str, amount_cents: int) -> str:
    """Refund an order.

    Args:
        order: The order id.
        amount_cents: The amount in euro cents.
    """
    return f"refunded {amount_cents} on {order}"


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))


async def test_the_diff_counts_every_disagreement_of_100_conversations(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    plugin = DurableToolsPlugin(
        toolkits={"shop": Toolkit(refund, label="shop")},
        models={"directed": ScriptedModel(directed)},
        agents={
            "refunds": Agent(
                model="directed", toolkit="shop", policy=ACTIVE, shadow_policy=CANDIDATE
            )
        },
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conversations = Conversations(client, task_queue=task_queue)
    rng = random.Random(28)
    scripts = [rng.choices(AMOUNTS, k=rng.randint(1, 3)) for _ in range(CONVERSATIONS)]
    ids = [f"shadow-{uuid.uuid4().hex[:8]}-{n}" for n in range(CONVERSATIONS)]
    slots = asyncio.Semaphore(25)

    async def one(workflow_id: str, amounts: list[int]) -> str:
        calls = [
            (f"c{i}", "refund", {"order": "o", "amount_cents": a}) for i, a in enumerate(amounts)
        ]
        async with slots:
            outcome = await conversations.start_and_wait(
                workflow_id,
                agent=AgentConfig(name="refunds"),
                message=turns(calls),
                options=ConversationOptions(),
            )
        return outcome.state

    async with Worker(client, task_queue=task_queue, max_concurrent_activities=50):
        # Each settles when its first turn's calls ran (the model answered
        # again) or one waits for approval: its plans are then in history.
        states = await asyncio.gather(*(one(w, s) for w, s in zip(ids, scripts, strict=True)))
        assert set(states) <= {"idle", "waiting"}, Counter(states)

        # The candidate changed nothing: the active policy's approvals wait.
        gated = [s for s in scripts if any(5000 < a <= 1_000_000 for a in s)]
        assert states.count("waiting") == len(gated)

        # One conversation's events name both verdicts of a disagreement.
        example = next((w, s) for w, s in zip(ids, scripts, strict=True) if 2000 < s[0] <= 5000)
        first = None
        async with asyncio.timeout(20):  # the event is in the stream already
            async for event in conversations.events(example[0]):
                if event.kind == "policy_disagreement" and event.call_id == "c0":
                    first = event
                    break
        assert first is not None
        assert first.outcome == "run -> approve(1 finance)"
        assert first.policy is not None and first.policy.rule == "small"
        assert first.candidate is not None and first.candidate.policy == "refunds-next"
        assert first.candidate.version == CANDIDATE.version

    # No worker needed to read the diff: histories, listed through visibility.
    query = f"TaskQueue = '{task_queue}'"

    async def listed() -> PolicyDiff | None:
        diff = await conversations.policy_diff(query, limit=500)
        return diff if diff.conversations == CONVERSATIONS else None

    diff = await eventually(listed, what="the 100 conversations in visibility", timeout=60)
    assert diff is not None
    expected = expected_rows(scripts)
    assert expected, "the amounts were chosen to disagree"
    got = Counter({(r.active, r.candidate, r.outcomes): r.count for r in diff.by_rules})
    assert got == expected
    assert diff.disagreements == sum(expected.values())
    assert diff.calls == sum(len(s) for s in scripts)
    assert [(t.tool, t.count) for t in diff.by_tool] == [("refund", sum(expected.values()))]
    # Every call was planned by the active policy: the one version the candidate met.
    assert diff.active_versions == {f"refunds {ACTIVE.version}": diff.calls}
    assert {r.active_version for r in diff.by_rules} == {ACTIVE.version}
    disagreeing = {
        w
        for w, s in zip(ids, scripts, strict=True)
        if any(effect(a, ACTIVE_LINES, "x")[1] != effect(a, CANDIDATE_LINES, "x")[1] for a in s)
    }
    assert diff.conversations_disagreeing == len(disagreeing)
    for row in diff.by_rules:
        assert row.examples and set(row.examples) <= disagreeing

    # `durable-tools policy diff` prints the same read.
    address = dev_env.client.service_client.config.target_host
    options = ("--query", query, "--limit", "500", "--address", address, "--timeout", "60")
    as_json = await cli("policy", "diff", "--json", *options)
    assert as_json.exit_code == 0, as_json.output
    assert PolicyDiff.model_validate_json(as_json.stdout) == diff
    table = await cli("policy", "diff", *options)
    assert table.exit_code == 0, table.output
    head = f"{diff.disagreements} of {diff.calls} calls disagree, in {len(disagreeing)} of 100"
    assert head in table.stdout
    assert "refunds/small" in table.stdout and "run -> approve(1 finance)" in table.stdout
    assert f"compared with: refunds {ACTIVE.version} ({diff.calls} calls)" in " ".join(
        table.stdout.split()
    )


async def cli(*args: str) -> Result:
    # The CLI runs its own event loop: in a thread, beside the test's.
    return await asyncio.to_thread(runner.invoke, app, list(args), env={"COLUMNS": "200"})
