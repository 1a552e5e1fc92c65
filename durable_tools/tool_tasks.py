"""Tool calls that run as tasks: the MCP Tasks extension as durable polls.

An MCP server that supports the Tasks extension (`io.modelcontextprotocol/tasks`,
SEP-2663, an extension of protocol 2026-07-28) may answer a `tools/call` with
a *task handle* (`resultType: "task"`) instead of the result; the client
polls the task with `tasks/get` (at the server's `pollIntervalMs`), answers
what it asks with `tasks/update` (`inputResponses`, as in input-required
results) and may cancel it with `tasks/cancel`. The final `CallToolResult`
is inlined in the `tasks/get` answer of a completed task (the extension has
no `tasks/result`).

Here the tool activity returns the handle to the loop (`TaskState`, raised by
the tool as `NeedsTask`), and the loop polls with workflow timers and short
activities of the same tool (`ToolContext.resume` carries a `TaskAction`):
no worker slot is held while the task runs, for minutes or days.

```
TaskState  ── tool activity result ──▶ loop: timer, then a poll
TaskAction ── InputResume.task ──▶ the tool's next activity: get, update or cancel
TaskProgress ── carried across continue-as-new (CarriedCall.task_progress)
```
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from durable_tools.input_requests import InputProgress, InputRequired, TaskAction

__all__ = [
    "MAX_TASK_ID_CHARS",
    "POLL_DEFAULT_SECONDS",
    "POLL_MAX_SECONDS",
    "POLL_MIN_SECONDS",
    "TASK_NOT_FOUND",
    "TASKS_EXTENSION",
    "NeedsTask",
    "TaskAction",
    "TaskProgress",
    "TaskState",
    "TaskStatus",
    "poll_seconds",
]

TASKS_EXTENSION: Final[str] = "io.modelcontextprotocol/tasks"
"""The MCP Tasks extension's identifier (SEP-2663)."""

TASK_NOT_FOUND: Final[str] = "task_not_found"
"""Failure kind of a poll the server answered "no such task" (`-32602`): past the
task's TTL the loop makes it `expired`."""

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
"""A task's status (SEP-2663): the last three are terminal."""

POLL_MIN_SECONDS: Final[float] = 1.0
"""The shortest wait between two polls of a task, whatever `pollIntervalMs` says.

Each poll is a Temporal activity (about six history events): a server asking
for 10 ms would otherwise fill the conversation's history in minutes."""

POLL_MAX_SECONDS: Final[float] = 60.0
"""The longest wait between two polls, whatever `pollIntervalMs` says (a task
that finished is noticed within a minute)."""

POLL_DEFAULT_SECONDS: Final[float] = 5.0
"""The wait between polls when the server suggests none (or nonsense)."""

MAX_TASK_ID_CHARS: Final[int] = 256
"""The longest task id kept; a longer one (or one with control characters) is refused."""


def poll_seconds(interval_ms: Any) -> float:
    """The wait before the next poll: the server's `pollIntervalMs`, bounded.

    Args:
        interval_ms: What the server sent (any JSON; untrusted).

    Returns:
        Seconds, from `POLL_MIN_SECONDS` to `POLL_MAX_SECONDS`;
        `POLL_DEFAULT_SECONDS` when `interval_ms` is not a finite number.
    """
    if isinstance(interval_ms, bool) or not isinstance(interval_ms, int | float):
        return POLL_DEFAULT_SECONDS
    if not math.isfinite(interval_ms):
        return POLL_DEFAULT_SECONDS
    return min(max(interval_ms / 1000.0, POLL_MIN_SECONDS), POLL_MAX_SECONDS)


class TaskState(BaseModel):
    """Where a task stands, as the worker checked the server's answer.

    Attributes:
        server: The MCP server running it.
        task_id: The server's task id (at most 256 printable characters).
        status: `working` or `input_required` (the loop polls on), or
            `cancelled` (the answer to `tasks/cancel`).
        message: The server's `statusMessage`, cleaned and cut at 500 characters.
        poll_seconds: When to poll next (`poll_seconds` of `pollIntervalMs`).
        ttl_seconds: How long the server keeps the task from its creation
            (`ttlMs`); `None`: unlimited.
        input_required: What the task asks (`input_required` only): its
            requests, checked as an input-required result's are.
        progress: The latest progress notification the server sent while
            answering the poll (`{"progress", "total", "message"}` as JSON,
            at most 1,000 characters), or `""`: the loop publishes it as a
            `tool_progress` event when it changes.
    """

    model_config = ConfigDict(frozen=True)

    server: str
    task_id: str
    status: TaskStatus = "working"
    message: str = ""
    poll_seconds: float = POLL_DEFAULT_SECONDS
    ttl_seconds: float | None = None
    input_required: InputRequired | None = None
    progress: str = ""


class TaskProgress(BaseModel):
    """Where a call running as a task stands: carried when its wait moves to a new run.

    Attributes:
        task: The task's latest state.
        started_at: When the loop first saw the task (workflow time): its
            TTL counts from here, not from the server's clock.
        answered: Input request keys already answered (`tasks/update` sent):
            a request the server still lists under one of them is not asked again.
        asking: The input round being asked (its answers so far), while a
            person decides.
        rounds: Input rounds asked so far.
        polls: Polls sent so far.
    """

    task: TaskState
    started_at: datetime
    answered: list[str] = Field(default_factory=list[str])
    asking: InputProgress | None = None
    rounds: int = 0
    polls: int = 0


class NeedsTask(Exception):  # noqa: N818 (control flow, not an error)
    """Raised by a tool's run: the call runs as a task the loop polls.

    The tool activity returns `state` to the loop instead of a result.

    Args:
        state: The task as the server last described it.
    """

    def __init__(self, state: TaskState) -> None:
        super().__init__(f"{state.server} runs the call as task {state.task_id} ({state.status})")
        self.state = state
