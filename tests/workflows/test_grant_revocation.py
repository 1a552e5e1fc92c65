"""Grants end: revoked by the `revoke_grant` signal, or expired by the workflow's clock (issue 28).

A grant runs matching calls until it is revoked or expires; after that the
next matching call waits for approval again, and the calls it ran stay as
they ran. Revocations are untrusted input: whatever a client sends as
`revoke_grant` is refused (recorded) or taken, and no workflow task fails.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from agent_support import turns
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from test_untrusted_inputs import OPTIONS, workflow_task_failures
from typer.testing import CliRunner
from workflow_helpers import WAIT_SECONDS, Harness, eventually

from durable_tools.events import ConversationEvent
from durable_tools.grants import Grant, GrantRevocation, GrantScope
from durable_tools.handler_input import decode_input
from durable_tools.worker.cli import app

T = TypeVar("T")

SCOPE = GrantScope(tool="refund", arguments={"/order": "A-1"})


def _refund(call_id: str, amount: int) -> str:
    return turns([(call_id, "refund", {"order": "A-1", "amount": amount})])


async def _granted(harness: Harness, scope: GrantScope) -> str:
    """A conversation whose `r1` was approved with a grant of `scope`; `r2` ran by it."""
    wf = await harness.start(_refund("r1", 1), options=OPTIONS)
    first = await harness.wait_approval(wf, "r1")
    await harness.conversations.approve(
        wf, "r1", arguments_hash=first.arguments_hash, decided_by="ana", grant=scope
    )
    await harness.wait_outputs(wf, "r1")
    await harness.conversations.send(wf, _refund("r2", 2))
    await harness.wait_outputs(wf, "r2")  # ran by the grant, without waiting
    return wf


async def _grant(harness: Harness, wf: str) -> Grant:
    [grant] = (await harness.conversations.pending(wf)).grants
    return grant


async def test_a_revoked_grant_runs_no_later_call(
    harness: Harness, dev_env: WorkflowEnvironment
) -> None:
    conv = harness.conversations
    wf = await _granted(harness, SCOPE)
    assert (await _grant(harness, wf)).uses == ["r2"]
    address = ["--address", dev_env.client.service_client.config.target_host]
    revoked = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["grant", "revoke", wf, "g1", "--by", "bo", "--reason", "order closed", *address],
    )
    assert revoked.exit_code == 0, revoked.output

    async def is_revoked() -> bool:
        return (await _grant(harness, wf)).revoked_at is not None

    await eventually(is_revoked, what="g1 revoked")
    grant = await _grant(harness, wf)
    assert (grant.revoked_by, grant.revoke_reason, grant.uses) == ("bo", "order closed", ["r2"])
    await conv.send(wf, _refund("r3", 3))
    third = await harness.wait_approval(wf, "r3")  # the same order waits again
    await conv.revoke_grant(wf, "g1", revoked_by="cy")  # twice: refused, recorded
    await conv.revoke_grant(wf, "g7", revoked_by="cy")

    async def refusals() -> list[str] | None:
        found = [r.reason for r in (await conv.pending(wf)).rejected if r.signal == "revoke_grant"]
        return found if len(found) == 2 else None

    refused = await eventually(refusals, what="two refused revocations")
    assert refused is not None
    first, second = refused
    assert "revoked already, by bo" in first and "no grant 'g7'" in second
    shown = await asyncio.to_thread(
        CliRunner().invoke, app, ["pending", wf, *address], env={"COLUMNS": "300"}
    )
    assert "revoked by bo at" in shown.output and "order closed" in shown.output, shown.output
    await conv.deny(wf, "r3", arguments_hash=third.arguments_hash, decided_by="ana")
    outputs = await harness.wait_outputs(wf, "r3")
    assert outputs["r3"].failure_kind == "denied"
    revocations: list[ConversationEvent] = []
    async with asyncio.timeout(WAIT_SECONDS):  # the event is in the stream already
        async for event in conv.events(wf):
            if event.kind == "grant_revoked":
                revocations.append(event)
            if event.kind == "approval_decided" and event.call_id == "r3":
                break
    [event] = revocations
    assert (event.call_id, event.decided_by, event.outcome) == ("r1", "bo", "revoked")
    assert [r["call_id"] for r in harness.ledger_rows("refund")] == ["r1", "r2"]
    assert await workflow_task_failures(dev_env.client.get_workflow_handle(wf)) == []


async def test_an_expired_grant_runs_no_later_call(harness: Harness) -> None:
    seconds = 1.0
    wf = await _granted(harness, SCOPE.model_copy(update={"expires_after": seconds}))
    grant = await _grant(harness, wf)
    assert grant.expires_at is not None
    assert (grant.expires_at - grant.granted_at).total_seconds() == seconds
    # The workflow's clock is the server's: wait until the expiry has passed.
    await asyncio.sleep(max(0.0, (grant.expires_at - datetime.now(UTC)).total_seconds()) + 0.5)
    await harness.conversations.send(wf, _refund("r3", 3))
    third = await harness.wait_approval(wf, "r3")
    assert third.tool == "refund" and (await _grant(harness, wf)).uses == ["r2"]


def _raw(value: Any) -> RawValue:
    data = json.dumps(value).encode("utf-8", "surrogatepass")
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))


_texts = st.text(max_size=30) | st.sampled_from(["g1", "", "g1" * 200, "\x00", "\ud800"])
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=8,
)
_revocations = (
    st.fixed_dictionaries(
        {"grant_id": st.sampled_from(["g1", "g2"]) | _json},
        optional={"revoked_by": _json, "reason": _json, "extra": _json},
    ).map(_raw)
    | _json.map(_raw)
    | st.sampled_from(
        [
            RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"g1")),
            RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")),
            RawValue(Payload(metadata={}, data=b"")),
        ]
    )
)


def _revokes_g1(args: list[RawValue]) -> bool:
    """Whether the workflow takes this input as a revocation of g1 (it holds only g1)."""
    decoded = decode_input(args, GrantRevocation, pydantic_data_converter.payload_converter)
    return isinstance(decoded, GrantRevocation) and decoded.grant_id == "g1"


async def _deliver(harness: Harness, batch: list[list[RawValue]]) -> None:
    wf = await _granted(harness, SCOPE)
    handle = harness.client.get_workflow_handle(wf)
    for args in batch:
        await handle.signal("revoke_grant", args=args)
    await harness.conversations.send(wf, _refund("r3", 3))
    if any(_revokes_g1(args) for args in batch):
        await harness.wait_approval(wf, "r3")  # revoked: the same order waits again
    else:
        await harness.wait_outputs(wf, "r3")  # still in force: it runs by the grant
    assert await workflow_task_failures(handle) == []
    await harness.conversations.cancel(wf)


@pytest.mark.timeout(300)
async def test_hostile_revocations_never_fail_a_workflow_task(harness: Harness) -> None:
    loop = asyncio.get_running_loop()

    def on_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    @settings(
        max_examples=20,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(batch=st.lists(st.lists(_revocations, max_size=2), min_size=1, max_size=3))
    def prop(batch: list[list[RawValue]]) -> None:
        ran.append(len(batch))
        on_loop(_deliver(harness, batch))

    ran: list[int] = []
    await asyncio.to_thread(prop)
    assert len(ran) >= 20
