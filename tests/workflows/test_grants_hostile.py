"""Hostile grants: whatever a client attaches to a decision never fails a workflow task.

A decision's `grant` is any JSON a client sends (wrong shapes, unknown
fields, hostile pointers, lone surrogates, huge or non-finite numbers, deep
nesting), through the `decide` signal and the `decide_now` update. Each is
refused (a recorded rejection, or the update's validator) or, if it is a
valid grant covering the call, taken; then an ordinary approval runs the
call and the conversation finishes. No workflow task fails.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from agent_support import turns
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import RawValue
from test_untrusted_inputs import FINISH, OPTIONS, REFUND, workflow_task_failures
from workflow_helpers import Harness

from durable_tools.conversation import ConversationResult

T = TypeVar("T")

surrogates = st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=3)
texts = st.text(max_size=40) | surrogates | st.sampled_from(["", "/", "~", "/~2", "/a~", "\x00"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | texts
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)
pointers = st.sampled_from(["/order", "/amount", "/", "", "order", "/a/0"]) | texts
grants = (
    json_values
    | st.fixed_dictionaries(
        {
            "tool": st.sampled_from(["refund", "pay"]) | json_values,
            "arguments": st.dictionaries(
                pointers, st.sampled_from(["o1", 500]) | json_values, max_size=20
            )
            | json_values,
        },
        optional={
            "extra": json_values,
            "expires_after": st.sampled_from([60, 0.5, 0, -1, 10**9]) | scalars,
        },
    )
    | st.just(
        {"tool": "refund", "arguments": {"/order": "o1" * 600}}  # a value over 1,000 characters
    )
    | st.just({"tool": "refund", "arguments": {f"/k{i}": i for i in range(17)}})
    | st.just({"tool": "refund", "arguments": {"/order": "o1"}})  # valid: taken
)


def _raw(decision: dict[str, Any]) -> RawValue:
    data = json.dumps(decision).encode("utf-8", "surrogatepass")
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))


async def _deliver(harness: Harness, batch: list[tuple[bool, Any]]) -> None:
    wf = await harness.start(turns([("r1", "refund", REFUND)], [FINISH]), options=OPTIONS)
    digest = (await harness.wait_approval(wf, "r1")).arguments_hash
    handle = harness.client.get_workflow_handle(wf)
    decided = False
    for as_update, grant in batch:
        decision = {
            "call_id": "r1",
            "approved": True,
            "arguments_hash": digest,
            "decided_by": "eve",
            "grant": grant,
        }
        if as_update:
            try:
                await handle.execute_update("decide_now", args=[_raw(decision)])
                decided = True
            except WorkflowUpdateFailedError:
                pass
        else:
            await handle.signal("decide", args=[_raw(decision)])
    pending = await harness.conversations.pending(wf)
    if any(a.call_id == "r1" for a in pending.approvals) and not decided:
        await harness.conversations.approve(wf, "r1", arguments_hash=digest, decided_by="ana")
    result: ConversationResult = await harness.result(wf)
    assert result.status == "finished"
    assert await workflow_task_failures(handle) == []


@pytest.mark.timeout(300)
async def test_hostile_grants_never_fail_a_workflow_task(harness: Harness) -> None:
    loop = asyncio.get_running_loop()

    def on_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(batch=st.lists(st.tuples(st.booleans(), grants), min_size=1, max_size=3))
    def prop(batch: list[tuple[bool, Any]]) -> None:
        ran.append(len(batch))
        on_loop(_deliver(harness, batch))

    ran: list[int] = []
    await asyncio.to_thread(prop)
    assert len(ran) >= 25
