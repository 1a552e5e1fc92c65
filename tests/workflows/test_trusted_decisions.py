"""Invariant 8: a decision counts only from an allowed identity, for the exact digest shown.

On the real dev server: coerced, forged, early and mismatched decisions are
refused and recorded in `pending().rejected`; a tool's approvers are checked
against the groups a signed decision asserts; signatures are verified by the
`verify_decision` local activity, whose recorded verdict a replay on a new
worker (no cache, other keys) reads instead of checking again.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_support import LEDGER_ENV, TOOLKIT, directed, read_ledger, record, turns
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually, outputs_by_id, quiet

from durable_tools import ToolContext, Toolkit, tool
from durable_tools.approvals import Decision, call_digest, sign_decision
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions, RejectedDecision
from durable_tools.errors import DecisionRejected
from durable_tools.testing import ScriptedModel
from durable_tools.worker.plugin import DurableToolsPlugin

K1 = b"k1-secret-key-0123456789abcdef-k1"
K2 = b"k2-secret-key-0123456789abcdef-k2"
WRONG = b"not-the-worker-key-0123456789abc"
REFUND = {"order": "o1", "amount": 500}
PAY = {"to": "acme", "cents": 9900}


@tool(needs_approval=True, approvers=["group:finance", "user:cfo"])
async def pay(to: str, cents: int, ctx: ToolContext) -> str:
    """Pay a supplier (finance approves).

    Args:
        to: The supplier.
        cents: The amount in cents.
    """
    record({"tool": "pay", "call_id": ctx.call_id})
    return f"paid {cents} to {to}"


FINANCE = Toolkit(*TOOLKIT.tools.values(), pay, label="finance")
FINANCE_AGENT = AgentConfig(name="main", model="directed", toolkit="finance")
SIGNED = ConversationOptions(require_signed_decisions=True)


@asynccontextmanager
async def worker(
    env: WorkflowEnvironment, task_queue: str, keys: dict[str, bytes], **options: Any
) -> AsyncIterator[Client]:
    plugin = DurableToolsPlugin(
        toolkits={"finance": FINANCE},
        models={"directed": ScriptedModel(directed)},
        decision_keys=keys,
    )
    client = Client(**{**env.client.config(), "plugins": [plugin]})
    async with Worker(client, task_queue=task_queue, **options):
        yield client


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    return path


async def start(conv: Conversations, message: str, options: ConversationOptions) -> str:
    workflow_id = f"trust-{uuid.uuid4()}"
    await conv.start(workflow_id, agent=FINANCE_AGENT, message=message, options=options)
    return workflow_id


INSTANCES: dict[tuple[str, str], str] = {}
"""The `instance` of each wait `approval` saw, by (workflow id, call id): `signed` binds to it."""


async def approval(conv: Conversations, wf: str, call_id: str) -> str:
    async def probe() -> str | None:
        pending = await conv.pending(wf)
        found = next((a for a in pending.approvals if a.call_id == call_id), None)
        if found is None:
            return None
        INSTANCES[wf, call_id] = found.instance
        return found.arguments_hash

    return await eventually(probe, what=f"pending approval of {call_id!r}")


async def rejected(conv: Conversations, wf: str, n: int) -> list[RejectedDecision]:
    async def probe() -> list[RejectedDecision] | None:
        found = (await conv.pending(wf)).rejected
        return found if len(found) >= n else None

    return await eventually(probe, what=f"{n} rejected decision(s)")


async def output(conv: Conversations, wf: str, call_id: str) -> str:
    async def probe() -> str | None:
        found = outputs_by_id(await conv.history(wf)).get(call_id)
        return found.content if found is not None else None

    return await eventually(probe, what=f"output of {call_id!r}")


def ran(ledger: Path, tool_name: str) -> list[str]:
    return [r["call_id"] for r in read_ledger(ledger) if r.get("tool") == tool_name]


def signed(wf: str, call_id: str, digest: str, **kwargs: Any) -> Decision:
    fields: dict[str, Any] = {"approved": True, "decided_by": "ana", "groups": ["finance"]}
    return sign_decision(
        kwargs.pop("key_id", "k1"),
        kwargs.pop("key", K1),
        workflow_id=wf,
        call_id=call_id,
        arguments_hash=digest,
        **{"instance": INSTANCES.get((wf, call_id), ""), **fields, **kwargs},
    )


# ----------------------------------------------------------------- coerced


async def test_coerced_and_unknown_fields_are_refused(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with worker(dev_env, task_queue, {"k1": K1}) as client:
        conv = Conversations(client, task_queue=task_queue)
        wf = await start(conv, turns([("r1", "refund", REFUND)]), ConversationOptions())
        digest = await approval(conv, wf, "r1")
        handle = client.get_workflow_handle(wf)
        base = {"call_id": "r1", "arguments_hash": digest}

        # The raw client: a JSON string and an unknown field.
        await handle.signal("decide", {**base, "approved": "yes"})
        await handle.signal("decide", {**base, "approved": True, "approve": True})
        # The temporal CLI, as an operator would type it.
        address = dev_env.client.service_client.config.target_host
        temporal = str(Path(sys.executable).parent / "temporal")
        sent = subprocess.run(
            [temporal, "workflow", "signal", "--address", address, "-w", wf, "--name", "decide",
             "--input", json.dumps({**base, "approved": 1})],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr

        found = await rejected(conv, wf, 3)
        reasons = [r.reason for r in found]
        assert "approved: Input should be a valid boolean" in reasons[0]
        assert "approve: Extra inputs are not permitted" in reasons[1]
        assert "approved: Input should be a valid boolean" in reasons[2]
        assert all(r.call_id == "r1" and r.signal == "decide" for r in found)

        # The update validator refuses the same inputs; an answer too.
        with pytest.raises(WorkflowUpdateFailedError) as failure:
            await handle.execute_update("decide_now", {**base, "approved": "yes"})
        assert "valid boolean" in str(failure.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as failure:
            await handle.execute_update(
                "answer_now", {**base, "value": "x", "answered_by": "a", "extra": 1}
            )
        assert "Extra inputs are not permitted" in str(failure.value.cause)

        assert [a.call_id for a in (await conv.pending(wf)).approvals] == ["r1"]
        assert ran(ledger, "refund") == []
        await handle.terminate("test over")


# ------------------------------------------------------ mismatched and early


def _old_arguments_hash(arguments: dict[str, Any]) -> str:
    """The hash decisions carried before the digest covered the tool and call id."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


async def test_mismatched_and_early_decisions_are_refused_and_recorded(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with worker(dev_env, task_queue, {"k1": K1}) as client:
        conv = Conversations(client, task_queue=task_queue)
        wf = await start(conv, "", ConversationOptions())
        # Early: an approval for a call the model has not made yet, with the
        # exact digest it will have. Nobody could have seen it: refused.
        await conv.approve(wf, "r1", arguments_hash=call_digest("refund", "r1", REFUND))
        [early] = await rejected(conv, wf, 1)
        assert early.call_id == "r1" and "unknown call id 'r1'" in early.reason

        await conv.send(wf, turns([("r1", "refund", REFUND)]))
        digest = await approval(conv, wf, "r1")
        assert digest == call_digest("refund", "r1", json.dumps(REFUND, indent=2))
        wrong = {
            "other arguments": call_digest("refund", "r1", {**REFUND, "amount": 50_000}),
            "other tool": call_digest("pay", "r1", REFUND),
            "other call id": call_digest("refund", "r2", REFUND),
            "arguments only": _old_arguments_hash(REFUND),
        }
        for case, bad in wrong.items():
            await conv.approve(wf, "r1", arguments_hash=bad, decided_by=case)
        found = await rejected(conv, wf, 1 + len(wrong))
        for record_, case in zip(found[1:], wrong, strict=True):
            assert record_.decided_by == case and "hash does not match" in record_.reason
        for case, bad in wrong.items():
            with pytest.raises(DecisionRejected, match="hash does not match"):
                await conv.approve(wf, "r1", arguments_hash=bad, decided_by=case, wait=True)

        # Still waiting, nothing ran; the digest shown approves it.
        assert [a.call_id for a in (await conv.pending(wf)).approvals] == ["r1"]
        assert ran(ledger, "refund") == []
        await conv.approve(wf, "r1", arguments_hash=digest, decided_by="ana")
        assert await output(conv, wf, "r1") == "refunded 500 on o1"
        assert ran(ledger, "refund") == ["r1"]
        await client.get_workflow_handle(wf).terminate("test over")


async def test_early_decisions_when_accepted_apply_only_to_the_matching_digest(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with worker(dev_env, task_queue, {"k1": K1}) as client:
        conv = Conversations(client, task_queue=task_queue)
        wf = await start(conv, "", ConversationOptions(accept_early_decisions=True))
        await conv.approve(wf, "r1", arguments_hash=call_digest("refund", "r1", REFUND))
        # Same call id, but shown as another tool: kept, then refused on arrival.
        await conv.approve(wf, "r2", arguments_hash=call_digest("pay", "r2", REFUND))
        assert (await conv.pending(wf)).rejected == []
        await conv.send(wf, turns([("r1", "refund", REFUND), ("r2", "refund", REFUND)]))
        assert await output(conv, wf, "r1") == "refunded 500 on o1"
        await approval(conv, wf, "r2")
        [refused] = await rejected(conv, wf, 1)
        assert refused.call_id == "r2" and "hash does not match" in refused.reason
        assert ran(ledger, "refund") == ["r1"]
        await client.get_workflow_handle(wf).terminate("test over")


# --------------------------------------------------- signatures and approvers


async def test_signed_decisions_forged_replayed_and_outsiders_refused_also_after_replay(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with worker(dev_env, task_queue, {"k1": K1}) as client:
        conv = Conversations(client, task_queue=task_queue)
        wf = await start(
            conv, turns([("r1", "refund", REFUND), ("p1", "pay", PAY), ("p2", "pay", PAY)]), SIGNED
        )
        other = await start(conv, turns([("p1", "pay", PAY)]), SIGNED)
        r1 = await approval(conv, wf, "r1")
        p1 = await approval(conv, wf, "p1")
        p2 = await approval(conv, wf, "p2")
        assert p1 == await approval(conv, other, "p1")  # same tool, call id, arguments
        state = await conv.pending(wf)
        [pending_p1] = [a for a in state.approvals if a.call_id == "p1"]
        assert pending_p1.approvers == ["group:finance", "user:cfo"] and pending_p1.signed

        # Forged: unsigned (the conversation requires signatures), a key the
        # worker does not hold, an unknown key id, a tampered verdict.
        await conv.approve(wf, "r1", arguments_hash=r1, decided_by="mallory")
        await conv.send_decision(wf, signed(wf, "r1", r1, key=WRONG, decided_by="wrong-key"))
        await conv.send_decision(wf, signed(wf, "r1", r1, key_id="k9", decided_by="k9"))
        denial = signed(wf, "r1", r1, approved=False, decided_by="flip")
        await conv.send_decision(wf, denial.model_copy(update={"approved": True}))
        # Outside the approvers: signed, but for the support group only; and
        # a finance claim without a signature.
        await conv.send_decision(wf, signed(wf, "p1", p1, decided_by="bob", groups=["support"]))
        await conv.approve(wf, "p1", arguments_hash=p1, decided_by="eve", groups=["finance"])
        found = await rejected(conv, wf, 6)
        reasons = {r.decided_by: r.reason for r in found}
        assert "needs a signed decision" in reasons["mallory"]
        assert "invalid signature (key id 'k1')" in reasons["wrong-key"]
        assert "unknown key id 'k9'" in reasons["k9"]
        assert "invalid signature" in reasons["flip"]
        assert "not among the approvers" in reasons["bob"]
        assert "needs a signed decision" in reasons["eve"]
        with pytest.raises(DecisionRejected, match="invalid signature"):
            await conv.send_decision(wf, signed(wf, "r1", r1, key=WRONG), wait=True)
        with pytest.raises(DecisionRejected, match="not among the approvers"):
            await conv.send_decision(
                wf, signed(wf, "p1", p1, decided_by="bob", groups=["support"]), wait=True
            )
        assert ran(ledger, "refund") == [] and ran(ledger, "pay") == []

        # Accepted: signed by the worker's key, by a finance member / the cfo.
        await conv.send_decision(wf, signed(wf, "r1", r1, decided_by="ana", groups=[]))
        good_p1 = signed(wf, "p1", p1)
        await conv.send_decision(wf, good_p1)
        assert await output(conv, wf, "r1") == "refunded 500 on o1"
        assert await output(conv, wf, "p1") == "paid 9900 to acme"

        # Replayed to another call: the p1 decision re-aimed at p2 (its digest
        # too), and sent unchanged to another conversation with the same call.
        moved = good_p1.model_copy(update={"call_id": "p2", "arguments_hash": p2})
        await conv.send_decision(wf, moved)
        await conv.send_decision(other, good_p1)
        replayed = await rejected(conv, wf, 8)
        assert replayed[-1].call_id == "p2" and "invalid signature" in replayed[-1].reason
        [in_other] = await rejected(conv, other, 1)
        assert in_other.call_id == "p1" and "signed for another wait" in in_other.reason
        assert ran(ledger, "pay") == ["p1"]
        before = (await conv.pending(wf)).rejected

    # A new worker on the same task queue, no cache (every task replays the
    # whole history), holding another key only: the recorded verdicts stand.
    # Its queries are asked once the run is quiet: on a worker without a cache
    # a query that meets a workflow task or another query of the run can be
    # dropped (see `quiet`; measured: the run done in 0.7 s, the query's
    # caller waiting 30 s).
    async with worker(dev_env, task_queue, {"k2": K2}, max_cached_workflows=0) as client:
        conv = Conversations(client, task_queue=task_queue)
        handle = client.get_workflow_handle(wf)
        await quiet(handle)
        assert (await conv.pending(wf)).rejected == before
        assert [a.call_id for a in (await conv.pending(wf)).approvals] == ["p2"]
        # k1 is no longer held: refused; the cfo signing with k2 is accepted.
        await conv.send_decision(wf, signed(wf, "p2", p2, decided_by="k1-after-rotation"))
        await quiet(handle)
        late = (await conv.pending(wf)).rejected
        assert len(late) == len(before) + 1 and "unknown key id 'k1'" in late[-1].reason
        await conv.send_decision(
            wf, signed(wf, "p2", p2, key_id="k2", key=K2, decided_by="cfo", groups=[])
        )
        await quiet(handle)
        assert outputs_by_id(await conv.history(wf))["p2"].content == "paid 9900 to acme"
        assert ran(ledger, "pay") == ["p1", "p2"] and ran(ledger, "refund") == ["r1"]
        events = [e async for e in handle.fetch_history_events()]
        assert not [e for e in events if e.HasField("workflow_task_failed_event_attributes")]
        for workflow_id in (wf, other):
            await client.get_workflow_handle(workflow_id).terminate("test over")


async def test_a_worker_without_keys_refuses_every_signed_decision(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with worker(dev_env, task_queue, {}) as client:
        conv = Conversations(client, task_queue=task_queue)
        wf = await start(conv, turns([("p1", "pay", PAY)]), ConversationOptions())
        p1 = await approval(conv, wf, "p1")
        await conv.send_decision(wf, signed(wf, "p1", p1))
        [refused] = await rejected(conv, wf, 1)
        assert "no decision keys are configured on the worker" in refused.reason
        assert ran(ledger, "pay") == []
        await client.get_workflow_handle(wf).terminate("test over")


async def test_cli_signs_with_a_key_from_the_environment(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from durable_tools.worker.cli import app

    monkeypatch.setenv("APPROVER_KEY", base64.b64encode(K1).decode())
    address = dev_env.client.service_client.config.target_host
    runner = CliRunner()

    def approve(*extra: str) -> Any:
        args = ["approve", wf, "p1", "--hash", p1, "--signal", "--address", address, *extra]
        return runner.invoke(app, args)

    async with worker(dev_env, task_queue, {"k1": K1}) as client:
        conv = Conversations(client, task_queue=task_queue)
        wf = await start(conv, turns([("p1", "pay", PAY)]), ConversationOptions())
        p1 = await approval(conv, wf, "p1")
        unsigned = await asyncio.to_thread(approve, "--as", "ana")
        assert unsigned.exit_code == 0, unsigned.output
        [refused] = await rejected(conv, wf, 1)
        assert "needs a signed decision" in refused.reason
        outsider = await asyncio.to_thread(
            approve, "--as", "bob", "--key-env", "APPROVER_KEY", "--key-id", "k1"
        )
        assert outsider.exit_code == 0, outsider.output
        second = await rejected(conv, wf, 2)
        assert "not among the approvers" in second[-1].reason
        accepted = await asyncio.to_thread(
            approve,
            "--as",
            "ana",
            "--group",
            "finance",
            "--key-env",
            "APPROVER_KEY",
            "--key-id",
            "k1",
        )
        assert accepted.exit_code == 0 and "signed with key k1" in accepted.stdout
        assert await output(conv, wf, "p1") == "paid 9900 to acme"
        assert ran(ledger, "pay") == ["p1"]
        await client.get_workflow_handle(wf).terminate("test over")


async def test_early_answers_are_refused_unless_accepted(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    question = {"question": "Proceed?"}
    async with worker(dev_env, task_queue, {"k1": K1}) as client:
        conv = Conversations(client, task_queue=task_queue)
        for accept in (False, True):
            options = ConversationOptions(accept_early_decisions=accept)
            wf = await start(conv, "", options)
            digest = call_digest("ask", "q1", question)
            await conv.answer(wf, "q1", "yes", arguments_hash=digest, answered_by="early")
            await conv.send(wf, turns([("q1", "ask", question)]))
            if accept:
                assert await output(conv, wf, "q1") == "yes"
                assert (await conv.pending(wf)).rejected == []
            else:
                [refused] = await rejected(conv, wf, 1)
                assert refused.decided_by == "early" and "unknown call id 'q1'" in refused.reason

                async def asked(workflow_id: str = wf) -> bool:
                    return bool((await conv.pending(workflow_id)).interactions)

                await eventually(asked, what="the question")
            await client.get_workflow_handle(wf).terminate("test over")


async def test_accepted_early_decisions_still_need_a_valid_signature(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    async with worker(dev_env, task_queue, {"k1": K1}) as client:
        conv = Conversations(client, task_queue=task_queue)
        wf = await start(conv, "", ConversationOptions(accept_early_decisions=True))
        p1, p2 = call_digest("pay", "p1", PAY), call_digest("pay", "p2", PAY)
        # Before the call waits, a signer can bind a decision to the run only.
        run = (await client.get_workflow_handle(wf).describe()).run_id
        await conv.send_decision(wf, signed(wf, "p1", p1, instance=run))
        await conv.send_decision(
            wf, signed(wf, "p2", p2, key=WRONG, decided_by="forger", instance=run)
        )
        assert (await conv.pending(wf)).rejected == []  # kept until the calls exist
        await conv.send(wf, turns([("p1", "pay", PAY), ("p2", "pay", PAY)]))
        assert await output(conv, wf, "p1") == "paid 9900 to acme"
        [refused] = await rejected(conv, wf, 1)
        assert refused.call_id == "p2" and "invalid signature" in refused.reason
        assert [a.call_id for a in (await conv.pending(wf)).approvals] == ["p2"]
        assert ran(ledger, "pay") == ["p1"]
        await client.get_workflow_handle(wf).terminate("test over")


async def test_a_captured_decision_replayed_into_a_reused_workflow_id_is_rejected(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    """Issue 23: the signature covered the workflow id and call id but not the run.

    A conversation ends; its workflow id is reused for a new one whose model
    repeats the call id and arguments (scripted models, synthesized ids), so
    the digest is the same. The decision captured from the first conversation
    is refused in the second, as is one made outside the call's wait or whose
    reason (what the model reads) was changed after signing.
    """
    async with worker(dev_env, task_queue, {"k1": K1}) as client:
        conv = Conversations(client, task_queue=task_queue)
        wf = await start(conv, turns([("p1", "pay", PAY)]), SIGNED)
        digest = await approval(conv, wf, "p1")
        captured = signed(wf, "p1", digest)
        await conv.send_decision(wf, captured)
        assert await output(conv, wf, "p1") == "paid 9900 to acme"
        await client.get_workflow_handle(wf).terminate("first conversation over")

        await conv.start(
            wf, agent=FINANCE_AGENT, message=turns([("p1", "pay", PAY)]), options=SIGNED
        )
        assert await approval(conv, wf, "p1") == digest  # the same call, the same digest
        await conv.send_decision(wf, captured)
        stale = signed(wf, "p1", digest, decided_at=datetime.now(UTC) - timedelta(days=2))
        await conv.send_decision(wf, stale)
        denial = signed(wf, "p1", digest, approved=False, reason="over budget", decided_by="d")
        await conv.send_decision(wf, denial.model_copy(update={"reason": "approve it anyway"}))
        found = await rejected(conv, wf, 3)
        assert "signed for another wait" in found[0].reason and found[0].decided_by == "ana"
        assert "outside the call's wait" in found[1].reason  # made two days before it
        assert "invalid signature" in found[2].reason  # the reason changed after signing
        with pytest.raises(DecisionRejected, match="outside the call's wait"):
            await conv.send_decision(wf, stale, wait=True)
        with pytest.raises(DecisionRejected, match="signed for another wait"):
            await conv.send_decision(wf, captured, wait=True)
        assert ran(ledger, "pay") == ["p1"]  # the first conversation's only

        # The decision for this wait is taken.
        await conv.send_decision(wf, signed(wf, "p1", digest))
        assert await output(conv, wf, "p1") == "paid 9900 to acme"
        assert ran(ledger, "pay") == ["p1", "p1"]
        await client.get_workflow_handle(wf).terminate("test over")
