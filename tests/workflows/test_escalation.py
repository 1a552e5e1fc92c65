"""Reminders and escalation of a waiting approval, on the time-skipping server (issue 28).

A policy rule says `remind_after: 1h`, `escalate_after: 4h`, `escalate_to:
[oncall]`. The reminder and the escalation fire at those times of the
workflow's clock (event timestamps and the timers in history); the
escalation replaces the approvers, which `pending` shows; both are webhook
notifications too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, turns
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from webhook_support import SECRET, receiving
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import ConversationOptions
from durable_tools.errors import ConfigurationError
from durable_tools.escalation import EscalationState, next_step, parse_duration
from durable_tools.events import ConversationEvent
from durable_tools.policies import Policy
from durable_tools.webhooks import Webhook
from durable_tools.worker.render import approval_policy_line

POLICY = Policy.from_text("""
name: refunds
rules:
  - id: refund-large
    when: 'tool == "refund"'
    outcome: approve
    groups: [finance]
    remind_after: 1h
    escalate_after: 4h
    escalate_to: [oncall]
""")

REFUND = {"order": "A-1", "amount": 9000}


def test_durations_and_rules_are_checked() -> None:
    assert parse_duration("1h30m") == 5400 and parse_duration(90) == 90.0
    for bad in ["", "1 h", "h", "-1h", "0s", "1y", "9" * 50, True, None, [1], "1h\n", "999999d"]:
        with pytest.raises(ValueError):
            parse_duration(bad)
    for rule in [
        "{id: a, when: 'true', outcome: approve, escalate_after: 1h}",  # no escalate_to
        "{id: a, when: 'true', outcome: approve, escalate_to: [x]}",  # no escalate_after
        "{id: a, when: 'true', outcome: approve, remind_after: soon}",
    ]:
        with pytest.raises(ConfigurationError):
            Policy.from_text(f"name: p\nrules:\n  - {rule}\n")


def test_a_policy_without_escalation_keeps_its_version() -> None:
    plain = Policy.from_text("name: p\nrules:\n  - {id: a, when: 'true', outcome: run}\n")
    assert "remind_after" not in plain.text and "escalate" not in plain.text
    assert "remind_after" in POLICY.text


def test_the_next_step_after_a_carried_reminder_is_the_escalation() -> None:
    """What a new run's clock reads from the pending approval continue-as-new carried."""
    rule = POLICY.rules[0].escalation()
    assert rule is not None
    start = EscalationState.start(rule, requested_at=_epoch())
    assert next_step(start) == ("reminder", _epoch() + timedelta(hours=1))
    reminded = start.model_copy(update={"reminded_at": _epoch() + timedelta(hours=1)})
    assert next_step(reminded) == ("escalation", _epoch() + timedelta(hours=4))
    done = reminded.model_copy(update={"escalated_at": _epoch() + timedelta(hours=4)})
    assert next_step(done) is None


def _close(waited: timedelta, configured: timedelta) -> bool:
    """A timer fires at its time, give or take the task's milliseconds, never before."""
    return configured <= waited < configured + timedelta(seconds=1)


def _epoch() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)


async def test_reminder_and_escalation_fire_at_the_configured_times(
    time_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    options = ConversationOptions(approval_deadline=2 * 86400, idle_timeout=3600)
    with receiving(fail_first=0) as receiver:
        hooks = {"ops": Webhook(url=receiver.url, secret=SECRET)}
        async with running(
            time_env, task_queue, ledger, policies={"tests": POLICY}, webhooks=hooks
        ) as harness:
            _, asked, events, history = await _escalated(harness, time_env, options)
            # The recorded reminder and escalation replay deterministically.
            replayer = Replayer(workflows=[], plugins=[harness.plugin])
            replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert replayed.replay_failure is None
    assert sorted(receiver.kinds()) == [
        ("approval_escalated", "r1"),
        ("approval_expired", "r1"),
        ("approval_reminder", "r1"),
        ("approval_requested", "r1"),
    ]
    escalated = next(e for e in receiver.accepted.values() if e["kind"] == "approval_escalated")
    assert escalated["approvers"] == ["group:oncall"]
    at = {e.kind: e.at for e in events if e.call_id == "r1"}
    assert _close(at["approval_reminder"] - asked, timedelta(hours=1))
    assert _close(at["approval_escalated"] - asked, timedelta(hours=4))
    assert _close(at["approval_expired"] - asked, timedelta(days=2))
    timers = {
        e.user_metadata.summary.data.decode(): e.timer_started_event_attributes
        for e in history.events
        if e.HasField("timer_started_event_attributes")
    }
    reminder = next(t for s, t in timers.items() if s.startswith('"reminder of refund('))
    escalation = next(t for s, t in timers.items() if "to group:oncall" in s)
    # Each timer runs until its time counted from the wait's start (not from the step before).
    assert reminder.start_to_fire_timeout.ToTimedelta() == timedelta(hours=1)
    left = escalation.start_to_fire_timeout.ToTimedelta()
    assert timedelta(hours=3) - timedelta(seconds=1) < left <= timedelta(hours=3)


async def _escalated(
    harness: Harness, time_env: WorkflowEnvironment, options: ConversationOptions
) -> tuple[str, datetime, list[ConversationEvent], WorkflowHistory]:
    """Start the refund, check it is reminded and escalated, let it expire; what happened."""
    wf = await harness.start(turns([("r1", "refund", REFUND)]), options=options)
    approval = await harness.wait_approval(wf, "r1")
    asked = approval.requested_at
    assert approval.approvers == ["group:finance"]

    await time_env.sleep(5 * 3600)  # past the escalation, before the deadline

    async def escalated() -> bool:
        [pending] = (await harness.conversations.pending(wf)).approvals
        return pending.approvers == ["group:oncall"]

    await eventually(escalated, what="the approval escalated to oncall")
    [pending] = (await harness.conversations.pending(wf)).approvals
    state = pending.escalation
    assert state is not None and pending.signed
    assert state.escalated_from == ["group:finance"]
    assert state.remind_at == asked + timedelta(hours=1)
    assert state.escalate_at == asked + timedelta(hours=4)
    assert state.reminded_at is not None and state.escalated_at is not None
    assert _close(state.reminded_at - asked, timedelta(hours=1))
    assert _close(state.escalated_at - asked, timedelta(hours=4))
    line = approval_policy_line(pending)  # what `durable-tools pending` and the inbox show
    assert "; reminded " in line and "; escalated to group:oncall " in line
    assert line.endswith("(was group:finance)")

    result = await harness.result(wf)  # the 2-day deadline passes
    assert result.status == "idle_timeout"
    events = [e async for e in harness.conversations.events(wf)]
    history = await harness.handles[wf].fetch_history()
    return wf, asked, events, history
