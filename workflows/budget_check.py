"""Budgets checked before each model call, and the wait while one is spent.

`BudgetCheck` holds what the loop knows of budgets (`BudgetState`, carried
across continue-as-new): the conversation's limit (`ConversationOptions.
budget`, or what an operator raised it to), each agent's (reported by its
model turns, `ModelTurn.budget`), and what was spent, as recorded in the
model turns' results (`Usage`, `ModelTurn.cost_usd`: priced on the worker,
so replay never reads a price table). Before each model call the loop asks
`before_call`: when the spend so far plus the estimate of the next call (the
previous call's spend) would pass a limit, the conversation waits in state
`budget_exceeded` until the `raise_budget` signal sets limits it fits in, or
the conversation is cancelled. Everything here is a pure function of
recorded history: the same stop on every replay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import workflow

from durable_tools.workflows.visibility import Visibility
from durable_tools.workflows.waits import Waits

with workflow.unsafe.imports_passed_through():
    from durable_tools import telemetry
    from durable_tools._wire import CarriedState, ModelTurn
    from durable_tools.budgets import Budget, BudgetExceeded, BudgetRaise, BudgetState, Spend
    from durable_tools.conversation import ConversationOptions
    from durable_tools.handler_input import clean_sender
    from durable_tools.transcript import Usage

__all__ = ["BudgetCheck", "over_budget"]


def _tokens(value: int) -> str:
    return f"{value:,} tokens"


def over_budget(limit: Budget, spent: Spend) -> str | None:
    """Why the next model call does not fit in `limit` (one line), or `None` when it does.

    A call does not fit when the limit is reached (`spent` at or over it) or
    when `spent` plus the estimate of the next call (`Spend.last_tokens`,
    `Spend.last_cost_usd`: the previous call's) would pass it.

    Args:
        limit: The limit.
        spent: What its scope spent so far.

    Returns:
        E.g. `1,200 tokens spent + ~400 for the next call > limit 1,500 tokens`.
    """
    if limit.max_tokens is not None:
        ahead = spent.tokens + spent.last_tokens
        if spent.tokens >= limit.max_tokens or ahead > limit.max_tokens:
            return (
                f"{_tokens(spent.tokens)} spent + ~{spent.last_tokens:,} for the next call"
                f" > limit {_tokens(limit.max_tokens)}"
            )
    if limit.max_cost_usd is not None:
        ahead_usd = spent.cost_usd + spent.last_cost_usd
        if spent.cost_usd >= limit.max_cost_usd or ahead_usd > limit.max_cost_usd:
            return (
                f"{spent.cost_usd:.4f} USD spent + ~{spent.last_cost_usd:.4f} for the next call"
                f" > limit {limit.max_cost_usd:.4f} USD"
            )
    return None


class BudgetCheck:
    """The conversation's budgets, its spend, and the `budget_exceeded` wait.

    Args:
        options: The conversation's options (`budget`).
        state: The carried state (`CarriedState.budget`; `None` on a
            conversation's first run and in runs recorded before budgets).
        view: The loop's state and events.
        waits: The run's durable waits.
        publish: Publishes what is pending.
    """

    def __init__(
        self,
        options: ConversationOptions,
        state: CarriedState,
        *,
        view: Visibility,
        waits: Waits,
        publish: Callable[[], None],
    ) -> None:
        self.state: BudgetState = state.budget or BudgetState(conversation=options.budget)
        self.exceeded: BudgetExceeded | None = None
        self._view, self._waits, self._publish = view, waits, publish
        self._raised = False

    def carried(self) -> dict[str, Any]:
        """The `CarriedState` field (`None` while nothing was limited or spent)."""
        return {"budget": None if self.state == BudgetState() else self.state}

    def record(self, agent: str, turn: ModelTurn) -> None:
        """Add a model turn's usage (its summary's too) and recorded cost to the spend.

        The agent's budget the turn reported replaces the one known, unless
        an operator set this agent's limit (`raise_budget`).
        """
        usage: Usage | None = turn.message.usage
        if turn.summary is not None and turn.summary.usage is not None:
            usage = turn.summary.usage if usage is None else usage + turn.summary.usage
        state = self.state
        by_agent = dict(state.spent_by_agent)
        by_agent[agent] = by_agent.get(agent, Spend()).plus(usage, turn.cost_usd)
        agents = dict(state.agents)
        if agent not in state.raised_agents:
            if turn.budget is None:
                agents.pop(agent, None)
            else:
                agents[agent] = turn.budget
        self.state = state.model_copy(
            update={
                "spent": state.spent.plus(usage, turn.cost_usd),
                "spent_by_agent": by_agent,
                "agents": agents,
            }
        )

    def check(self, agent: str, turn: int) -> BudgetExceeded | None:
        """The reason the next model call of `agent` (turn `turn`) waits, or `None`."""
        state = self.state
        scopes: list[tuple[str, Budget | None, Spend]] = [
            ("conversation", state.conversation, state.spent),
            ("agent", state.agents.get(agent), state.spent_by_agent.get(agent, Spend())),
        ]
        for scope, limit, spent in scopes:
            if limit is None:
                continue
            why = over_budget(limit, spent)
            if why is not None:
                name = "the conversation's" if scope == "conversation" else f"agent {agent!r}'s"
                return BudgetExceeded(
                    scope="conversation" if scope == "conversation" else "agent",
                    agent=agent,
                    limit=limit,
                    spent=spent,
                    message=f"{name} budget: {why}",
                    turn=turn,
                    since=workflow.now(),
                )
        return None

    async def before_call(self, agent: str, turn: int) -> bool:
        """Wait while the next model call does not fit; False when the run moves first.

        Args:
            agent: The agent whose model call comes next.
            turn: That call's turn number.

        Returns:
            True: the call may run. False: a new worker version is due while
            waiting (the loop continues as new; the next run checks again).

        Raises:
            asyncio.CancelledError: The conversation was cancelled while waiting.
        """
        return await self._until_fits(agent, turn, self._waits.move_due, None)

    async def before_sub_agent(
        self, agent: str, turn: int, call_id: str, stop: Callable[[], bool]
    ) -> bool:
        """Wait while the conversation's spend does not let a sub-agent start.

        The same check as before a model call of `agent` (`check`), made
        before an agent tool's call starts its child conversation.

        Args:
            agent: The calling agent.
            turn: The turn of the call.
            call_id: The call (named in the `budget_exceeded` event).
            stop: Ends the wait early (a move to a new run, a new message).

        Returns:
            True: the sub-agent may start. False: `stop()` held first.

        Raises:
            asyncio.CancelledError: The conversation was cancelled while waiting.
        """
        return await self._until_fits(agent, turn, stop, call_id)

    async def _until_fits(
        self, agent: str, turn: int, stop: Callable[[], bool], call_id: str | None
    ) -> bool:
        waited = False
        while (exceeded := self.check(agent, turn)) is not None:
            if call_id is not None:
                exceeded = exceeded.model_copy(update={"call_id": call_id})
            if self.exceeded is None or self.exceeded.message != exceeded.message:
                if call_id is None:
                    self._view.event(
                        "budget_exceeded", turn=turn, agent=agent, reason=exceeded.message
                    )
                else:
                    self._view.event(
                        "budget_exceeded",
                        turn=turn,
                        agent=agent,
                        call_id=call_id,
                        reason=exceeded.message,
                    )
                telemetry.record_budget_exceeded(exceeded.scope, agent)
                workflow.logger.info("%s waits: %s", exceeded.what_waits(), exceeded.message)
            self.exceeded, waited, self._raised = exceeded, True, False
            self._view.state = "budget_exceeded"
            self._publish()
            try:
                await self._waits.wait(
                    lambda: stop() or self._raised,
                    None,
                    "budget_exceeded: waiting for raise_budget or cancel",
                )
            except asyncio.CancelledError:
                self.exceeded = None
                raise
            if stop():
                if call_id is not None:  # the model call's run continues as new right away
                    self.exceeded = None
                    self._publish()
                return False
        if waited:
            self.exceeded = None
            self._publish()
        return True

    def remaining(self) -> Budget | None:
        """What is left of the conversation's limit (`None`: it has none): a sub-agent's budget."""
        limit, spent = self.state.conversation, self.state.spent
        if limit is None:
            return None
        tokens = None if limit.max_tokens is None else max(limit.max_tokens - spent.tokens, 0)
        cost = None if limit.max_cost_usd is None else max(limit.max_cost_usd - spent.cost_usd, 0.0)
        return Budget(max_tokens=tokens, max_cost_usd=cost)

    def record_sub_agent(self, usage: Usage | None, cost_usd: float) -> None:
        """Add what a sub-agent spent (its `ConversationResult`) to the conversation's spend.

        The estimate of the next model call (`Spend.last_tokens`) stays the
        previous model call's: a sub-agent's whole run says nothing of it.
        """
        state = self.state
        added = Spend().plus(usage, cost_usd)
        spent = state.spent.model_copy(
            update={
                "tokens": state.spent.tokens + added.tokens,
                "cost_usd": state.spent.cost_usd + added.cost_usd,
            }
        )
        self.state = state.model_copy(update={"spent": spent})

    def raise_budget(self, request: BudgetRaise, agent: str) -> None:
        """Apply a `raise_budget` signal (already decoded and validated).

        Args:
            request: The new limits (`None` fields keep theirs).
            agent: The current agent (the one `scope="agent"` raises).
        """
        state = self.state
        changes = {"max_tokens": request.max_tokens, "max_cost_usd": request.max_cost_usd}
        changes = {k: v for k, v in changes.items() if v is not None}
        if request.scope == "conversation":
            base = state.conversation or Budget()
            self.state = state.model_copy(
                update={"conversation": base.model_copy(update=changes), "raised": True}
            )
        else:
            agents = dict(state.agents)
            agents[agent] = (agents.get(agent) or Budget()).model_copy(update=changes)
            raised = sorted({*state.raised_agents, agent})
            self.state = state.model_copy(update={"agents": agents, "raised_agents": raised})
        sender = clean_sender(request.requested_by)
        limits = ", ".join(f"{k}={v}" for k, v in changes.items()) or "unchanged"
        self._view.event(
            "budget_raised",
            agent=agent if request.scope == "agent" else None,
            sent_by=sender or None,
            reason=f"{request.scope} budget: {limits}",
        )
        self._raised = True
