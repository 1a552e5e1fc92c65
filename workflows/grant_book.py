"""The conversation's grants ("approve for the rest of this conversation") in `AgentWorkflow`.

`Grants` holds the grants approvals carried (`durable_tools.grants`),
checks a decision's grant before it applies (`problem`, pure, from the
book's state alone, so a replay reaches the same verdict), records it when
the decision decides its call (`add`), and finds the grant that lets a new
gated call run without waiting (`applying`: only one in force, neither
expired by the workflow's clock nor revoked), and ends one on a
`revoke_grant` signal (`revoke`). The grants are carried across
continue-as-new (`CarriedState.grants`). Histories without grants (all
recorded before they existed) never reach any of this: nothing they replay
changes.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_tools.approvals import Decision, approver_problem
    from durable_tools.conversation import PendingApproval
    from durable_tools.grants import (
        MAX_GRANT_USES,
        MAX_GRANTS,
        Grant,
        GrantRevocation,
        describe_scope,
        expiry,
        explain_grant,
        scope_matches,
    )
    from durable_tools.handler_input import clean_text

__all__ = ["Grants"]

_MAX_ID_CHARS = 200


class Grants:
    """The grants of one conversation, and the calls they ran in this run.

    Args:
        carried: The grants the previous run held.

    Attributes:
        grants: Every grant, oldest first.
        used: Call id → the grant that ran it without waiting (this run).
    """

    def __init__(self, carried: list[Grant]) -> None:
        self.grants: list[Grant] = list(carried)
        self.used: dict[str, Grant] = {}

    def carried(self) -> list[Grant]:
        """What the next run starts with."""
        return list(self.grants)

    def problem(self, decision: Decision, pending: PendingApproval) -> str | None:
        """Why `decision`'s grant cannot be taken for `pending` (`None`: it can)."""
        scope = decision.grant
        if scope is None:
            return None
        if not decision.approved:
            return "a denial carries no grant"
        if pending.input_request is not None:
            return "a grant covers a call's own approval, not what its server asks"
        if pending.quorum > 1:
            return (
                f"a grant cannot stand in for a quorum of {pending.quorum} distinct approvers "
                f"(call {clean_text(pending.call_id, _MAX_ID_CHARS)!r})"
            )
        if scope.tool != pending.tool:
            return (
                f"the grant names tool {clean_text(scope.tool, _MAX_ID_CHARS)!r}; "
                f"call {clean_text(pending.call_id, _MAX_ID_CHARS)!r} is {pending.tool!r}"
            )
        if not scope_matches(scope, pending.tool, pending.arguments):
            return (
                f"the grant's pattern ({clean_text(describe_scope(scope), 500)}) does not "
                "match the arguments of the call it approves"
            )
        if len(self.grants) >= MAX_GRANTS:
            return f"this conversation holds {MAX_GRANTS} grants already"
        return None

    def add(self, decision: Decision, pending: PendingApproval, now: datetime) -> Grant | None:
        """Record the grant of a decision that decided `pending` (checked by `problem`)."""
        scope = decision.grant
        if scope is None or self.problem(decision, pending) is not None:
            return None
        grant = Grant(
            id=f"g{len(self.grants) + 1}",
            scope=scope,
            granted_by=clean_text(decision.decided_by, _MAX_ID_CHARS),
            groups=[clean_text(g, _MAX_ID_CHARS) for g in decision.groups[:50]],
            signed=pending.signed and bool(decision.signature),
            granted_at=now,
            call_id=clean_text(pending.call_id, _MAX_ID_CHARS),
            expires_at=expiry(now, scope),
        )
        self.grants.append(grant)
        return grant

    def applying(self, pending: PendingApproval, now: datetime) -> Grant | None:
        """The first grant in force at `now` that lets `pending`'s call run without waiting.

        The grant is marked used (`Grant.uses`).
        """
        if pending.quorum > 1 or pending.input_request is not None:
            return None
        for index, grant in enumerate(self.grants):
            if not grant.in_force(now):
                continue
            if not scope_matches(grant.scope, pending.tool, pending.arguments):
                continue
            if pending.signed and not _vouches(grant, pending):
                continue
            uses = [*grant.uses, pending.call_id][-MAX_GRANT_USES:]
            self.grants[index] = grant = grant.model_copy(update={"uses": uses})
            self.used[pending.call_id] = grant
            return grant
        return None

    def revoke(self, revocation: GrantRevocation, now: datetime) -> Grant | str:
        """End the grant `revocation` names: the grant as revoked, or why it cannot be.

        A grant revoked already, or expired, is refused (nothing changes);
        so is an id the conversation does not hold.
        """
        wanted = revocation.grant_id
        for index, grant in enumerate(self.grants):
            if grant.id != wanted:
                continue
            if grant.revoked_at is not None:
                return f"grant {grant.id} was revoked already, by {grant.revoked_by or 'someone'}"
            if not grant.in_force(now):
                return f"grant {grant.id} has expired"
            revoked = grant.model_copy(
                update={
                    "revoked_by": clean_text(revocation.revoked_by, _MAX_ID_CHARS),
                    "revoked_at": now,
                    "revoke_reason": clean_text(revocation.reason, 500),
                }
            )
            self.grants[index] = revoked
            return revoked
        held = ", ".join(g.id for g in self.grants[-10:]) or "none"
        return (
            f"no grant {clean_text(wanted, _MAX_ID_CHARS)!r} in this conversation "
            f"(it holds: {held})"
        )

    @staticmethod
    def explain(grant: Grant) -> str:
        """One line for the event and the activity summary: who, when, what, on which call."""
        return clean_text(explain_grant(grant), 500)


def _vouches(grant: Grant, pending: PendingApproval) -> bool:
    """A call that needs a signed decision runs by a signed grant from one of its approvers."""
    if not grant.signed:
        return False
    standing = Decision(
        call_id=pending.call_id,
        approved=True,
        arguments_hash=pending.arguments_hash,
        decided_by=grant.granted_by,
        groups=grant.groups,
    )
    return approver_problem(standing, pending.approvers) is None
