"""A worker SIGKILLed while an MCP call runs as a task changes nothing.

The test server runs over streamable HTTP (it outlives the worker, as a
remote server would) and `survey` runs as a task (the Tasks extension).
Once the loop polls it, the worker is killed with SIGKILL: no activity
holds the task, only the workflow's timer and the recorded task id. A new
worker process polls on from the recorded task id, asks the task's question,
answers it with `tasks/update`, and the call completes exactly once: one
task, its body run once, no `tasks/cancel`, one output, a reconciled
transcript.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from agent_support import AGENT, MCP_URL_ENV, MODELS, TOOLKITS, turns
from mcp_support import http_test_server
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from test_mcp_input_worker_kill import WAIT, _eventually, _Worker

from durable_tools.client import Conversations
from durable_tools.conversation import PendingInteraction
from durable_tools.transcript import ToolCallOutput, is_reconciled
from durable_tools.worker.plugin import DurableToolsPlugin


def _server_events(log: Path, event: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event]


async def test_worker_killed_while_a_call_runs_as_a_task(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "server.jsonl"
    monkeypatch.setenv("DT_TEST_MCP_TOKEN", "task-kill-token")
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conv = Conversations(client, task_queue=task_queue)
    workflow_id = f"task-kill-{uuid.uuid4()}"
    script = turns(
        [("p", "notes__survey", {"topic": "kelp", "seconds": 6})],
        [("f1", "finish", {"output": "surveyed"})],
    )

    async def question() -> PendingInteraction | None:
        pending = await conv.pending(workflow_id)
        return next((i for i in pending.interactions if i.call_id == "p"), None)

    async def polled() -> bool | None:
        return True if _server_events(log, "task_get") else None

    workers: list[_Worker] = []
    with http_test_server(log, "DT_TEST_MCP_TOKEN") as url:
        monkeypatch.setenv(MCP_URL_ENV, url)
        try:
            first = _Worker(dev_env, task_queue, tmp_path, "worker-1")
            workers.append(first)
            await first.ready()
            await conv.start(workflow_id, agent=AGENT, message=script)
            await _eventually(polled, "the task's first poll")
            first.kill()  # while the task runs: only a timer and the task id wait
            second = _Worker(dev_env, task_queue, tmp_path, "worker-2")
            workers.append(second)
            await second.ready()
            asked = await _eventually(question, "the task's question")
            await conv.answer(
                workflow_id, "p", {"name": "Di"}, arguments_hash=asked.arguments_hash, wait=True
            )
            async with asyncio.timeout(WAIT):
                result = await conv.result(workflow_id)
            transcript = await conv.history(workflow_id)
        finally:
            for worker in workers:
                worker.kill()
    assert result.status == "finished"
    assert is_reconciled(transcript)
    outputs = [i for i in transcript if isinstance(i, ToolCallOutput) and i.call_id == "p"]
    assert len(outputs) == 1 and not outputs[0].is_error, outputs
    assert "survey of kelp for Di (accept)" in outputs[0].content
    created = _server_events(log, "task_created")
    assert len(created) == 1 and created[0]["key"] == f"{workflow_id}/p"
    assert len(_server_events(log, "call")) == 1
    assert len(_server_events(log, "task_update")) == 1
    assert _server_events(log, "task_cancel") == []
