"""Workflows of durable-tools: the deterministic agent loop, and ways to run it from yours."""

from __future__ import annotations

from durable_tools.workflows.agent_workflow import AgentWorkflow
from durable_tools.workflows.embedded import run_agent, start_child_conversation
from durable_tools.workflows.visibility import PENDING_COUNT, PENDING_KINDS

__all__ = [
    "PENDING_COUNT",
    "PENDING_KINDS",
    "AgentWorkflow",
    "run_agent",
    "start_child_conversation",
]
