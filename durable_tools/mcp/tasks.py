"""The MCP Tasks extension on the client side, through the `mcp` SDK's extension seam.

The `mcp` SDK 2.x has no runtime for Tasks (`io.modelcontextprotocol/tasks`,
SEP-2663); its `ClientExtension` is the seam. `TasksExtension` declares the
extension in every request's client capabilities (the SDK stamps them per
request at protocol 2026-07-28) and claims the `resultType: "task"` result
shape of `tools/call` (`CreateTaskResult`), which the tool activity takes
with `allow_claimed=True` and hands to the loop, never resolving it inside
the activity. `tasks/get`, `tasks/update` and `tasks/cancel` are sent as
plain requests of the pooled session (`McpConnection.task_request`), with
the `Mcp-Name` header set to the task id over streamable HTTP (the SDK sets
it from `name_param`).

Every answer is a server's word, checked here (`task_state_of`): a task id
of at most 256 printable characters (the one asked about), a known status,
a `CallToolResult` for a completed task, the JSON-RPC error of a failed one,
input requests checked as an input-required result's are
(`input_required_of`). Anything else is Failure `invalid_task`, which the
model reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Literal, cast

import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import ConfigDict, ValidationError

from durable_tools.handler_input import clean_text
from durable_tools.mcp.config import McpServerConfig
from durable_tools.mcp.input_required import input_required_of
from durable_tools.tool_tasks import (
    MAX_TASK_ID_CHARS,
    TASKS_EXTENSION,
    TaskState,
    poll_seconds,
)
from durable_tools.tools import ToolFailure

__all__ = [
    "INVALID_TASK",
    "CancelTaskRequest",
    "CreateTaskResult",
    "GetTaskRequest",
    "RawResult",
    "TaskParams",
    "TasksExtension",
    "UpdateTaskParams",
    "UpdateTaskRequest",
    "task_state_of",
]

INVALID_TASK: Final[str] = "invalid_task"
"""Failure kind of a task answer the worker cannot use (bogus id, unknown status, ...)."""

_MAX_TTL_SECONDS: Final[float] = 10 * 365 * 86400.0
_MAX_MESSAGE_CHARS: Final[int] = 500
_TERMINAL: Final[frozenset[str]] = frozenset({"completed", "failed", "cancelled"})
_STATUSES: Final[frozenset[str]] = frozenset({"working", "input_required", *_TERMINAL})


class CreateTaskResult(types.Result):
    """A `tools/call` answered with a task handle (`resultType: "task"`, SEP-2663).

    Every field but the discriminator is taken as sent (any JSON), so a
    hostile answer never fails the SDK's parsing: `task_state_of` checks it.
    """

    result_type: Literal["task"] = "task"
    task_id: Any = None
    status: Any = None
    status_message: Any = None
    ttl_ms: Any = None
    poll_interval_ms: Any = None


class RawResult(types.Result):
    """Any result, its fields kept as sent (`model_extra`), for the worker to check."""

    model_config = ConfigDict(extra="allow")


async def _resolve_elsewhere(result: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
    """The SDK's transparent resolution, unused: the loop polls the task durably."""
    raise RuntimeError("durable-tools polls MCP tasks from the workflow, not inside a call")


class TasksExtension(ClientExtension):
    """Declares MCP Tasks and claims `CreateTaskResult` for `tools/call` (SEP-2663)."""

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        """The task handle result shape of `tools/call`."""
        return (
            ResultClaim(result_type="task", model=CreateTaskResult, resolve=_resolve_elsewhere),
        )


class TaskParams(types.RequestParams):
    """Params of `tasks/get` and `tasks/cancel`."""

    task_id: str


class UpdateTaskParams(TaskParams):
    """Params of `tasks/update`: the answers, by input request key."""

    input_responses: dict[str, Any]


class GetTaskRequest(types.Request[TaskParams, Literal["tasks/get"]]):
    """`tasks/get`: the task's state, its input requests or its result."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param: ClassVar[str | None] = "taskId"


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    """`tasks/update`: answers to the task's input requests."""

    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param: ClassVar[str | None] = "taskId"


class CancelTaskRequest(types.Request[TaskParams, Literal["tasks/cancel"]]):
    """`tasks/cancel`: ask the server to stop the task (cooperative)."""

    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param: ClassVar[str | None] = "taskId"


def _invalid(server: str, what: str) -> ToolFailure:
    return ToolFailure(INVALID_TASK, f"MCP server {server!r} answered with {what}")


def _checked_id(server: str, value: Any, expected: str | None) -> str:
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_TASK_ID_CHARS
        or not value.isprintable()
    ):
        raise _invalid(server, "a task id that is not a short printable string")
    if expected is not None and value != expected:
        raise _invalid(server, "the state of another task than the one asked about")
    return value


def _ttl_seconds(value: Any) -> float | None:
    """`ttlMs` in seconds; `None` (unlimited) for null or anything that is no positive number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return min(value / 1000.0, _MAX_TTL_SECONDS)


def task_state_of(
    server: str,
    raw: Mapping[str, Any],
    config: McpServerConfig | None = None,
    *,
    expected_id: str | None = None,
) -> TaskState | types.CallToolResult:
    """A task as the server described it, checked (a `CreateTaskResult` or a `tasks/get` answer).

    Args:
        server: The server's configured name.
        raw: The answer's JSON object (`taskId`, `status`, `statusMessage`,
            `ttlMs`, `pollIntervalMs`, `inputRequests`, `result`, `error`).
        config: The server's configuration (what its input requests may ask).
        expected_id: The task asked about (`tasks/get`); `None` for a new task.

    Returns:
        The task's state while it runs (`working`, `input_required`), or the
        final `CallToolResult` of a completed task.

    Raises:
        ToolFailure: `invalid_task` for an answer that cannot be used (no or
            a bogus task id, another task's, an unknown status, a completed
            task without a valid result); `execution_error` for a task that
            failed or that the server cancelled; what `input_required_of`
            raises for its input requests.
    """
    task_id = _checked_id(server, raw.get("taskId"), expected_id)
    status = raw.get("status")
    if not isinstance(status, str) or status not in _STATUSES:
        raise _invalid(server, "a task status that is none of " + ", ".join(sorted(_STATUSES)))
    message = raw.get("statusMessage")
    message = clean_text(message, _MAX_MESSAGE_CHARS) if isinstance(message, str) else ""
    if status == "completed":
        result = raw.get("result")
        if not isinstance(result, dict):
            raise _invalid(server, "a completed task without a result")
        try:
            return types.CallToolResult.model_validate(result, by_name=False)
        except ValidationError:
            raise _invalid(server, "a completed task whose result is no CallToolResult") from None
    if status == "failed":
        error = raw.get("error")
        text: Any = cast(dict[str, Any], error).get("message") if isinstance(error, dict) else None
        reason = clean_text(text, _MAX_MESSAGE_CHARS) if isinstance(text, str) else message
        raise ToolFailure(
            "execution_error", f"MCP server {server!r}: the task failed: {reason or 'no reason'}"
        )
    if status == "cancelled":
        raise ToolFailure(
            "execution_error",
            f"MCP server {server!r} cancelled the task{': ' + message if message else ''}",
        )
    asked = None
    requests = raw.get("inputRequests")
    if status == "input_required" and requests is not None:
        try:
            result = types.InputRequiredResult.model_validate(
                {"resultType": "input_required", "inputRequests": requests}, by_name=False
            )
        except ValidationError:
            raise _invalid(server, "input requests that are not MCP requests") from None
        asked = input_required_of(server, result, config)
    return TaskState(
        server=server,
        task_id=task_id,
        status="input_required" if asked is not None else "working",
        message=message,
        poll_seconds=poll_seconds(raw.get("pollIntervalMs")),
        ttl_seconds=_ttl_seconds(raw.get("ttlMs")),
        input_required=asked,
    )
