"""What `durable_tools.client.Conversations` sends to change a conversation's rules.

Its approval policy (`set_policy`), its budget (`raise_budget`) and its
grants (`revoke_grant`): each a signal, durable with no worker running, and
each checked by the workflow (a refused one is recorded in
`pending().rejected`).
"""

from __future__ import annotations

from typing import Literal

from durable_tools._client_support import ConversationsBase
from durable_tools.budgets import BudgetRaise
from durable_tools.grants import GrantRevocation
from durable_tools.policies import Policy
from durable_tools.policy_document import PolicyChange, PolicyDocument, document_version


class PolicyChanges(ConversationsBase):
    """Rule-changing methods of `Conversations`: `set_policy`, `raise_budget`, `revoke_grant`."""

    async def set_policy(
        self,
        workflow_id: str,
        policy: Policy | PolicyDocument | str,
        *,
        installed_by: str = "",
        reason: str = "",
    ) -> str:
        """Install a policy version in a running conversation (the `set_policy` signal).

        Durable: it is stored with no worker running and taken at the
        conversation's next workflow task. The version takes the agent's own
        policy's place: calls waiting for approval are decided again under
        it (released, re-gated or denied), later calls are planned with it
        (docs/policies.md, "Live change"). Its digest is sent with it, and
        the workflow refuses a document that digests otherwise; a refused
        change is recorded in `pending().rejected`.

        Args:
            workflow_id: The conversation.
            policy: A `Policy`, its `PolicyDocument`, or YAML/JSON text.
            installed_by: Who installs it (recorded with the change).
            reason: Why (at most 500 characters).

        Returns:
            The version installed (`sha256:...`).

        Raises:
            ConfigurationError: The text is not a policy.
            pydantic.ValidationError: `reason` or `installed_by` is too long.
        """
        if isinstance(policy, str):
            document = PolicyDocument.from_text(policy)
        elif isinstance(policy, PolicyDocument):
            document = policy
        else:
            document = policy.document
        version = document_version(document)
        change = PolicyChange(
            document=document, version=version, installed_by=installed_by, reason=reason
        )
        await self._handle(workflow_id).signal("set_policy", change)
        return version

    async def raise_budget(
        self,
        workflow_id: str,
        *,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
        scope: Literal["conversation", "agent"] = "conversation",
        requested_by: str = "",
    ) -> None:
        """Set a conversation's budget (the `raise_budget` signal; durable, no worker needed).

        A conversation in state `budget_exceeded` runs its model call once
        the call fits in the new limits (docs/policies.md, "Budgets").

        Args:
            workflow_id: The conversation.
            max_tokens: The new token limit (`None`: unchanged).
            max_cost_usd: The new limit in USD (`None`: unchanged).
            scope: `conversation` (default) or `agent`: the current agent's
                limit in this conversation.
            requested_by: Who sets it (the `budget_raised` event names them).

        Raises:
            pydantic.ValidationError: A negative, non-finite or too large
                limit (`durable_tools.budgets.BudgetRaise`).
        """
        request = BudgetRaise(
            scope=scope,
            max_tokens=max_tokens,
            max_cost_usd=max_cost_usd,
            requested_by=requested_by,
        )
        await self._handle(workflow_id).signal("raise_budget", request)

    async def revoke_grant(
        self, workflow_id: str, grant_id: str, *, revoked_by: str = "", reason: str = ""
    ) -> None:
        """End a grant before the conversation does (the `revoke_grant` signal; durable).

        A later call the grant would have run waits for approval again;
        calls it ran stay as they ran. The workflow refuses (records in
        `pending().rejected`) an id it does not hold, a grant already
        revoked and one expired. The grants and their state are
        `pending().grants`.

        Args:
            workflow_id: The conversation.
            grant_id: The grant (`g1`, `g2`, ...).
            revoked_by: Who revokes it (the `grant_revoked` event names them).
            reason: Why (at most 500 characters shown).

        Raises:
            pydantic.ValidationError: An empty or too long id, `revoked_by`
                or `reason` (`durable_tools.grants.GrantRevocation`).
        """
        revocation = GrantRevocation(grant_id=grant_id, revoked_by=revoked_by, reason=reason)
        await self._handle(workflow_id).signal("revoke_grant", revocation)
