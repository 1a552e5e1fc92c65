"""Hostile task handles and polls never fail a workflow task (hypothesis, on the dev server).

Each example is a conversation whose call of the test server's `raw_task`
gets any task handle (`create`: any id, status, intervals) and then any
answer to its polls (`get`: another task's id, an unknown or terminal
status, any result or error). The call ends with exactly one output (a
result or a `Failure` the model reads) and no workflow task fails.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_support import stdio_test_server
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, running

T = TypeVar("T")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)
# Short or nonsense intervals only: a long valid one would make an example wait.
intervals = st.sampled_from([-5, 0, 1, 999, "soon", None, [], 2.5])
creates = st.fixed_dictionaries(
    {
        "taskId": st.sampled_from(["ID", 7, "x" * 300, "a\u0000b", ""]),
        "status": st.sampled_from(["working", "input_required", "completed", "bogus", 3]),
    },
    optional={"pollIntervalMs": intervals, "ttlMs": intervals, "statusMessage": json_values},
)
gets = st.fixed_dictionaries(
    {
        "taskId": st.sampled_from(["ID", "ID", "other", 7]),
        "status": st.sampled_from(["completed", "failed", "cancelled", "bogus", None]),
    },
    optional={
        "result": st.just({"content": [{"type": "text", "text": "ok"}]}) | json_values,
        "error": st.just({"code": -32603, "message": "boom"}) | json_values,
        "inputRequests": json_values,
        "pollIntervalMs": intervals,
    },
)
counter = itertools.count()


async def _example(h: Harness, create: dict[str, Any], get: dict[str, Any]) -> None:
    task_id = f"t-{next(counter)}"
    create = {k: (task_id if v == "ID" else v) for k, v in create.items()}
    get = {k: (task_id if v == "ID" else v) for k, v in get.items()}
    args = {"create": create, "get": get}
    workflow_id = await h.start(json.dumps({"turns": [[["p", "notes__raw_task", args]]]}))
    outputs = await h.wait_outputs(workflow_id, "p", timeout=60)
    items = await h.conversations.history(workflow_id)
    assert (
        sum(1 for i in items if getattr(i, "call_id", None) == "p" and hasattr(i, "is_error")) == 1
    )
    assert outputs["p"].content
    handle = h.client.get_workflow_handle(workflow_id)
    # The server's own retry (`UNHANDLED_COMMAND`: an event arrived as the run
    # completed) is not the workflow failing; test_mcp_tasks.py says more.
    unhandled = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            assert event.workflow_task_failed_event_attributes.cause == unhandled, str(event)


async def test_hostile_task_answers_never_fail_a_workflow_task(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = stdio_test_server(log, trust_annotations=True, needs_approval=False)
    loop = asyncio.get_running_loop()

    def on_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=90)

    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:

        @settings(
            max_examples=10,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(create=creates, get=gets)
        def check(create: dict[str, Any], get: dict[str, Any]) -> None:
            on_loop(_example(h, create, get))

        await asyncio.to_thread(check)
