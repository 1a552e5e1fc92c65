"""One activity of a call that runs as an MCP task: poll it, answer it or cancel it.

The loop (`workflows/task_polls.py`) runs these as short activities of the
call's own tool (`ToolContext.resume.task`), between workflow timers. Every
request of the Tasks extension may be sent again (`tasks/get` reads,
`tasks/update` answers are keyed and a server ignores a key already
answered, `tasks/cancel` is cooperative), so a connection problem is a
retryable `server_unavailable` (the loop bounds the attempts).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from durable_tools.input_requests import InputResume
from durable_tools.mcp.connection import CallTimedOut, ConnectionLost, McpConnection, McpStartError
from durable_tools.mcp.input_required import input_responses_of
from durable_tools.mcp.tasks import (
    CancelTaskRequest,
    GetTaskRequest,
    TaskParams,
    UpdateTaskParams,
    UpdateTaskRequest,
    task_state_of,
)
from durable_tools.tool_tasks import TASK_NOT_FOUND, NeedsTask, TaskState
from durable_tools.tools import Emit, ToolFailure

__all__ = ["task_of", "task_step"]


def task_of(
    connection: McpConnection, raw: dict[str, Any], expected_id: str | None
) -> types.CallToolResult:
    """A task's final result, or `NeedsTask` while it runs (`tasks.task_state_of` checks it).

    Raises:
        NeedsTask: The task runs on (`working`, `input_required`).
        ToolFailure: As `task_state_of`.
    """
    state = task_state_of(connection.config.name, raw, connection.config, expected_id=expected_id)
    if isinstance(state, TaskState):
        raise NeedsTask(state)
    return state


async def task_step(
    connection: McpConnection, resume: InputResume, emit: Emit, timeout: float
) -> types.CallToolResult:
    """Poll (`tasks/get`), answer (`tasks/update`, then poll) or cancel (`tasks/cancel`) a task.

    Progress notifications the server sends while it answers a poll, and the
    task's `statusMessage`, go to `emit` (heartbeats and `tool_progress` events).

    Args:
        connection: The server's pooled connection.
        resume: The step (`resume.task`) and, for `update`, the answers.
        emit: The tool activity's progress callback.
        timeout: Seconds each request may take.

    Returns:
        The completed task's `CallToolResult`.

    Raises:
        NeedsTask: The task runs on (after `tasks/cancel`: status `cancelled`).
        ToolFailure: `server_unavailable` (retryable), `task_not_found`
            (the server no longer knows the task), `execution_error`, or
            what `task_state_of` raises.
    """
    task = resume.task
    assert task is not None
    server = connection.config.name
    params = TaskParams(task_id=task.task_id)

    latest: dict[str, Any] = {}

    def progress(value: float, total: float | None, message: str | None) -> None:
        latest.update(progress=value, total=total, message=message)
        emit(dict(latest))

    try:
        if task.action == "cancel":
            await connection.task_request(CancelTaskRequest(params=params), timeout=timeout)
            raise NeedsTask(TaskState(server=server, task_id=task.task_id, status="cancelled"))
        if task.action == "update":
            responses = input_responses_of(server, resume)
            update = UpdateTaskParams(task_id=task.task_id, input_responses=responses)
            await connection.task_request(UpdateTaskRequest(params=update), timeout=timeout)
        raw = await connection.task_request(
            GetTaskRequest(params=params), timeout=timeout, progress=progress
        )
    except (McpStartError, ConnectionLost, CallTimedOut) as exc:
        raise ToolFailure(
            "server_unavailable", f"MCP server {server!r}: {exc}", retryable=True
        ) from exc
    except MCPError as exc:
        if exc.error.code == types.INVALID_PARAMS:
            raise ToolFailure(
                TASK_NOT_FOUND, f"MCP server {server!r} no longer knows the task: {exc}"
            ) from exc
        raise ToolFailure(
            "execution_error", f"MCP server {server!r} refused {task.action} of the task: {exc}"
        ) from exc
    try:
        return task_of(connection, raw, task.task_id)
    except NeedsTask as running:
        # A poll's activity is quick, too quick for its own progress events:
        # the loop publishes what the server reported when it changes.
        state = running.state
        if not latest and state.message:
            latest["message"] = state.message
        if latest:
            shown = json.dumps(latest, ensure_ascii=False, default=str)[:1000]
            raise NeedsTask(state.model_copy(update={"progress": shown})) from None
        raise
