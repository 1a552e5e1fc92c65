"""`durable-tools policy`: which approval policy version and rule decided a call."""

from __future__ import annotations

import typer
from rich.markup import escape

from durable_tools.policy_verdict import explain_verdict
from durable_tools.worker.cli.deciding import CallId
from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    DEFAULT_TIMEOUT,
    Address,
    AsJson,
    Connection,
    Namespace,
    Timeout,
    WorkflowId,
    fail,
    out,
)

policy_app = typer.Typer(
    name="policy",
    help="Approval policies: what decided a call (docs/policies.md).",
    no_args_is_help=True,
)


@policy_app.command("explain")
def explain_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Print which policy version and rule decided a call, from the conversation's history.

    Reads the workflow's history (no worker needed). Exits 1 when no policy
    decided the call (the tool's own `needs_approval` did, or there is no
    such call).
    """
    connection = Connection(address, namespace, timeout)
    verdict = connection.on(workflow_id, lambda c: c.policy_verdict(workflow_id, call_id))
    if verdict is None:
        fail(
            f"no policy decided call {call_id!r} of {workflow_id!r} (the tool's own "
            "needs_approval did, or the conversation has no such call)"
        )
    if as_json:
        print(verdict.model_dump_json(indent=2))
        return
    out.print(f"{escape(call_id)}: {escape(explain_verdict(verdict))}", soft_wrap=True)
    out.print(f"policy:  {escape(verdict.policy)} {escape(verdict.version)}", soft_wrap=True)
    out.print(f"rule:    {escape(verdict.rule or '(default)')}", soft_wrap=True)
    out.print(f"outcome: {verdict.outcome}", soft_wrap=True)
