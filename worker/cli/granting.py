"""`durable-tools grant`: end a grant ("approve for the rest of this conversation") early.

Grants are given with an approval (`durable-tools approve --grant TOOL
[--grant-for SECONDS]`) and listed by `durable-tools pending`;
docs/policies.md, "Grants".
"""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape

from durable_tools.grants import GrantRevocation
from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    DEFAULT_TIMEOUT,
    EXIT_BAD_INPUT,
    Address,
    Connection,
    Namespace,
    Timeout,
    WorkflowId,
    fail,
    out,
    whoami,
)

__all__ = ["grant_app", "revoke_command"]

grant_app = typer.Typer(
    name="grant",
    help="Grants: end one before the conversation does.",
    no_args_is_help=True,
)


@grant_app.command("revoke")
def revoke_command(
    workflow_id: WorkflowId,
    grant_id: Annotated[str, typer.Argument(metavar="GRANT", help="The grant: g1, g2, ...")],
    by: Annotated[str, typer.Option("--by", help="Who revokes it (default: your login).")] = "",
    reason: Annotated[str, typer.Option(help="Why (recorded with the revocation).")] = "",
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Revoke a grant (the durable `revoke_grant` signal; no worker needed).

    Later calls it would have run wait for approval again. The conversation
    refuses an id it does not hold, a grant already revoked and one expired
    (`durable-tools pending ID` shows the refusal). Exits 2 on an empty or
    too long id or reason, before connecting.
    """
    who = by or whoami()
    try:  # checked here, before connecting: the signal would be a recorded rejection
        GrantRevocation(grant_id=grant_id, revoked_by=who, reason=reason)
    except ValidationError as exc:
        error = exc.errors()[0]
        fail(f"invalid {'.'.join(map(str, error['loc']))}: {error['msg']}", EXIT_BAD_INPUT)
    Connection(address, namespace, timeout).on(
        workflow_id,
        lambda c: c.revoke_grant(workflow_id, grant_id, revoked_by=who, reason=reason),
    )
    out.print(
        f"asked {escape(workflow_id)} to revoke grant {escape(grant_id)}; "
        f"`durable-tools pending {escape(workflow_id)}` shows it revoked"
    )
