"""A worker SIGKILLed while an MCP call waits for input changes nothing.

While a person decides, no activity runs: the question lives in the
workflow. The worker (and the stdio MCP server it started) is killed with
SIGKILL during the wait; the answer is signalled while no worker runs; a
new worker process (with a new server process, sharing the server's
`requestState` key) asks the second round and retries the call. The call
completes exactly once: the server ran round 1 once (no restart), saw
exactly one final retry (its tool body ran once), and the transcript has one
output per call.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agent_support import AGENT, LEDGER_ENV, MCP_LOG_ENV, MCP_STATE_KEY_ENV, MODELS, TOOLKITS, turns
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_tools.client import Conversations
from durable_tools.conversation import PendingInteraction
from durable_tools.transcript import ToolCallOutput, is_reconciled
from durable_tools.worker.plugin import DurableToolsPlugin

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
WAIT = 60.0
T = TypeVar("T")


async def _eventually(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    try:
        async with asyncio.timeout(WAIT):
            while True:
                try:
                    value = await probe()
                except Exception:  # a query racing a worker's start or death
                    value = None
                if value is not None:
                    return value
                await asyncio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"timed out after {WAIT:g} s waiting for {what}")


class _Worker:
    """A worker subprocess (`tests/agent_support.py`) serving the MCP test server as `notes`."""

    def __init__(self, env: WorkflowEnvironment, task_queue: str, tmp: Path, name: str) -> None:
        config = env.client.service_client.config
        self.log = tmp / f"{name}.log"
        environ = {
            **os.environ,
            MCP_LOG_ENV: str(tmp / "mcp.jsonl"),
            MCP_STATE_KEY_ENV: "a-test-key-shared-by-every-server-process-0123456789",
            LEDGER_ENV: str(tmp / "ledger.jsonl"),
            "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)]),
        }
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(TESTS / "agent_support.py"), config.target_host]
                + [env.client.namespace, task_queue, "1.0"],
                cwd=REPO,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # SIGKILL the group: the worker and its MCP server
            )

    async def ready(self) -> None:
        async def probe() -> bool | None:
            if self.proc.poll() is not None:
                pytest.fail(f"worker exited: {self.log.read_text(errors='replace')}")
            return True if "worker-ready" in self.log.read_text(errors="replace") else None

        await _eventually(probe, "a worker to be ready")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def _server_events(tmp: Path, event: str) -> list[dict[str, Any]]:
    log = tmp / "mcp.jsonl"
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event and r.get("tool") == "paint"]


async def test_worker_killed_while_a_call_waits_for_input(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conv = Conversations(client, task_queue=task_queue)
    workflow_id = f"mrtr-kill-{uuid.uuid4()}"
    script = turns(
        [("p", "notes__paint", {"thing": "barn"})],
        [("f1", "finish", {"output": "painted"})],
    )

    def question(round_: int) -> Callable[[], Awaitable[PendingInteraction | None]]:
        async def probe() -> PendingInteraction | None:
            pending = await conv.pending(workflow_id)
            return next(
                (
                    i
                    for i in pending.interactions
                    if i.input_request is not None and i.input_request.round == round_
                ),
                None,
            )

        return probe

    workers: list[_Worker] = []
    try:
        first = _Worker(dev_env, task_queue, tmp_path, "worker-1")
        workers.append(first)
        await first.ready()
        await conv.start(workflow_id, agent=AGENT, message=script)
        asked = await _eventually(question(1), "the first question")
        first.kill()  # while the person decides: no activity runs
        # Answered while no worker runs: the signal waits in the server.
        await conv.answer(workflow_id, "p", {"name": "Di"}, arguments_hash=asked.arguments_hash)
        second = _Worker(dev_env, task_queue, tmp_path, "worker-2")
        workers.append(second)
        await second.ready()
        asked = await _eventually(question(2), "the second question")
        assert asked.input_request is not None
        assert asked.input_request.message == "Which color, Di?"
        await conv.answer(
            workflow_id, "p", {"color": "red"}, arguments_hash=asked.arguments_hash, wait=True
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
    assert len(outputs) == 1 and not outputs[0].is_error
    painted = json.loads(json.loads(outputs[0].content)["result"])
    assert painted["name"] == {"name": "Di"} and painted["color"] == {"color": "red", "coats": 1}
    # Round 1 ran once (never restarted), and the tool body once: one final retry.
    assert [r["state"] for r in _server_events(tmp_path, "round")].count(False) == 1
    finals = _server_events(tmp_path, "call")
    assert len(finals) == 1 and finals[0]["key"] == f"{workflow_id}/p"
