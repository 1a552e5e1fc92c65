"""`durable-tools worker` without `--allow-offline-models` serves declared agents only.

A production worker (`--app` with agents, no flag) refuses the offline
`test` model and undeclared agents; `run --agent NAME --var K=V` runs the
declared agent with its variables filled.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import AsyncIterator

import pytest
from agent_support import turns
from cli_process import Running, cli
from temporalio.testing import WorkflowEnvironment


@pytest.fixture(scope="module")
async def production(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[list[str]]:
    address = dev_env.client.service_client.config.target_host
    task_queue = f"cli-agents-{uuid.uuid4().hex[:8]}"
    log = tmp_path_factory.mktemp("worker") / "stderr.log"
    worker = await Running.start(
        "worker",
        "--app",
        "cli_app:agents_app",
        "--address",
        address,
        "--task-queue",
        task_queue,
        "--graceful-shutdown",
        "2",
        stderr=log,
    )
    try:
        line = await worker.wait_for_line("worker polling", timeout=60)
        assert "agents: support" in line and "offline models (test, scripted:FILE): refused" in line
        yield ["--address", address, "--task-queue", task_queue]
    finally:
        worker.send_signal(signal.SIGTERM)
        done = await worker.finish(timeout=30)
        assert done.code == 0, done.stderr


async def test_production_worker_refuses_the_test_model(production: list[str]) -> None:
    done = await cli("run", "--toolkit", "weather", *production, "Weather in Oslo?")
    assert done.code == 1, done.stdout + done.stderr
    assert "model turn 1 failed (AgentRefused): agent 'default' is not declared" in (done.stdout), (
        done.stdout
    )
    assert "→ get_weather" not in done.stdout


async def test_production_worker_refuses_undeclared_agents(production: list[str]) -> None:
    done = await cli("run", "--agent", "admin", *production, "hi")
    assert done.code == 1, done.stdout + done.stderr
    assert (
        "(AgentRefused): agent 'admin' is not declared on this worker (declared: support)"
    ) in done.stdout, done.stdout


async def test_run_a_declared_agent_with_variables(production: list[str]) -> None:
    prompt = turns([("c1", "get_weather", {"city": "Oslo"})])
    done = await cli("run", "--agent", "support", "--var", "customer_name=Ana", *production, prompt)
    assert done.code == 0, done.stdout + done.stderr
    assert "agent support" in done.stdout and "✓ get_weather" in done.stdout, done.stdout


async def test_run_refuses_a_malformed_var(production: list[str]) -> None:
    done = await cli("run", "--agent", "support", "--var", "customer_name", *production, "hi")
    assert done.code == 2 and "invalid --var 'customer_name': use NAME=VALUE" in done.stderr
