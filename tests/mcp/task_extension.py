"""The MCP Tasks extension (SEP-2663) for the test server, on the `mcp` SDK's `Extension` API.

The SDK has no Tasks runtime; this is a small one, enough for the tests:
`intercept_tool_call` answers a call of a task tool with a task handle
(`resultType: "task"`) and runs its body in the background; `tasks/get`,
`tasks/update` and `tasks/cancel` are the extension's methods
(`MethodBinding`). Tasks live in this process's memory (the HTTP server
outlives a worker killed mid-task).

Each event is logged: `task_created`, `call` (the body starts: once per
task, with the idempotency key), `task_get`, `task_update` (the keys),
`task_cancel`, `task_done`. `survey` works for `seconds` in four steps
(a progress notification on each poll, and a `statusMessage`), asks the
user's name (form elicitation) after the second, and answers with both.
`raw_task` answers with `create` as its task handle and `get` (as sent) to
every `tasks/get` (hostile-server tests).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError

TASKS = "io.modelcontextprotocol/tasks"
TASK_TOOLS = frozenset({"survey", "raw_task"})


class TaskId(types.RequestParams):
    task_id: str


class TaskUpdate(TaskId):
    input_responses: dict[str, Any]


@dataclass
class Task:
    task_id: str
    ttl_ms: int | None
    poll_ms: int
    status: str = "working"
    message: str = "started"
    done: float = 0.0
    total: float = 4.0
    result: dict[str, Any] | None = None
    requests: dict[str, Any] = field(default_factory=dict[str, Any])
    answers: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue[dict[str, Any]])
    got: dict[str, Any] = field(default_factory=dict[str, Any])
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    runner: asyncio.Task[None] | None = None
    raw_get: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        if self.raw_get is not None:
            return {"resultType": "complete", **self.raw_get}
        out: dict[str, Any] = {
            "resultType": "complete",
            "taskId": self.task_id,
            "status": self.status,
            "statusMessage": self.message,
            "createdAt": self.created,
            "lastUpdatedAt": datetime.now(UTC).isoformat(),
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_ms,
        }
        if self.status == "input_required":
            out["inputRequests"] = self.requests
        if self.status == "completed":
            out["result"] = self.result
        return out


class ServerTasks(Extension):
    """Tasks for `survey` and `raw_task`; `log(**event)` records what happens."""

    identifier = TASKS

    def __init__(self, log: Callable[..., None], key_meta: str) -> None:
        self._log = log
        self._key_meta = key_meta
        self._tasks: dict[str, Task] = {}
        self._ids = itertools.count(1)

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskId, self._get),
            MethodBinding("tasks/update", TaskUpdate, self._update),
            MethodBinding("tasks/cancel", TaskId, self._cancel),
        )

    async def intercept_tool_call(
        self,
        params: types.CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS:
            return await call_next(ctx)
        require_client_extension(ctx, TASKS)
        args = params.arguments or {}
        meta: Any = params.meta or {}
        key = meta.get(self._key_meta) if isinstance(meta, dict) else None
        if params.name == "raw_task":
            create: dict[str, Any] = dict(args.get("create") or {})
            task = Task(task_id=str(create.get("taskId")), ttl_ms=None, poll_ms=0)
            task.raw_get = dict(args.get("get") or {})
            self._tasks[task.task_id] = task
            self._log(event="task_created", tool="raw_task", task_id=task.task_id, key=key)
            return {"resultType": "task", **create}
        task_id = f"task-{next(self._ids)}-{id(self):x}"
        ttl = args.get("ttl_ms", 600_000)
        task = Task(task_id=task_id, ttl_ms=ttl, poll_ms=int(args.get("poll_ms", 200)))
        self._tasks[task_id] = task
        self._log(event="task_created", tool="survey", task_id=task_id, key=key)
        task.runner = asyncio.get_running_loop().create_task(self._survey(task, args, key))
        return {"resultType": "task", **{k: v for k, v in task.wire().items() if k != "resultType"}}

    async def _ask(self, task: Task, requests: dict[str, Any]) -> dict[str, Any]:
        """Ask `requests` (input_required) until `tasks/update` answered each; the answers."""
        task.requests, task.status = dict(requests), "input_required"
        while task.requests:
            await task.answers.get()
        task.status = "working"
        return {k: task.got.get(k) for k in requests}

    async def _survey(self, task: Task, args: dict[str, Any], key: Any) -> None:
        topic, seconds = str(args.get("topic")), float(args.get("seconds", 1.0))
        roots_asked = str(args.get("roots") or "")  # "", "alone" or "beside" the question
        self._log(event="call", tool="survey", task_id=task.task_id, key=key, topic=topic)
        roots_key = f"roots-{task.task_id}"
        roots: list[Any] | None = None
        try:
            for step in range(4):
                await asyncio.sleep(seconds / 4)
                task.done, task.message = step + 1.0, f"step {step + 1} of 4"
                if step == 0 and roots_asked == "alone":
                    got = await self._ask(task, {roots_key: {"method": "roots/list"}})
                    roots = (got[roots_key] or {}).get("roots")
                if step == 1:
                    who_key = f"who-{task.task_id}"
                    requests: dict[str, Any] = {
                        who_key: {
                            "method": "elicitation/create",
                            "params": {
                                "mode": "form",
                                "message": "Who is the survey for?",
                                "requestedSchema": {
                                    "type": "object",
                                    "properties": {"name": {"type": "string"}},
                                    "required": ["name"],
                                },
                            },
                        }
                    }
                    if roots_asked == "beside":
                        requests[roots_key] = {"method": "roots/list"}
                    got = await self._ask(task, requests)
                    if roots_asked == "beside":
                        roots = (got[roots_key] or {}).get("roots")
                    answer = got[who_key] or {}
                    content = answer.get("content") or {}
                    task.message = f"surveying for {content.get('name')}"
                    args = {**args, "who": content.get("name"), "action": answer.get("action")}
            text = f"survey of {topic} for {args.get('who')} ({args.get('action')})"
            if roots is not None:
                text += " in " + " ".join(str(r.get("uri")) for r in roots)
            task.result = {
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"result": text},  # its output schema, as the SDK's
                "isError": False,
            }
            task.status, task.message = "completed", "done"
            self._log(event="task_done", task_id=task.task_id, key=key)
        except asyncio.CancelledError:
            task.status = "cancelled"
            raise

    def _task(self, task_id: str) -> Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise MCPError(code=types.INVALID_PARAMS, message="Failed to retrieve task: not found")
        return task

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskId) -> HandlerResult:
        self._log(event="task_get", task_id=params.task_id)
        task = self._task(params.task_id)
        meta: Any = ctx.meta or {}
        token = (
            meta.get("progressToken", meta.get("progress_token"))
            if isinstance(meta, dict)
            else None
        )
        if token is not None and task.raw_get is None:
            await ctx.session.send_progress_notification(
                token, task.done, task.total, task.message, related_request_id=ctx.request_id
            )
        return task.wire()

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: TaskUpdate
    ) -> HandlerResult:
        self._log(event="task_update", task_id=params.task_id, keys=sorted(params.input_responses))
        task = self._task(params.task_id)
        for request_key, answer in params.input_responses.items():
            if request_key in task.requests:
                task.requests.pop(request_key)
                task.got[request_key] = answer if isinstance(answer, dict) else {}
                await task.answers.put(task.got[request_key])
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskId) -> HandlerResult:
        self._log(event="task_cancel", task_id=params.task_id)
        task = self._task(params.task_id)
        if task.runner is not None and not task.runner.done():
            task.runner.cancel()
        task.status = "cancelled"
        return {}
