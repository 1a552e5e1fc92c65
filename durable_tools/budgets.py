"""Budgets: tokens and cost a conversation, and each of its agents, may spend.

Three kinds of value, all plain data that crosses into workflow history:

- `ModelPrice`: what a model costs, per million tokens, with cached and
  uncached input priced apart. The worker's price table
  (`App(prices={"openai:gpt-4o": ModelPrice(...)})`) stays on the worker:
  the `model.turn` activity prices each turn (`turn_cost`) and records the
  cost in its result (`ModelTurn.cost_usd`), so replay reads the recorded
  cost and a worker with another price table replays the same decisions.
- `Budget`: a limit on tokens and/or cost. A conversation's is
  `ConversationOptions.budget`; an agent's is `Agent(budget=...)` on the
  worker, reported by each model turn (`ModelTurn.budget`).
- `BudgetRaise`: the input of the `raise_budget` signal an operator sends
  while the conversation waits in state `budget_exceeded`.

The check itself (`durable_tools.workflows.budget_check`) runs in the
workflow before every model call and compares recorded spend with these
limits; see docs/policies.md, "Budgets".
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from durable_tools.transcript import Usage

__all__ = [
    "MAX_COST_USD",
    "MAX_TOKENS",
    "Budget",
    "BudgetExceeded",
    "BudgetRaise",
    "BudgetState",
    "ModelPrice",
    "Spend",
    "turn_cost",
]

MAX_TOKENS: Final[int] = 10**15
"""Largest token limit a budget or a raise accepts (a bound, so sums stay exact)."""

MAX_COST_USD: Final[float] = 1e12
"""Largest cost limit, in USD, a budget or a raise accepts."""


class ModelPrice(BaseModel):
    """What one model costs, in USD per million tokens.

    Attributes:
        input_per_million: Uncached input tokens (USD per 1,000,000).
        cached_input_per_million: Input tokens served from the provider's
            prompt cache (`Usage.cached_input_tokens`); `None` (the
            default): priced as uncached input.
        output_per_million: Generated tokens (USD per 1,000,000).

    Example:
        `ModelPrice(input_per_million=2.5, cached_input_per_million=1.25,
        output_per_million=10)` (OpenAI's gpt-4o, 2026).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_million: float = Field(ge=0, le=1e6, allow_inf_nan=False)
    cached_input_per_million: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    output_per_million: float = Field(ge=0, le=1e6, allow_inf_nan=False)


def turn_cost(usage: Usage | None, price: ModelPrice | None) -> float | None:
    """The cost of one model call in USD, or `None` when it cannot be priced.

    Args:
        usage: The call's token counts (`None`: the provider reported none).
            `cached_input_tokens` are part of `input_tokens` (`Usage`); they
            are priced at the cached price, the rest at the uncached one.
        price: The model's entry in the worker's price table (`None`: none).

    Returns:
        USD, or `None` without a price (then only token limits apply to the
        call) or without usage (0 tokens are counted).
    """
    if usage is None or price is None:
        return None
    cached = min(max(usage.cached_input_tokens, 0), max(usage.input_tokens, 0))
    uncached = max(usage.input_tokens, 0) - cached
    cached_price = (
        price.input_per_million
        if price.cached_input_per_million is None
        else price.cached_input_per_million
    )
    cost = (
        uncached * price.input_per_million
        + cached * cached_price
        + max(usage.output_tokens, 0) * price.output_per_million
    ) / 1_000_000
    return cost if math.isfinite(cost) else None


class Budget(BaseModel):
    """A limit on what a conversation (or one agent in it) may spend.

    Tokens count input (cached included) plus output tokens of every model
    call, context summaries included. Either limit alone may be set.

    Attributes:
        max_tokens: Tokens at most (`None`, the default: no token limit).
        max_cost_usd: USD at most, priced by the worker's price table
            (`None`, the default: no cost limit). Calls of a model the table
            does not price cost 0 here.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    max_cost_usd: float | None = Field(default=None, ge=0, le=MAX_COST_USD, allow_inf_nan=False)


class Spend(BaseModel):
    """What a conversation or an agent spent, and what its last model call took.

    Attributes:
        tokens: Tokens so far (input plus output).
        cost_usd: USD so far (priced calls only).
        last_tokens: Tokens of the latest model call: the estimate of the
            next call's (the transcript it reads only grows).
        last_cost_usd: USD of the latest model call.
    """

    model_config = ConfigDict(frozen=True)

    tokens: int = 0
    cost_usd: float = 0.0
    last_tokens: int = 0
    last_cost_usd: float = 0.0

    def plus(self, usage: Usage | None, cost: float | None) -> Spend:
        """This spend after one more model call (`usage`, `cost`; `None` counts 0)."""
        tokens = (usage.input_tokens + usage.output_tokens) if usage is not None else 0
        spent = cost or 0.0
        return Spend(
            tokens=self.tokens + tokens,
            cost_usd=self.cost_usd + spent,
            last_tokens=tokens,
            last_cost_usd=spent,
        )


class BudgetExceeded(BaseModel):
    """Why the conversation waits in state `budget_exceeded` (before a model call).

    Attributes:
        scope: `conversation` (`ConversationOptions.budget`) or `agent`
            (the current agent's `Agent(budget=...)`).
        agent: The agent whose model call waits.
        limit: The limit that stops it.
        spent: What the scope spent so far.
        message: One line: what was spent, the limit, the estimate of the
            next call.
        turn: The model turn that waits (from 1); for an agent tool's call,
            the turn the call belongs to.
        since: When the conversation started waiting (workflow time, UTC).
        call_id: The agent tool's call whose sub-agent waits to start
            (`None`: a model call waits).
    """

    scope: Literal["conversation", "agent"]
    agent: str
    limit: Budget
    spent: Spend
    message: str
    turn: int
    since: datetime
    call_id: str | None = None

    def what_waits(self) -> str:
        """`model turn 3` or `sub-agent call 'r1' (turn 3)`: what the stop holds back."""
        if self.call_id is None:
            return f"model turn {self.turn}"
        return f"sub-agent call {self.call_id!r} (turn {self.turn})"


class BudgetRaise(BaseModel):
    """Input of the `raise_budget` signal: new limits, and who set them.

    A field left `None` keeps its limit. A new limit replaces the old one
    (it may be lower: an operator may also tighten a budget).

    Attributes:
        scope: `conversation` (the default) or `agent` (the current agent's
            limits, for this conversation only).
        max_tokens: The new token limit.
        max_cost_usd: The new cost limit, USD.
        requested_by: Who raised it (recorded in the `budget_raised` event).
    """

    model_config = ConfigDict(extra="forbid")

    scope: Literal["conversation", "agent"] = "conversation"
    max_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    max_cost_usd: float | None = Field(default=None, ge=0, le=MAX_COST_USD, allow_inf_nan=False)
    requested_by: str = Field(default="", max_length=200)


class BudgetState(BaseModel):
    """What the loop knows of budgets and spend; carried across continue-as-new.

    Attributes:
        conversation: The conversation's limit now: `ConversationOptions.
            budget`, or what an operator raised it to (`None`: no limit).
        raised: Whether `conversation` was set by a raise (the options' no
            longer apply).
        agents: Each agent's limit now: reported by its model turns
            (`ModelTurn.budget`), or what an operator raised it to.
        raised_agents: Agents whose limit a raise set: their reported budget
            no longer replaces it.
        spent: The conversation's spend.
        spent_by_agent: Each agent's spend in this conversation.
    """

    conversation: Budget | None = None
    raised: bool = False
    agents: dict[str, Budget] = Field(default_factory=dict[str, Budget])
    raised_agents: list[str] = Field(default_factory=list[str])
    spent: Spend = Field(default_factory=Spend)
    spent_by_agent: dict[str, Spend] = Field(default_factory=dict[str, Spend])
