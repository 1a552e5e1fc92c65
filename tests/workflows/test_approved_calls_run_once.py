"""Retry defaults follow the effect, on the Temporal dev server (issue 10, item 7).

An approved refund that raises after the money moved must not be repeated:
a tool that needs approval runs at most once unless it is declared
idempotent. Both tools below write a ledger row (the side effect) and then
raise on their first attempt.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, record, turns
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import running

from durable_tools import RetryPolicy, ToolContext, Toolkit, tool
from durable_tools.conversation import AgentConfig


@tool(needs_approval=True)
async def charge(order: str, ctx: ToolContext) -> str:
    """Charge an order (a person approves); the gateway drops the answer.

    Args:
        order: Order id.
    """
    record({"tool": "charge", "attempt": ctx.attempt, "key": ctx.idempotency_key})
    raise ConnectionError(f"gateway reset after charging {order}")


@tool(needs_approval=True, idempotent=True)
async def charge_once_per_key(order: str, ctx: ToolContext) -> str:
    """Charge an order through an API that deduplicates by idempotency key.

    Args:
        order: Order id.
    """
    record({"tool": "charge_once_per_key", "attempt": ctx.attempt, "key": ctx.idempotency_key})
    if ctx.attempt == 1:
        raise ConnectionError(f"gateway reset after charging {order}")
    return f"charged {order}"


KIT = Toolkit(charge, charge_once_per_key, label="payments")
AGENT = AgentConfig(name="payments", model="directed", toolkit="payments")


async def test_an_approved_tool_that_raises_after_its_side_effect_is_not_run_again(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    assert charge.retry is None and charge_once_per_key.retry is None  # the defaults decide
    assert charge_once_per_key.retry_policy_for(gated=True) == RetryPolicy()
    async with running(dev_env, task_queue, ledger, toolkits={"payments": KIT}) as h:
        workflow_id = await h.start(
            turns(
                [
                    ("c1", "charge", {"order": "A-1"}),
                    ("c2", "charge_once_per_key", {"order": "A-2"}),
                ]
            ),
            agent=AGENT,
        )
        for call_id in ("c1", "c2"):
            approval = await h.wait_approval(workflow_id, call_id)
            await h.conversations.approve(
                workflow_id, call_id, arguments_hash=approval.arguments_hash, decided_by="ops"
            )
        outputs = await h.wait_outputs(workflow_id, "c1", "c2", timeout=60)
        await h.wait_assistant_text(workflow_id, "done (directed)")
        history = await h.client.get_workflow_handle(workflow_id).fetch_history()
        rows = h.ledger_rows()

    # Not idempotent: one attempt, and the model gets a Failure.
    charged = outputs["c1"]
    assert charged.is_error and charged.failure_kind == "execution_error", charged
    assert "gateway reset after charging A-1" in charged.content
    assert "attempts" not in charged.content  # no "after 3 attempts"
    assert [r["attempt"] for r in rows if r["tool"] == "charge"] == [1]
    # Declared idempotent: retried with the default policy, succeeds on attempt 2.
    assert not outputs["c2"].is_error, outputs["c2"]
    assert "charged A-2" in outputs["c2"].content
    once = [r for r in rows if r["tool"] == "charge_once_per_key"]
    assert [r["attempt"] for r in once] == [1, 2]
    assert len({r["key"] for r in once}) == 1  # the same idempotency key on each attempt

    # What Temporal was told: maximum_attempts 1 for `charge`, 3 for the idempotent one.
    policies = {
        e.activity_task_scheduled_event_attributes.activity_type.name: (
            e.activity_task_scheduled_event_attributes.retry_policy.maximum_attempts
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert policies["tool.charge"] == 1
    assert policies["tool.charge_once_per_key"] == 3
