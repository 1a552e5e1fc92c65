"""A live policy change across a worker restart (issue 28, item 4), on the dev server.

Three refunds wait for one finance approval under the agent's policy. The
worker stops; `set_policy` installs a new version (a signal: no worker
runs); a new worker starts. The conversation takes the change at its next
workflow task, and the worker decides the waiting calls again: the small
refund is released and runs, the large one now needs two distinct finance
approvers, the huge one is denied. The record shows it: the signal with who
sent it, the re-evaluation activity, `policy_installed` and
`policy_reevaluated` events, the decisions naming the policy change. A
later call is planned under the new version.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_support import LEDGER_ENV, directed, read_ledger, record, turns
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually, outputs_by_id, quiet

from durable_tools import ApprovalContext, ToolContext, Toolkit, tool
from durable_tools.agents import Agent
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions, PendingApproval
from durable_tools.models.base import ModelRequest
from durable_tools.policies import Policy
from durable_tools.policy_reads import planned_calls
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage, UserMessage
from durable_tools.worker.plugin import DurableToolsPlugin

KEY = ("k1", b"k1-secret-key-0123456789abcdef-k1")

BEFORE = Policy.from_text("""
name: refunds
rules:
  - {id: all, when: 'tool == "refund"', outcome: approve, groups: [finance]}
""")
AFTER_TEXT = """
name: refunds
rules:
  - {id: never, when: 'args.amount_cents > 1000000', outcome: deny, reason: too much for the agent}
  - {id: two, when: 'args.amount_cents > 5000', outcome: approve, groups: [finance], quorum: 2}
  - {id: small, when: 'true', outcome: run}
"""
AFTER = Policy.from_text(AFTER_TEXT)


@tool
async def refund(order: str, amount_cents: int, ctx: ToolContext) -> str:
    """Refund an order.

    Args:
        order: The order id.
        amount_cents: The amount in euro cents.
    """
    record({"tool": "refund", "call_id": ctx.call_id, "amount_cents": amount_cents})
    return f"refunded {amount_cents} on {order}"


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    return path


HELD: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}
"""Conversations whose model turn waits: (the turn started, let it answer)."""


async def held(request: ModelRequest) -> AssistantMessage:
    """`directed`, except that a conversation in `HELD` answers when the test says so."""
    events = HELD.pop(request.workflow_id, None)
    if events is not None:
        events[0].set()
        await events[1].wait()
    return directed(request)


@asynccontextmanager
async def shop_worker(env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Conversations]:
    plugin = DurableToolsPlugin(
        toolkits={"shop": Toolkit(refund, label="shop")},
        models={"directed": ScriptedModel(held)},
        agents={"refunds": Agent(model="directed", toolkit="shop", policy=BEFORE)},
        decision_keys={KEY[0]: KEY[1]},
    )
    client = Client(**{**env.client.config(), "plugins": [plugin]})
    # A stopped worker's sticky queue hands the next task over after 1 s.
    async with Worker(
        client, task_queue=task_queue, sticky_queue_schedule_to_start_timeout=timedelta(seconds=1)
    ):
        yield Conversations(client, task_queue=task_queue)


async def approvals(
    conversations: Conversations, workflow_id: str, n: int
) -> list[PendingApproval]:
    async def probe() -> list[PendingApproval] | None:
        found = (await conversations.pending(workflow_id)).approvals
        return found if len(found) == n else None

    return await eventually(probe, what=f"{n} pending approvals")


async def test_a_live_change_releases_one_waiting_call_and_tightens_another(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    workflow_id = f"live-{uuid.uuid4().hex[:8]}"
    calls = [
        ("small", "refund", {"order": "o1", "amount_cents": 3000}),
        ("large", "refund", {"order": "o2", "amount_cents": 60000}),
        ("huge", "refund", {"order": "o3", "amount_cents": 2_000_000}),
    ]
    async with shop_worker(dev_env, task_queue) as conversations:
        await conversations.start(
            workflow_id, agent=AgentConfig(name="refunds"), message=turns(calls)
        )
        waiting = await approvals(conversations, workflow_id, 3)
        assert {(a.call_id, a.quorum) for a in waiting} == {("small", 1), ("large", 1), ("huge", 1)}

    # No worker runs: the signal is stored, and taken by the next worker.
    version = await conversations.set_policy(
        workflow_id, AFTER_TEXT, installed_by="ops-lead", reason="new refund limits"
    )
    assert version == AFTER.version
    assert not ledger.exists()  # nothing ran yet

    async with shop_worker(dev_env, task_queue) as conversations:

        async def settled() -> dict[str, Any] | None:
            outputs = outputs_by_id(await conversations.history(workflow_id))
            return outputs if {"small", "huge"} <= outputs.keys() else None

        outputs = await eventually(settled, what="the released and the denied call")
        assert not outputs["small"].is_error
        assert outputs["small"].content == "refunded 3000 on o1"
        assert outputs["huge"].is_error and outputs["huge"].failure_kind == "denied"
        assert "too much for the agent" in outputs["huge"].content
        assert f"policy refunds {AFTER.version[:19]}" in outputs["huge"].content
        assert "ops-lead" in outputs["huge"].content  # who made the change that denied it

        [large] = await approvals(conversations, workflow_id, 1)
        assert (large.call_id, large.quorum, large.approvers) == ("large", 2, ["group:finance"])
        explained = await conversations.policy_verdict(workflow_id, "large")  # policy explain
        assert explained is not None and (explained.rule, explained.quorum) == ("two", 2)
        assert large.policy is not None
        assert (large.policy.rule, large.policy.version) == ("two", AFTER.version)

        # The tightened call now needs two distinct finance approvers.
        for who in ("ana", "bob"):
            await conversations.approve(
                workflow_id,
                "large",
                arguments_hash=large.arguments_hash,
                decided_by=who,
                groups=["finance"],
                sign_with=KEY,
                instance=large.instance,
            )
            if who == "ana":

                async def counted() -> bool:
                    [now] = (await conversations.pending(workflow_id)).approvals
                    return now.approved_by == ["ana"]

                await eventually(counted, what="ana's approval counted, not enough")

        async def ran() -> bool:
            return "large" in outputs_by_id(await conversations.history(workflow_id))

        await eventually(ran, what="the large refund after two approvals")
        ran_calls = [r["call_id"] for r in read_ledger(ledger)]
        assert sorted(ran_calls) == ["large", "small"]

        # Later calls are planned under the new version: 4,000 runs at once.
        later = turns([("later", "refund", {"order": "o4", "amount_cents": 4000})])
        await conversations.send(workflow_id, later)

        async def later_ran() -> bool:
            return "later" in outputs_by_id(await conversations.history(workflow_id))

        await eventually(later_ran, what="the later call")
        verdict = await conversations.policy_verdict(workflow_id, "later")
        assert verdict is not None and (verdict.rule, verdict.version) == ("small", AFTER.version)

        events, _ = await conversations.retained_events(workflow_id)
        [installed] = [e for e in events if e.kind == "policy_installed"]
        assert installed.sent_by == "ops-lead"
        assert installed.reason is not None and AFTER.version in installed.reason
        changed = {e.call_id: e.outcome for e in events if e.kind == "policy_reevaluated"}
        assert changed == {
            "small": "approve(1 finance) -> run",
            "large": "approve(1 finance) -> approve(2 finance)",
            "huge": "approve(1 finance) -> deny",
        }

    # History: the signal with who sent it, then the re-evaluation activity;
    # no workflow task failed.
    history = await conversations.client.get_workflow_handle(workflow_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    signal = next(
        e
        for e in history.events
        if e.workflow_execution_signaled_event_attributes.signal_name == "set_policy"
    )
    [payload] = signal.workflow_execution_signaled_event_attributes.input.payloads
    assert b'"installed_by":"ops-lead"' in payload.data
    reevaluations = [
        e
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "policy.reevaluate-v1"
    ]
    assert len(reevaluations) == 1 and reevaluations[0].event_id > signal.event_id


async def test_a_change_during_the_model_turn_reaches_its_calls_once_they_wait(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    workflow_id = f"live-turn-{uuid.uuid4().hex[:8]}"
    started, answer = HELD[workflow_id] = (asyncio.Event(), asyncio.Event())
    async with shop_worker(dev_env, task_queue) as conversations:
        script = turns([("small", "refund", {"order": "o1", "amount_cents": 3000})])
        await conversations.start(workflow_id, agent=AgentConfig(name="refunds"), message=script)
        async with asyncio.timeout(20):
            await started.wait()  # the turn is planned under the agent's policy...
        await conversations.set_policy(workflow_id, AFTER, installed_by="ops-lead")

        async def taken() -> bool:
            events, _ = await conversations.retained_events(workflow_id)
            return any(e.kind == "policy_installed" for e in events)

        await eventually(taken, what="the change taken while the model turn runs")
        answer.set()  # ...whose call then waits, and is decided again

        async def ran() -> bool:
            return "small" in outputs_by_id(await conversations.history(workflow_id))

        await eventually(ran, what="the call released by the change")
        assert [r["call_id"] for r in read_ledger(ledger)] == ["small"]
        [plan] = [p async for p in planned_calls(conversations.client, workflow_id)]
        assert plan.policy is not None and plan.policy.version == BEFORE.version  # as planned
        latest = await conversations.policy_verdict(workflow_id, "small")  # as decided
        assert latest is not None and (latest.rule, latest.version) == ("small", AFTER.version)
        events, _ = await conversations.retained_events(workflow_id)
        [changed] = [e for e in events if e.kind == "policy_reevaluated"]
        assert (changed.call_id, changed.outcome) == ("small", "approve(1 finance) -> run")
        assert changed.policy is not None and changed.policy.version == AFTER.version


async def test_the_installed_version_is_carried_across_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    workflow_id = f"live-carry-{uuid.uuid4().hex[:8]}"
    options = ConversationOptions(continue_as_new_after_turns=1)
    async with shop_worker(dev_env, task_queue) as conversations:
        agent = AgentConfig(name="refunds")
        await conversations.start(workflow_id, agent=agent, message="hello", options=options)
        await conversations.set_policy(workflow_id, AFTER, installed_by="ops-lead")
        first = (await conversations.client.get_workflow_handle(workflow_id).describe()).run_id
        script = turns([("later", "refund", {"order": "o5", "amount_cents": 4000})])
        await conversations.send(workflow_id, script)

        async def ran() -> bool:
            return "later" in outputs_by_id(await conversations.history(workflow_id))

        await eventually(ran, what="the call planned in a later run")
        now = (await conversations.client.get_workflow_handle(workflow_id).describe()).run_id
        assert now != first  # it continued as new before the call was planned
        verdict = await conversations.policy_verdict(workflow_id, "later")
        assert verdict is not None and (verdict.rule, verdict.version) == ("small", AFTER.version)


ONCE = Policy.from_text("""
name: once
rules:
  - {id: first, when: 'tool == "refund" && history.tool_calls == 0', outcome: run}
  - {id: rest, when: 'tool == "refund"', outcome: approve, groups: [finance]}
""")
ONCE_STRICT = """
name: once
rules:
  - {id: repeat, when: 'tool == "refund" && history.tool_calls >= 1', outcome: deny,
     reason: one refund per conversation}
  - {id: fine, when: 'true', outcome: run}
"""


async def test_a_reevaluation_counts_the_calls_of_runs_it_no_longer_carries(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    """`history` in a re-evaluation counts calls whose items a continue-as-new left behind.

    The conversation continues as new after every turn and carries no item it
    need not (`carry_transcript_bytes=0`), so r1's call is only in an earlier
    run when r2 waits. The new version denies a second refund: r2 is denied
    because the carried counts still hold r1.
    """
    workflow_id = f"live-prior-{uuid.uuid4().hex[:8]}"
    options = ConversationOptions(continue_as_new_after_turns=1, carry_transcript_bytes=0)
    plugin = DurableToolsPlugin(
        toolkits={"shop": Toolkit(refund, label="shop")},
        models={"directed": ScriptedModel(directed)},
        agents={"once": Agent(model="directed", toolkit="shop", policy=ONCE)},
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    async with Worker(client, task_queue=task_queue):
        conversations = Conversations(client, task_queue=task_queue)
        first = turns([("r1", "refund", {"order": "o1", "amount_cents": 100})])
        agent = AgentConfig(name="once")
        await conversations.start(workflow_id, agent=agent, message=first, options=options)

        async def ran() -> bool:
            return "r1" in outputs_by_id(await conversations.history(workflow_id))

        await eventually(ran, what="r1 run by rule first")
        second = turns([("r2", "refund", {"order": "o2", "amount_cents": 200})])
        await conversations.send(workflow_id, second)
        [waiting] = await approvals(conversations, workflow_id, 1)
        assert waiting.call_id == "r2" and waiting.policy is not None
        assert waiting.policy.rule == "rest"
        carried = await conversations.history(workflow_id, start=0)
        assert len(carried) > 0
        handle = client.get_workflow_handle(workflow_id)
        held = await handle.query("history", result_type=list[Any])
        assert not any("r1" in str(item) for item in held)  # this run no longer holds r1
        await conversations.set_policy(workflow_id, ONCE_STRICT, installed_by="ops-lead")

        async def answered() -> Any:
            return outputs_by_id(await conversations.history(workflow_id)).get("r2")

        output = await eventually(answered, what="r2 answered by the re-evaluation")
    assert output.failure_kind == "denied"
    assert "one refund per conversation" in output.content
    assert [row["call_id"] for row in read_ledger(ledger)] == ["r1"]


def _asked_for_care(_args: Any, ctx: ApprovalContext) -> bool:
    """A tool's own rule that reads the transcript: gated when the user asked for care."""
    return any(isinstance(i, UserMessage) and "careful" in i.text for i in ctx.transcript)


@tool(needs_approval=_asked_for_care)
async def transfer(account: str, ctx: ToolContext) -> str:
    """Move money to an account.

    Args:
        account: The account.
    """
    record({"tool": "transfer", "call_id": ctx.call_id, "account": account})
    return f"moved to {account}"


REFUNDS_ONLY = """
name: refunds-only
rules:
  - {id: refunds, when: 'tool == "refund"', outcome: approve, groups: [finance]}
"""


async def test_a_tools_own_rule_reads_the_same_transcript_when_decided_again(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    """A version that does not decide a waiting call falls back to its tool's own
    `needs_approval`, which must see the transcript it saw at planning. It saw an
    empty one, and released a call the user had asked to be careful with."""
    workflow_id = f"live-own-{uuid.uuid4().hex[:8]}"
    plugin = DurableToolsPlugin(
        toolkits={"bank": Toolkit(transfer, refund, label="bank")},
        models={"directed": ScriptedModel(directed)},
        agents={"bank": Agent(model="directed", toolkit="bank")},
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    async with Worker(client, task_queue=task_queue):
        conversations = Conversations(client, task_queue=task_queue)
        script = json.loads(turns([("t1", "transfer", {"account": "DE-1"})]))
        message = json.dumps({**script, "note": "be careful with my money"})
        await conversations.start(workflow_id, agent=AgentConfig(name="bank"), message=message)
        [waiting] = await approvals(conversations, workflow_id, 1)
        assert waiting.call_id == "t1" and waiting.policy is None  # the tool's own rule
        await conversations.set_policy(workflow_id, REFUNDS_ONLY, installed_by="ops-lead")

        async def decided_again() -> Any:
            events, _ = await conversations.retained_events(workflow_id)
            found = [e for e in events if e.kind == "policy_reevaluated" and e.call_id == "t1"]
            return found[0] if found else None

        event = await eventually(decided_again, what="the re-evaluation's answer")
        await quiet(client.get_workflow_handle(workflow_id))
        pending = await conversations.pending(workflow_id)
        assert [a.call_id for a in pending.approvals] == ["t1"]  # still gated
        assert read_ledger(ledger) == []
        assert event.outcome is not None and not event.outcome.endswith("-> run"), event.outcome
