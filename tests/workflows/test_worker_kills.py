"""Workers killed with SIGKILL, against a real dev server.

* In the middle of a tool activity: the attempt is retried on a second worker
  process with the same idempotency key, and every call keeps exactly one
  output.
* In the middle of a local tool's call (a Temporal local activity,
  `local=True`): its workflow task times out, a second worker runs the call
  again with the same idempotency key, every call keeps exactly one output, and
  the history replays.
* In the middle of an MCP call: `interrupted`, never a second call.
* During a slow model request: the model activity's heartbeats stop, and a
  second worker runs the turn after the heartbeat timeout, long before the
  model timeout (300 s).

Tools record what they do to a JSON-lines ledger (`tests/agent_support.py`),
which is how runs are counted, across processes too.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from agent_support import (
    AGENT,
    LEDGER_ENV,
    LOCAL_AGENT,
    MCP_LOG_ENV,
    read_ledger,
    turns,
)
from durability_support import (
    REPO,
    STICKY_TIMEOUT,
    TESTS,
    WAIT,
    activity_starts,
    assert_reconciled,
    output_of,
    result_of,
    time_client,
    until,
)
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from durable_tools.client import Conversations
from durable_tools.conversation import (
    AgentConfig,
    ModelRetry,
)
from durable_tools.transcript import (
    AssistantMessage,
    TranscriptItem,
)
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import AgentWorkflow


class _WorkerProcess:
    """A worker subprocess (`python tests/agent_support.py ADDRESS NAMESPACE QUEUE`)."""

    def __init__(
        self,
        env: WorkflowEnvironment,
        task_queue: str,
        ledger: Path,
        log: Path,
        *,
        mcp_log: Path | None = None,
    ):
        self.log = log
        config = env.client.service_client.config
        environ = {
            **os.environ,
            **({MCP_LOG_ENV: str(mcp_log)} if mcp_log is not None else {}),
            LEDGER_ENV: str(ledger),
            "PYTHONPATH": os.pathsep.join(
                [str(REPO), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(TESTS / "agent_support.py"),
                    config.target_host,
                    env.client.namespace,
                    task_queue,
                    str(STICKY_TIMEOUT),
                ],
                cwd=REPO,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def ready(self, timeout: float = WAIT) -> None:
        async def probe() -> bool | None:
            if "worker-ready" in self.output():
                return True
            if self.proc.poll() is not None:
                pytest.fail(f"worker exited with {self.proc.returncode}:\n{self.output()}")
            return None

        await until(probe, f"worker {self.pid} to be ready", timeout)

    def kill(self) -> None:
        """SIGKILL (if still running) and reap the process (bounded)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


async def test_worker_killed_mid_tool_retries_on_another_worker_with_the_same_key(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    workflow_id = f"sigkill-{uuid.uuid4()}"
    conv = Conversations(time_client(dev_env), task_queue=task_queue)
    script = turns(
        [("s1", "slow_heartbeat", {"seconds": 3})],
        [("f1", "finish", {"output": "slow done"})],
    )
    workers: list[_WorkerProcess] = []
    try:
        first = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-1.log")
        workers.append(first)
        await first.ready()
        handle = await conv.start(workflow_id, agent=AGENT, message=script)

        async def attempt_started() -> bool | None:
            return any(e.get("attempt") == 1 for e in read_ledger(ledger)) or None

        await until(attempt_started, "the first attempt of `slow_heartbeat`")
        first.kill()
        assert first.proc.returncode == -signal.SIGKILL

        second = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-2.log")
        workers.append(second)
        await second.ready()
        result = await result_of(conv, workflow_id)
        transcript = await conv.history(workflow_id)
    finally:
        for worker in workers:
            worker.kill()

    assert result.status == "finished"
    assert result.output == "slow done"
    assert_reconciled(transcript)
    slow = output_of(transcript, "s1")
    assert not slow.is_error, slow
    assert "slept 3" in slow.content

    entries = read_ledger(ledger)
    starts = [e for e in entries if "attempt" in e]
    assert [(e["key"], e["attempt"], e["pid"]) for e in starts] == [
        (f"{workflow_id}/s1", 1, first.pid),
        (f"{workflow_id}/s1", 2, second.pid),
    ]
    assert [e["pid"] for e in entries if e.get("done")] == [second.pid]
    tool_starts = [s for s in await activity_starts(handle) if s[0] == "tool.slow_heartbeat"]
    assert [attempt for _, _, attempt in tool_starts] == [2]  # the server records the last one


async def test_worker_killed_mid_local_tool_runs_it_again_on_another_worker(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """A local activity runs in its workflow task: the kill loses both.

    Nothing of the call is in history until its marker, so the workflow task
    times out (10 s, Temporal's default) and the next worker replays the
    turn and runs the call again, from its first attempt: at least once,
    which is why a local tool must be idempotent.
    """
    ledger = tmp_path / "ledger.jsonl"
    workflow_id = f"sigkill-local-{uuid.uuid4()}"
    conv = Conversations(time_client(dev_env), task_queue=task_queue)
    script = turns(
        [("l1", "slow_local", {"seconds": 3}), ("l2", "lookup_local", {"city": "Oslo"})],
        [("f1", "finish", {"output": "local done"})],
    )
    workers: list[_WorkerProcess] = []
    try:
        first = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-1.log")
        workers.append(first)
        await first.ready()
        handle = await conv.start(workflow_id, agent=LOCAL_AGENT, message=script)

        async def call_started() -> bool | None:
            return any(e.get("tool") == "slow_local" for e in read_ledger(ledger)) or None

        await until(call_started, "the local call of `slow_local`")
        first.kill()
        assert first.proc.returncode == -signal.SIGKILL

        second = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-2.log")
        workers.append(second)
        await second.ready()
        # The workflow task timeout (10 s) passes before the second worker
        # gets the turn, then the call itself (3 s).
        async with asyncio.timeout(WAIT + 10):
            result = await conv.result(workflow_id)
        transcript = await conv.history(workflow_id)
    finally:
        for worker in workers:
            worker.kill()

    assert result.status == "finished"
    assert result.output == "local done"
    assert_reconciled(transcript)
    slow = output_of(transcript, "l1")
    assert not slow.is_error and "slept 3" in slow.content, slow
    assert not output_of(transcript, "l2").is_error

    entries = [e for e in read_ledger(ledger) if e.get("tool") == "slow_local"]
    starts = [(e["key"], e["pid"]) for e in entries if "attempt" in e]
    assert starts == [(f"{workflow_id}/l1", first.pid), (f"{workflow_id}/l1", second.pid)]
    assert [e["pid"] for e in entries if e.get("done")] == [second.pid]
    events = [event async for event in handle.fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT in [e.event_type for e in events]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == ["model.turn", "model.turn"]  # the tools ran as local activities
    markers = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert len(markers) == 2  # one per call: the lost run left nothing behind

    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    replayed = await replayer.replay_workflow(
        await handle.fetch_history(), raise_on_replay_failure=False
    )
    assert replayed.replay_failure is None, repr(replayed.replay_failure)


async def test_worker_killed_mid_mcp_call_gives_interrupted_never_a_second_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """At-most-once: a non-idempotent MCP call whose worker dies is not sent again."""
    ledger, mcp_log = tmp_path / "ledger.jsonl", tmp_path / "mcp.jsonl"
    workflow_id = f"sigkill-mcp-{uuid.uuid4()}"
    conv = Conversations(time_client(dev_env), task_queue=task_queue)
    script = turns(
        [("w1", "notes__slow_record", {"note": "once", "seconds": 600})],
        [("f1", "finish", {"output": "finished"})],
    )

    def calls() -> list[dict[str, Any]]:
        if not mcp_log.exists():
            return []
        events = [json.loads(line) for line in mcp_log.read_text().splitlines() if line]
        return [e for e in events if e["event"] == "call"]

    workers: list[_WorkerProcess] = []
    try:
        first = _WorkerProcess(
            dev_env, task_queue, ledger, tmp_path / "worker-1.log", mcp_log=mcp_log
        )
        workers.append(first)
        await first.ready()
        await conv.start(workflow_id, agent=AGENT, message=script)

        async def call_reached_server() -> bool | None:
            return bool(calls()) or None

        await until(call_reached_server, "the MCP call reaching the server")
        first.kill()
        second = _WorkerProcess(
            dev_env, task_queue, ledger, tmp_path / "worker-2.log", mcp_log=mcp_log
        )
        workers.append(second)
        await second.ready()
        result = await result_of(conv, workflow_id)
        transcript = await conv.history(workflow_id)
    finally:
        for worker in workers:
            worker.kill()

    assert result.status == "finished"
    assert_reconciled(transcript)
    lost = output_of(transcript, "w1")
    assert lost.is_error and lost.failure_kind == "interrupted", lost
    assert "not idempotent" in lost.content
    assert [c["tool"] for c in calls()] == ["slow_record"]  # sent once, never again


async def test_worker_killed_mid_model_call_is_noticed_by_its_heartbeat(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    workflow_id = f"sigkill-model-{uuid.uuid4()}"
    conv = Conversations(time_client(dev_env), task_queue=task_queue)
    # A 5 s heartbeat timeout keeps the test short; the default is 30 s.
    agent = AgentConfig(
        model="slow-model", toolkit="tests", model_retry=ModelRetry(heartbeat_timeout=5)
    )
    workers: list[_WorkerProcess] = []
    try:
        first = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-1.log")
        workers.append(first)
        await first.ready()
        handle = await conv.start(workflow_id, agent=agent, message="4")

        async def model_started() -> bool | None:
            return any(e.get("model") == "slow" for e in read_ledger(ledger)) or None

        await until(model_started, "the first attempt of the model turn")
        killed_at = time.monotonic()
        first.kill()
        second = _WorkerProcess(dev_env, task_queue, ledger, tmp_path / "worker-2.log")
        workers.append(second)
        await second.ready()

        async def answered() -> list[TranscriptItem] | None:
            items = await conv.history(workflow_id)
            texts = [i.text for i in items if isinstance(i, AssistantMessage)]
            return items if "slow answer after 4 s" in texts else None

        await until(answered, "the model turn on the second worker", timeout=60)
        took = time.monotonic() - killed_at
    finally:
        for worker in workers:
            worker.kill()

    assert took < 60, took  # the model timeout is 300 s
    starts = [(e["pid"], e.get("done", False)) for e in read_ledger(ledger)]
    assert starts == [(first.pid, False), (second.pid, False), (second.pid, True)]
    model_starts = [s for s in await activity_starts(handle) if s[0] == "model.turn"]
    assert [attempt for _, _, attempt in model_starts] == [2]
