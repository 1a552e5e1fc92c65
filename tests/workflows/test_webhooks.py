"""Signed webhook notifications, delivered by an activity to a real receiver (issue 28).

The receiver on 127.0.0.1 fails its first two answers with HTTP 500: the
activity's retry policy delivers the event anyway, each event is accepted
exactly once, every signature verifies, and the retried id is visible as a
duplicate. The webhook's URL and secret never enter history.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, turns
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from webhook_support import SECRET, receiving
from workflow_helpers import eventually, running

from durable_tools.conversation import ConversationOptions
from durable_tools.errors import ConfigurationError
from durable_tools.webhooks import Webhook, sign, verify_signature


def test_a_signature_verifies_only_for_its_body_secret_and_time() -> None:
    header = sign(SECRET, 1_700_000_000, b'{"a":1}')
    assert verify_signature(SECRET, header, b'{"a":1}', 1_700_000_100)
    assert not verify_signature(SECRET, header, b'{"a":2}', 1_700_000_100)
    assert not verify_signature("another-secret-0123456789", header, b'{"a":1}', 1_700_000_100)
    assert not verify_signature(SECRET, header, b'{"a":1}', 1_700_001_000)  # too old
    for hostile in ["", "t=,v1=", "t=x,v1=00", "v1=abc", "t=1700000000,v1=é", "=,=,"]:
        assert not verify_signature(SECRET, hostile, b'{"a":1}', 1_700_000_000)


def test_a_webhook_is_checked_when_configured() -> None:
    for url, secret, events in [
        ("ftp://x", SECRET, {"approval_requested"}),
        ("https://x", "short", {"approval_requested"}),
        ("https://x", SECRET, {"approval_requested", "no_such_kind"}),
    ]:
        with pytest.raises(ConfigurationError):
            Webhook(url=url, secret=secret, events=events)
    hook = Webhook(url="https://x", secret=SECRET, events={"approval_requested"})
    assert hook.events == frozenset({"approval_requested"}) and SECRET not in repr(hook)


async def test_each_event_is_accepted_once_despite_two_failed_answers(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    with receiving(fail_first=2) as receiver:
        hooks = {"ops": Webhook(url=receiver.url, secret=SECRET)}
        async with running(dev_env, task_queue, ledger, webhooks=hooks) as harness:
            wf = await harness.start(
                turns(
                    [("r1", "refund", {"order": "A-1", "amount": 900})],
                    [("q1", "ask", {"question": "ok?"})],
                )
            )
            approval = await harness.wait_approval(wf, "r1")

            async def requested() -> bool:
                return ("approval_requested", "r1") in receiver.kinds()

            await eventually(requested, what="approval_requested delivered")
            await harness.conversations.approve(
                wf, "r1", arguments_hash=approval.arguments_hash, decided_by="ana"
            )
            question = await harness.wait_interaction(wf, "q1")
            await harness.conversations.answer(
                wf, "q1", "yes", arguments_hash=question.arguments_hash, answered_by="bo"
            )
            expected = [
                ("approval_requested", "r1"),
                ("approval_decided", "r1"),
                ("question_asked", "q1"),
                ("question_answered", "q1"),
            ]

            async def all_four() -> bool:
                return sorted(receiver.kinds()) == sorted(expected)

            await eventually(all_four, what="four events delivered")
            await harness.wait_outputs(wf, "r1", "q1")
            history = await harness.handles[wf].fetch_history()
            replayer = Replayer(workflows=[], plugins=[harness.plugin])
            replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert replayed.replay_failure is None  # the notify activities replay
    assert receiver.bad_signatures == 0
    # The first event's id was received three times (500, 500, 200), accepted once.
    first = next(k for k, e in receiver.accepted.items() if e["kind"] == "approval_requested")
    assert receiver.duplicates() == {first: 3}
    assert len(receiver.requests) == 6
    decided = next(e for e in receiver.accepted.values() if e["kind"] == "approval_decided")
    assert (decided["outcome"], decided["decided_by"], decided["tool"]) == (
        "approved",
        "ana",
        "refund",
    )
    answered = next(e for e in receiver.accepted.values() if e["kind"] == "question_answered")
    assert (answered["outcome"], answered["decided_by"]) == ("ok", "bo")
    # History names the webhook, never its URL or secret.
    inputs = [
        b"".join(p.data for p in e.activity_task_scheduled_event_attributes.input.payloads)
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "notify.webhook-v1"
    ]
    assert len(inputs) == 4 and all(b'"webhook":"ops"' in i for i in inputs)
    everything = history.to_json() + "".join(i.decode() for i in inputs)
    assert SECRET not in everything and receiver.url not in everything


async def test_deliveries_in_flight_are_carried_across_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receiver is down while the run continues as new: the next run delivers, once each."""
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    options = ConversationOptions(continue_as_new_after_turns=1, idle_timeout=60)
    with receiving(fail_first=10**9) as receiver:
        hooks = {"ops": Webhook(url=receiver.url, secret=SECRET)}
        async with running(dev_env, task_queue, ledger, webhooks=hooks) as harness:
            wf = await harness.start(
                turns(
                    [("r1", "refund", {"order": "A-1", "amount": 9})],
                    [("a1", "ask", {"question": "ok?"})],
                ),
                options=options,
            )
            approval = await harness.wait_approval(wf, "r1")
            await harness.conversations.approve(
                wf, "r1", arguments_hash=approval.arguments_hash, decided_by="ana"
            )
            await harness.wait_interaction(wf, "a1")  # asked in the next run
            assert receiver.accepted == {}
            receiver.fail_first = 0  # the receiver is back

            async def delivered() -> bool:
                kinds = sorted(receiver.kinds())
                return kinds == [
                    ("approval_decided", "r1"),
                    ("approval_requested", "r1"),
                    ("question_asked", "a1"),
                ]

            await eventually(delivered, what="the carried deliveries", timeout=40)
            runs = await _notified_per_run(harness.client, wf)
    # r1's request was notified by the first run and started again by a later one.
    assert b'"kind":"approval_requested"' in runs[0]
    assert any(b'"kind":"approval_requested"' in later for later in runs[1:])
    assert receiver.bad_signatures == 0
    # Each event was retried (its id seen more than once) and accepted once.
    assert set(receiver.duplicates()) >= {
        k for k, e in receiver.accepted.items() if e["call_id"] == "r1"
    }


async def _notified_per_run(client: Client, workflow_id: str) -> list[bytes]:
    """The `notify.webhook-v1` inputs each run of the conversation scheduled, first run first."""
    runs: list[bytes] = []
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        scheduled = [e.activity_task_scheduled_event_attributes for e in history.events]
        runs.append(
            b"".join(
                p.data
                for a in scheduled
                if a.activity_type.name == "notify.webhook-v1"
                for p in a.input.payloads
            )
        )
        run_id = history.events[
            0
        ].workflow_execution_started_event_attributes.continued_execution_run_id
    return runs[::-1]
