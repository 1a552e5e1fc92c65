"""The tool model imports and works inside Temporal's workflow sandbox.

The sandbox re-imports every module that is not passed through and fails the
worker if a module does I/O or touches restricted APIs at import. Here nothing
of durable-tools is passed through, so this fails if the tool model ever gains
an import-time side effect.
"""

import uuid
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import durable_tools as dt
from durable_tools.worker.plugin import STRICT_SANDBOX_ENV, DurableToolsPlugin, sandbox_runner
from durable_tools.workflows.agent_workflow import AgentWorkflow, StrictAgentWorkflow


@workflow.defn(name="SandboxImportProbe")
class SandboxImportProbe:
    @workflow.run
    async def run(self) -> list[str]:
        kit = dt.Toolkit(
            dt.dynamic_tool(
                "lookup",
                parameters={"type": "object", "properties": {"q": {"type": "string"}}},
                run=lambda args: args,
            ),
            dt.sleep_tool(),
        )
        decoded = kit.get("lookup").decode('{"q": "x"}')
        plan = dt.plan_approvals(
            [dt.ToolCall(call_id="c", name="lookup", arguments='{"q": "x"}')],
            lambda call: False,
            {},
        )
        return [d.name for d in kit.descriptors()] + [decoded["q"], plan.approved[0].call_id]


async def test_tool_model_runs_in_the_default_sandbox(time_env: WorkflowEnvironment):
    task_queue = f"sandbox-{uuid.uuid4()}"
    async with Worker(
        time_env.client,
        task_queue=task_queue,
        workflows=[SandboxImportProbe],
        workflow_runner=SandboxedWorkflowRunner(),
    ):
        result = await time_env.client.execute_workflow(
            SandboxImportProbe.run,
            id=f"sandbox-{uuid.uuid4()}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=30),
        )
    assert result == ["lookup", "sleep", "x", "c"]


def test_the_loop_is_passed_through_unless_the_sandbox_is_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Re-importing the loop per run cost a third of the worker's CPU per call (issue 26).

    The strict runner (replay tests, `DURABLE_TOOLS_STRICT_SANDBOX=1`) keeps
    re-importing it, so the sandbox's run-time checks apply to the loop.
    """

    def passed(runner: object) -> set[str]:
        assert isinstance(runner, SandboxedWorkflowRunner)
        return set(runner.restrictions.passthrough_modules)

    monkeypatch.delenv(STRICT_SANDBOX_ENV, raising=False)
    fast, strict = passed(sandbox_runner()), passed(sandbox_runner(strict=True))
    assert "durable_tools.workflows" in fast
    assert "durable_tools.workflows" not in strict
    assert {"durable_tools.activities", "durable_tools.transcript", "pydantic"} <= strict & fast
    assert not any(m.startswith("durable_tools.worker") for m in fast | strict)
    monkeypatch.setenv(STRICT_SANDBOX_ENV, "1")
    assert "durable_tools.workflows" not in passed(sandbox_runner())


def test_workers_run_the_loop_outside_the_sandbox_unless_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sandbox checked nothing of the passed-through loop and cost a fifth of the CPU."""
    fast = workflow._Definition.must_from_class(AgentWorkflow)  # pyright: ignore[reportPrivateUsage]
    strict = workflow._Definition.must_from_class(StrictAgentWorkflow)  # pyright: ignore[reportPrivateUsage]
    assert (fast.name, fast.sandboxed) == ("AgentWorkflow", False)
    assert (strict.name, strict.sandboxed) == ("AgentWorkflow", True)

    def registered() -> object:
        return DurableToolsPlugin(toolkits={}, models={}, search_attributes=False).workflows

    monkeypatch.delenv(STRICT_SANDBOX_ENV, raising=False)
    assert registered() == [AgentWorkflow]
    monkeypatch.setenv(STRICT_SANDBOX_ENV, "1")
    assert registered() == [StrictAgentWorkflow]
