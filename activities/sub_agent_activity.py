"""The activity `sub_agent.spend-v1`: what a sub-agent that did not finish spent.

A child conversation that fails, is terminated or times out leaves its
parent no `ConversationResult` to read its usage from; without this its
model calls would not count against the parent's budget (a sub-agent
terminated after spending would be free). The parent's workflow runs this
activity once, and records the answer (`workflows/sub_agents.py`).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError

from durable_tools._sub_agent_wire import (
    STATUS_QUERY_TIMEOUT,
    SUB_AGENT_SPEND_ACTIVITY,
    SubAgentSpend,
    SubAgentSpendRead,
)
from durable_tools.conversation import ConversationStatus

__all__ = ["SubAgentActivity"]


class SubAgentActivity:
    """The `sub_agent.spend-v1` activity of `AgentActivities`."""

    @activity.defn(name=SUB_AGENT_SPEND_ACTIVITY)
    async def sub_agent_spend(self, request: SubAgentSpendRead) -> SubAgentSpend:
        """Read the child's recorded usage and cost by its `status` query.

        Args:
            request: The child's workflow id.

        Returns:
            Its usage per model and cost over every run.

        Raises:
            ApplicationError: The query failed in the child's code (type
                `SubAgentSpendUnread`, non-retryable: a replay that fails
                fails again). A server or network error is retried per the
                workflow's retry policy.
        """
        handle = activity.client().get_workflow_handle(request.workflow_id)
        try:
            status = await handle.query(
                "status",
                result_type=ConversationStatus,
                rpc_timeout=timedelta(seconds=STATUS_QUERY_TIMEOUT),
            )
        except WorkflowQueryFailedError as exc:
            raise ApplicationError(
                f"the sub-agent's status query failed: {str(exc)[:300]}",
                type="SubAgentSpendUnread",
                non_retryable=True,
            ) from None
        return SubAgentSpend(usage=status.usage, cost_usd=status.cost_usd)
