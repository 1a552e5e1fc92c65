"""What `durable_tools.client.Conversations` sends to change a conversation's approval policy."""

from __future__ import annotations

from durable_tools._client_support import ConversationsBase
from durable_tools.policies import Policy
from durable_tools.policy_document import PolicyChange, PolicyDocument, document_version


class PolicyChanges(ConversationsBase):
    """The policy-changing method of `Conversations` (`set_policy`)."""

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
