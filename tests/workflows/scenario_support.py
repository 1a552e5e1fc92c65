"""What the history recorders' scenarios share: options, prices, and waits on a conversation.

Used by `record_histories.py` and `policy_scenarios.py` (scripts run by
hand; see `record_histories.py`). The waits poll the conversation every
50 ms and raise `TimeoutError` naming what they waited for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from durable_tools.budgets import ModelPrice
from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions

__all__ = [
    "BUDGET_PRICES",
    "OPTIONS",
    "Scenario",
    "approval_digest",
    "holds",
    "interaction_digest",
    "until",
]

BUDGET_PRICES = {
    "metered": ModelPrice(
        input_per_million=1.0, cached_input_per_million=0.5, output_per_million=2.0
    )
}
OPTIONS = ConversationOptions(idle_timeout=1.0)

Scenario = Callable[[Conversations, str], Awaitable[None]]


async def until(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 20) -> None:
    for _ in range(int(seconds / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


async def approval_digest(c: Conversations, wid: str, call_id: str) -> str:
    async def pending() -> bool:
        return any(a.call_id == call_id for a in (await c.pending(wid)).approvals)

    await until(pending, f"approval of {call_id}")
    return next(a for a in (await c.pending(wid)).approvals if a.call_id == call_id).arguments_hash


async def interaction_digest(c: Conversations, wid: str, call_id: str) -> str:
    async def pending() -> bool:
        return any(i.call_id == call_id for i in (await c.pending(wid)).interactions)

    await until(pending, f"interaction {call_id}")
    items = (await c.pending(wid)).interactions
    return next(i for i in items if i.call_id == call_id).arguments_hash


async def holds(value: bool) -> bool:
    """`value`, awaitable: a condition for `until` computed without a query."""
    return value
