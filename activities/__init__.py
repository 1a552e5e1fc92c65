"""Activities of the durable loop: model calls and tool calls. All I/O lives here."""

from __future__ import annotations

from durable_tools.activities.activity_base import MODEL_TURN_ACTIVITY, TOOL_ACTIVITY_PREFIX
from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.activities.planning import plan_calls, summarize_call

__all__ = [
    "MODEL_TURN_ACTIVITY",
    "TOOL_ACTIVITY_PREFIX",
    "AgentActivities",
    "plan_calls",
    "summarize_call",
]
