"""Grants: "approve for the rest of this conversation", scoped to a tool and arguments (issue 28).

An approval with a grant (`refund` where `/order == "A-1"`) lets later
matching calls of the conversation run without waiting, the grant recorded
with them; other calls still wait. Grants are carried across
continue-as-new (this conversation continues as new after every turn).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, turns
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from workflow_helpers import eventually, running

from durable_tools.conversation import ConversationOptions
from durable_tools.grants import GrantScope, describe_scope, scope_matches


def test_a_scope_matches_by_pointer_and_json_type() -> None:
    scope = GrantScope(tool="refund", arguments={"/order": "A-1", "/n": 5, "/a~1b": True})
    assert scope_matches(scope, "refund", '{"order": "A-1", "n": 5.0, "a/b": true, "x": 1}')
    assert not scope_matches(scope, "refund", '{"order": "A-1", "n": 5, "a/b": 1}')
    assert not scope_matches(scope, "refund", '{"order": "A-2", "n": 5, "a/b": true}')
    assert not scope_matches(scope, "refund", '{"order": "A-1", "n": 5}')
    assert not scope_matches(scope, "pay", '{"order": "A-1", "n": 5, "a/b": true}')
    assert not scope_matches(scope, "refund", "[1]")
    assert not scope_matches(scope, "refund", "{" * 100_000)
    nested = GrantScope(tool="pay", arguments={"/to/0": "acme"})
    assert scope_matches(nested, "pay", '{"to": ["acme"]}')
    assert not scope_matches(nested, "pay", '{"to": {"0": 1}}')
    assert scope_matches(GrantScope(tool="pay"), "pay", '{"anything": 1}')
    assert describe_scope(scope) == 'refund where /a~1b == true and /n == 5 and /order == "A-1"'


async def _summaries(
    client: Client, workflow_id: str, histories: list[WorkflowHistory] | None = None
) -> list[str]:
    """The `tool.refund` activity summaries of every run of the conversation, newest run first."""
    summaries: list[str] = []
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        if histories is not None:
            histories.append(history)
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and (
                e.activity_task_scheduled_event_attributes.activity_type.name == "tool.refund"
            ):
                summaries.append(e.user_metadata.summary.data.decode())
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id
    return summaries


async def test_a_granted_call_runs_without_waiting_across_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    options = ConversationOptions(continue_as_new_after_turns=1, idle_timeout=60)
    async with running(dev_env, task_queue, ledger) as harness:
        conv = harness.conversations
        wf = await harness.start(
            turns(
                [("r1", "refund", {"order": "A-1", "amount": 100})],
                [("r2", "refund", {"order": "A-1", "amount": 250})],
                [("r3", "refund", {"order": "B-2", "amount": 100})],
            ),
            options=options,
        )
        first = await harness.wait_approval(wf, "r1")
        scope = GrantScope(tool="refund", arguments={"/order": "A-1"})
        # A grant whose pattern does not cover the call it approves is refused.
        await conv.approve(
            wf,
            "r1",
            arguments_hash=first.arguments_hash,
            decided_by="ana",
            grant=GrantScope(tool="refund", arguments={"/order": "Z-9"}),
        )

        async def refused() -> bool:
            return any("does not match" in r.reason for r in (await conv.pending(wf)).rejected)

        await eventually(refused, what="the mismatched grant rejected")
        await conv.approve(
            wf, "r1", arguments_hash=first.arguments_hash, decided_by="ana", grant=scope
        )
        third = await harness.wait_approval(wf, "r3")  # B-2: not covered, it waits
        pending = await conv.pending(wf)
        assert [a.call_id for a in pending.approvals] == ["r3"]
        [grant] = pending.grants
        assert (grant.id, grant.granted_by, grant.call_id) == ("g1", "ana", "r1")
        assert grant.scope == scope and grant.uses == ["r2"]
        await conv.deny(wf, "r3", arguments_hash=third.arguments_hash, decided_by="ana")
        outputs = await harness.wait_outputs(wf, "r1", "r2", "r3")
        histories: list[WorkflowHistory] = []
        summaries = await _summaries(dev_env.client, wf, histories)
        replayer = Replayer(workflows=[], plugins=[harness.plugin])
        for history in histories:  # each run, grants taken, carried and used, replays
            replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert replayed.replay_failure is None
    assert outputs["r2"].content == "refunded 250 on A-1"
    assert outputs["r3"].failure_kind == "denied"
    assert [r["call_id"] for r in harness.ledger_rows("refund")] == ["r1", "r2"]
    granted, approved = summaries  # r2's run continued r1's
    assert "[grant" not in approved
    assert "[grant g1 by ana at " in granted and 'refund where /order == \\"A-1\\"' in granted


def test_the_recorded_history_holds_the_escalation_and_the_grant() -> None:
    """`histories/grants_escalation.json` (replayed by test_agent_workflow_replay.py)."""
    path = Path(__file__).parent / "histories" / "grants_escalation.json"
    history = WorkflowHistory.from_json("grants_escalation", path.read_text())
    summaries = [
        e.user_metadata.summary.data.decode()
        for e in history.events
        if e.event_type
        in (EventType.EVENT_TYPE_TIMER_STARTED, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    ]
    assert any(s.startswith("\"reminder of refund(order='policy-escalate'") for s in summaries)
    assert any("to group:oncall" in s for s in summaries)
    assert sum("[grant g1 by ana at " in s for s in summaries) == 1  # g2 ran by the grant
