"""`durable-tools budget`: raise (or set) a conversation's budget (docs/policies.md, "Budgets")."""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from pydantic import ValidationError
from rich.markup import escape

from durable_tools.budgets import BudgetRaise
from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    DEFAULT_TIMEOUT,
    Address,
    Connection,
    Namespace,
    Timeout,
    WorkflowId,
    fail,
    out,
    whoami,
)

budget_app = typer.Typer(
    name="budget",
    help="Budgets: let a conversation that waits in state budget_exceeded go on.",
    no_args_is_help=True,
)


@budget_app.command("raise")
def raise_command(
    workflow_id: WorkflowId,
    tokens: Annotated[
        int | None, typer.Option("--tokens", help="The new token limit (input + output).")
    ] = None,
    cost: Annotated[float | None, typer.Option("--cost", help="The new limit in USD.")] = None,
    agent: Annotated[
        bool,
        typer.Option(
            "--agent/--conversation",
            help="--conversation (default): the conversation's budget. --agent: the "
            "current agent's budget in this conversation.",
        ),
    ] = False,
    by: Annotated[str, typer.Option("--by", help="Who raises it.")] = "",
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Set new limits (the durable `raise_budget` signal; no worker needed).

    A conversation in state `budget_exceeded` runs its model call once the
    call fits. Exits 1 when neither `--tokens` nor `--cost` is given, or a
    limit is negative or not finite.
    """
    if tokens is None and cost is None:
        fail("give --tokens, --cost or both")
    scope: Literal["conversation", "agent"] = "agent" if agent else "conversation"
    try:  # checked here, before connecting: the signal would be a recorded rejection
        BudgetRaise(scope=scope, max_tokens=tokens, max_cost_usd=cost)
    except ValidationError as exc:
        error = exc.errors()[0]
        fail(f"not a budget: {'.'.join(map(str, error['loc']))}: {error['msg']}")
    Connection(address, namespace, timeout).on(
        workflow_id,
        lambda c: c.raise_budget(
            workflow_id,
            max_tokens=tokens,
            max_cost_usd=cost,
            scope=scope,
            requested_by=by or whoami(),
        ),
    )
    limits = ", ".join(
        part
        for part in (
            f"{tokens:,} tokens" if tokens is not None else "",
            f"{cost:g} USD" if cost is not None else "",
        )
        if part
    )
    out.print(f"set the {scope} budget of {escape(workflow_id)} to {escape(limits)}")
