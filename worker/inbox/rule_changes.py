"""What the inbox changes of a conversation's rules: its policy, its budget, its grants.

`InboxRuleChanges`, a base of `InboxService` (its attributes are the
service's): each operation asks the authorizer for its action first
(`set_policy`, `raise_budget`, `decide` for revoking a grant), checks the
input before anything is sent (a `Conflict` naming what is wrong), then
sends the durable signal in the signed-in identity's name.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Literal, TypeVar

from pydantic import ValidationError

from durable_tools.budgets import BudgetRaise
from durable_tools.errors import ConfigurationError
from durable_tools.grants import GrantRevocation
from durable_tools.policy_document import PolicyDocument
from durable_tools.worker.inbox.auth import Identity
from durable_tools.worker.inbox.conflicts import QUERY_TIMEOUT, Conflict
from durable_tools.worker.inbox.reading import InboxReading

__all__ = ["InboxRuleChanges"]

T = TypeVar("T")


class InboxRuleChanges(InboxReading):
    """`InboxService`'s rule-changing operations: `set_policy`, `raise_budget`, `revoke_grant`."""

    async def _bounded(self, operation: Awaitable[T], *, timeout: float = QUERY_TIMEOUT) -> T:
        """`operation`, its errors as `Conflict`s (`InboxService._bounded`)."""
        raise NotImplementedError

    async def set_policy(
        self, workflow_id: str, identity: Identity, policy_text: str, *, reason: str = ""
    ) -> str:
        """Install a policy version (the durable `set_policy` signal), in `identity`'s name.

        Returns:
            The version installed.

        Raises:
            Conflict: `invalid_policy` for text that is not a policy;
                `not_found` when `identity` may not change the conversation's
                policy (action `set_policy`).
        """
        await self.authorize(workflow_id, identity, "set_policy")
        try:
            document = PolicyDocument.from_text(policy_text)
        except ConfigurationError as exc:
            raise Conflict("invalid_policy", str(exc)[:500]) from None
        return await self._bounded(
            self.conversations.set_policy(
                workflow_id, document, installed_by=identity.name, reason=reason
            )
        )

    async def raise_budget(
        self,
        workflow_id: str,
        identity: Identity,
        *,
        max_tokens: int | None,
        max_cost_usd: float | None,
        scope: Literal["conversation", "agent"] = "conversation",
    ) -> None:
        """Set new limits (the durable `raise_budget` signal), in `identity`'s name.

        Raises:
            Conflict: `invalid_budget` for no limit, a negative or a
                non-finite one; `not_found` when `identity` may not raise it
                (action `raise_budget`).
        """
        await self.authorize(workflow_id, identity, "raise_budget")
        if max_tokens is None and max_cost_usd is None:
            raise Conflict("invalid_budget", "give a token limit, a cost limit or both")
        try:
            BudgetRaise(scope=scope, max_tokens=max_tokens, max_cost_usd=max_cost_usd)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(map(str, error["loc"]))
            raise Conflict("invalid_budget", f"not a budget: {where}: {error['msg']}") from None
        await self._bounded(
            self.conversations.raise_budget(
                workflow_id,
                max_tokens=max_tokens,
                max_cost_usd=max_cost_usd,
                scope=scope,
                requested_by=identity.name,
            )
        )

    async def revoke_grant(
        self, workflow_id: str, identity: Identity, grant_id: str, *, reason: str = ""
    ) -> None:
        """End a grant (the durable `revoke_grant` signal), in `identity`'s name.

        Who may decide the conversation's calls may revoke its grants (action
        `decide`). The workflow refuses an id it does not hold, a grant
        revoked already or expired (`pending().rejected`).

        Raises:
            Conflict: `invalid_grant` for an empty or too long id or reason;
                `not_found` when `identity` may not (action `decide`).
        """
        await self.authorize(workflow_id, identity, "decide")
        try:
            GrantRevocation(grant_id=grant_id, revoked_by=identity.name, reason=reason)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(map(str, error["loc"]))
            raise Conflict("invalid_grant", f"not a revocation: {where}: {error['msg']}") from None
        await self._bounded(
            self.conversations.revoke_grant(
                workflow_id, grant_id, revoked_by=identity.name, reason=reason
            )
        )
