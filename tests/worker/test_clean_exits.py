"""Processes exit 0, every time: a worker stopped by SIGTERM and a client script.

temporalio's Rust core can abort a finalizing interpreter (`Fatal Python error:
PyGILState_Release`, sdk-python issue #300; durable_tools.worker.exits), so
these run each process many times on the shared dev server, a few at once:

- `durable-tools worker` gets SIGTERM while its conversation's tool calls
  run (the first tool output is recorded, more are under way), 20 times;
- a client script (tests/worker/approve_script.py, ending with
  `run_and_exit`) approves a pending call and exits, 20 times.

Each exit code is 0, nothing says `Fatal Python error`, and what the
processes did took effect.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from pathlib import Path

from agent_support import turns
from cli_process import ROOT, Running, cli_env
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness

from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig
from durable_tools.transcript import ToolCallOutput

RUNS = 20
AT_ONCE = 4
SCRIPT = Path(__file__).with_name("approve_script.py")


async def _stop_worker_mid_conversation(address: str, logs: Path) -> tuple[int, str]:
    task_queue = f"exit-{uuid.uuid4().hex[:8]}"
    worker = await Running.start(
        "worker",
        "--app",
        "cli_app:app",
        "--address",
        address,
        "--task-queue",
        task_queue,
        "--graceful-shutdown",
        "2",
        stderr=logs / f"{task_queue}.log",
    )
    try:
        await worker.wait_for_line("worker polling", timeout=60)
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        conversations = Conversations(client, task_queue=task_queue)
        workflow_id = f"exit-{task_queue}"
        script = [[(f"c{i}", "slow", {"seconds": 0.3})] for i in range(20)]
        await conversations.start(
            workflow_id,
            agent=AgentConfig(model="directed", toolkit="tests"),
            message=turns(*script),
        )
        async with asyncio.timeout(30):  # mid-conversation: a tool output is in, more follow
            while not any(
                isinstance(item, ToolCallOutput)
                for item in await conversations.history(workflow_id)
            ):
                await asyncio.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
    done = await worker.finish(timeout=60)
    assert "worker stopped" in done.stdout, done.stdout + done.stderr
    return done.code, done.stderr


async def test_worker_stopped_by_sigterm_exits_0_every_time(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    address = dev_env.client.service_client.config.target_host
    limit = asyncio.Semaphore(AT_ONCE)

    async def one() -> tuple[int, str]:
        async with limit:
            return await _stop_worker_mid_conversation(address, tmp_path)

    exits = await asyncio.gather(*(one() for _ in range(RUNS)))
    assert [code for code, _ in exits] == [0] * RUNS, [e for e in exits if e[0] != 0]
    assert not [err for _, err in exits if "Fatal Python error" in err]


async def test_client_script_exits_0_every_time(harness: Harness) -> None:
    address = harness.client.service_client.config.target_host
    waiting: list[str] = []
    for _ in range(RUNS):
        workflow_id = await harness.start(turns([("r1", "refund", {"order": "A-1", "amount": 5})]))
        waiting.append(workflow_id)
    for workflow_id in waiting:
        await harness.wait_approval(workflow_id, "r1")
    limit = asyncio.Semaphore(AT_ONCE)

    async def approve(workflow_id: str) -> tuple[int, str, str]:
        async with limit:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(SCRIPT),
                address,
                harness.task_queue,
                workflow_id,
                "r1",
                cwd=ROOT,
                env=cli_env(),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            async with asyncio.timeout(60):
                out, err = await process.communicate()
            assert process.returncode is not None
            return process.returncode, out.decode(), err.decode()

    exits = await asyncio.gather(*(approve(w) for w in waiting))
    assert [code for code, _, _ in exits] == [0] * RUNS, [e for e in exits if e[0] != 0]
    assert all(out.startswith("approved ") for _, out, _ in exits)
    assert not [err for _, _, err in exits if "Fatal Python error" in err]
    for workflow_id in waiting:  # each approval took effect: the refund ran
        outputs = await harness.wait_outputs(workflow_id, "r1")
        assert "refunded 5 on A-1" in outputs["r1"].content


async def test_run_and_exit_leaves_with_mains_status() -> None:
    cases = {
        "pass": (0, ""),
        "raise SystemExit(3)": (3, ""),
        "raise SystemExit('bad input')": (1, "bad input\n"),
        "raise ValueError('boom')": (1, "ValueError: boom\n"),
    }
    for body, (want, stderr_end) in cases.items():
        code = (
            "from durable_tools.worker import run_and_exit\n"
            f"async def main():\n    print('ran', flush=False)\n    {body}\n"
            "run_and_exit(main)\n"
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            cwd=ROOT,
            env=cli_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            out, err = await process.communicate()
        assert process.returncode == want, (body, err.decode())
        assert out.decode() == "ran\n", body  # flushed before os._exit
        assert err.decode().endswith(stderr_end), (body, err.decode())
