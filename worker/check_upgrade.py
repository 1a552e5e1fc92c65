"""`durable-tools check-upgrade`: replay running conversations against the code installed here.

Before deploying new workflow code to unversioned workers (or before moving
pinned conversations to a new version by hand), an operator wants to know
which running conversations the new code would fail to replay. This lists the
running `AgentWorkflow` executions with a visibility query (bounded by
`limit`), downloads each history and replays it with Temporal's `Replayer`
against this installation's `AgentWorkflow`, in the same sandbox a worker
uses. A replay failure (typically a `NondeterminismError`) means that run
would be stuck on the new code: keep the old workers for it (Worker
Versioning does this for you, see docs/operations.md "Upgrades").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from durable_tools.references import guarded
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import AgentWorkflow

__all__ = ["DEFAULT_QUERY", "ReplayVerdict", "check_upgrade"]

DEFAULT_QUERY = "WorkflowType = 'AgentWorkflow' AND ExecutionStatus = 'Running'"
"""The running conversations (a Temporal visibility query)."""


@dataclass(frozen=True)
class ReplayVerdict:
    """One replayed run.

    Attributes:
        workflow_id: The conversation.
        run_id: The run replayed.
        problem: `None` when the history replays; else the failure's one-line
            text (e.g. `Nondeterminism error: ...`).
    """

    workflow_id: str
    run_id: str
    problem: str | None


async def check_upgrade(
    client: Client,
    *,
    query: str = DEFAULT_QUERY,
    limit: int = 100,
    workflows: tuple[type, ...] = (AgentWorkflow,),
) -> list[ReplayVerdict]:
    """Replay up to `limit` runs matching `query` against `workflows`.

    Args:
        client: A client with the data converter (and codec) the workers use.
        query: Visibility query (default: running `AgentWorkflow` runs).
        limit: Most runs downloaded and replayed (default 100).
        workflows: Workflow classes to replay with (default this
            installation's `AgentWorkflow`).

    Returns:
        One verdict per run, in the order visibility listed them.

    Raises:
        temporalio.service.RPCError: The visibility query or a history
            download failed (e.g. a malformed query: `INVALID_ARGUMENT`).
    """
    runs: list[tuple[str, str]] = []
    async for execution in client.list_workflows(query, limit=limit):
        runs.append((execution.id, execution.run_id))

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for workflow_id, run_id in runs:
            yield await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()

    replayer = Replayer(
        workflows=list(workflows),
        workflow_runner=sandbox_runner(),
        # As the worker decodes: references refused without I/O, fetch failures raise.
        data_converter=guarded(client.data_converter),
    )
    verdicts: list[ReplayVerdict] = []
    async with replayer.workflow_replay_iterator(histories()) as results:
        async for result in results:
            failure = result.replay_failure
            problem = None if failure is None else " ".join(str(failure).split())[:500]
            verdicts.append(ReplayVerdict(result.history.workflow_id, "", problem))
    # The replayer reports histories in the order given: attach the run ids.
    return [
        ReplayVerdict(v.workflow_id, run_id, v.problem)
        for v, (_, run_id) in zip(verdicts, runs, strict=True)
    ]
