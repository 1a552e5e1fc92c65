"""Workflows of durable-tools: the deterministic agent loop."""

from __future__ import annotations

from durable_tools.workflows.agent_workflow import PENDING_COUNT, PENDING_KINDS, AgentWorkflow

__all__ = ["PENDING_COUNT", "PENDING_KINDS", "AgentWorkflow"]
