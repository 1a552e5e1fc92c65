"""Private wire types of `sub_agent.spend-v1`: what a sub-agent that did not finish spent.

A sub-agent that ends with a result (`finished`, `turn_limit`, ...) reports
its usage and cost in its `ConversationResult`, which the parent adds to its
own spend. One that fails, is terminated or times out has no result, so the
parent asks the worker (this activity) to read the child's `status` query
(Temporal answers a query of a closed workflow by replaying it), and adds
what it recorded; the answer is recorded in the parent's history.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, Field

from durable_tools.transcript import Usage

__all__ = [
    "SUB_AGENT_SPEND_ACTIVITY",
    "SUB_AGENT_SPEND_PATCH",
    "SubAgentSpend",
    "SubAgentSpendRead",
]

SUB_AGENT_SPEND_ACTIVITY: Final[str] = "sub_agent.spend-v1"
"""Activity type of the read of a sub-agent's spend after it ended without a result."""

SUB_AGENT_SPEND_PATCH: Final[str] = "sub-agent-failed-spend"
"""Patch id: runs recorded before it did not read a failed child's spend."""

STATUS_QUERY_TIMEOUT: Final[float] = 30.0
"""Seconds the child's `status` query may take (its worker replays the closed run)."""

SPEND_READ_TIMEOUT: Final[float] = STATUS_QUERY_TIMEOUT + 15.0
"""Seconds one attempt of the activity may take: its query, and a margin to connect."""


class SubAgentSpendRead(BaseModel):
    """Which child to read.

    Attributes:
        workflow_id: The child conversation's workflow id (its latest run
            is read: a child that continued as new carries its spend).
    """

    workflow_id: str = Field(min_length=1, max_length=1000)


class SubAgentSpend(BaseModel):
    """What the child recorded as spent over every run (`ConversationStatus`).

    Attributes:
        usage: Tokens per model name.
        cost_usd: USD, priced by the worker's `App.prices`.
    """

    usage: dict[str, Usage] = Field(default_factory=dict[str, Usage])
    cost_usd: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
