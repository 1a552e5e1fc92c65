"""Reading policy records from conversations' histories: verdicts and shadow-mode diffs.

Each model turn's plans are recorded in history as the `model.turn`
activity's result (`ModelTurn.plans`), with the active policy's verdict
(`PlannedCall.policy`) and, in shadow mode, the candidate's disagreement
(`PlannedCall.shadow`). These reads decode them from the workflow's history
(no worker needed), newest run first, back through continue-as-new, with
the answers of live changes' re-evaluations (`policy.reevaluate-v1`):
`Conversations.policy_verdict` (`durable-tools policy explain`) and
`Conversations.policy_diff` (`durable-tools policy diff`), which sums the
disagreements of recent conversations.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from typing import Any

from pydantic import BaseModel, Field
from temporalio.client import Client

from durable_tools._policy_wire import REEVALUATE_ACTIVITY, ReevaluationResult
from durable_tools._wire import MODEL_TURN_ACTIVITY, ModelTurn, PlannedCall
from durable_tools.policy_verdict import PolicyVerdict, disagreement_text, rule_label

__all__ = [
    "MAX_EXAMPLES",
    "MAX_RUNS_READ",
    "DisagreementCount",
    "PolicyDiff",
    "ToolDisagreements",
    "latest_verdict",
    "planned_calls",
    "read_plans",
    "recorded_runs",
    "summarize_disagreements",
]

MAX_RUNS_READ = 100
"""Runs read back through continue-as-new before a read gives up."""

MAX_EXAMPLES = 3
"""Example conversation ids kept per row of a `PolicyDiff`."""


async def recorded_runs(
    client: Client, workflow_id: str
) -> AsyncIterator[list[ModelTurn | ReevaluationResult]]:
    """Per run, newest first: the `model.turn` and `policy.reevaluate-v1` results, in order.

    Decoded with the client's data converter.

    Raises:
        temporalio.service.RPCError: The conversation does not exist
            (`NOT_FOUND`) or the server cannot be reached.
    """
    types: dict[str, Any] = {
        MODEL_TURN_ACTIVITY: ModelTurn,
        REEVALUATE_ACTIVITY: ReevaluationResult,
    }
    run_id: str | None = None
    for _ in range(MAX_RUNS_READ):
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        history = await handle.fetch_history()
        scheduled: dict[int, Any] = {}
        previous = ""
        results: list[ModelTurn | ReevaluationResult] = []
        for event in history.events:
            if event.HasField("workflow_execution_started_event_attributes"):
                started = event.workflow_execution_started_event_attributes
                previous = started.continued_execution_run_id
            elif event.HasField("activity_task_scheduled_event_attributes"):
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                if name in types:
                    scheduled[event.event_id] = types[name]
            elif event.HasField("activity_task_completed_event_attributes"):
                completed = event.activity_task_completed_event_attributes
                kind = scheduled.get(completed.scheduled_event_id)
                if kind is None:
                    continue
                [result] = await client.data_converter.decode(completed.result.payloads, [kind])
                results.append(result)
        yield results
        if not previous:
            return
        run_id = previous


async def planned_calls(client: Client, workflow_id: str) -> AsyncIterator[PlannedCall]:
    """Every planned call recorded in a conversation's history, newest run first.

    Within a run, in the order they were planned (`recorded_runs`).
    """
    async for results in recorded_runs(client, workflow_id):
        for result in results:
            if isinstance(result, ModelTurn):
                for plan in result.plans:
                    yield plan


async def latest_verdict(client: Client, workflow_id: str, call_id: str) -> PolicyVerdict | None:
    """The verdict that decides a call now: its plan's, or a live change's re-evaluation's.

    `None`: no policy decided it (the tool's own `needs_approval` did), or
    no such call was planned.
    """
    async for results in recorded_runs(client, workflow_id):
        found: list[PolicyVerdict | None] = []
        for result in results:
            if isinstance(result, ModelTurn):
                found += [p.policy for p in result.plans if p.call.call_id == call_id]
            else:
                found += [a.policy for a in result.calls if a.call_id == call_id]
        if found:
            return found[-1]
    return None


class DisagreementCount(BaseModel):
    """Calls on which the candidate disagreed in one way: rule pair and effect pair.

    Attributes:
        active: `policy/rule` of the active verdict (`(tool)`: the tool's own
            `needs_approval` decided; `policy/(default)`: the policy's default).
        active_version: The active verdict's version (`sha256:...`; `""` when
            the tool's own `needs_approval` decided): rows of two versions of
            one policy are counted apart.
        candidate: `policy/rule` of the candidate's verdict.
        outcomes: `ACTIVE -> CANDIDATE` effects, e.g. `run -> approve(1 finance)`.
        count: Calls.
        examples: Up to `MAX_EXAMPLES` conversation ids.
    """

    active: str
    candidate: str
    outcomes: str
    active_version: str = ""
    count: int = 0
    examples: list[str] = Field(default_factory=list[str])


class ToolDisagreements(BaseModel):
    """Calls of one tool on which the candidate disagreed.

    Attributes:
        tool: The tool's name.
        count: Calls.
        examples: Up to `MAX_EXAMPLES` conversation ids.
    """

    tool: str
    count: int = 0
    examples: list[str] = Field(default_factory=list[str])


class PolicyDiff(BaseModel):
    """What a candidate policy would have decided otherwise, over some conversations.

    Attributes:
        conversations: Conversations read.
        calls: Planned calls read (all of them, agreeing or not).
        disagreements: Calls on which the candidate disagreed.
        conversations_disagreeing: Conversations with at least one.
        by_rules: Per (active rule and version, candidate rule, effects),
            most first.
        by_tool: Per tool, most first.
        active_versions: Per active policy version (`refunds sha256:...`;
            `(tool)` for calls no policy decided), the calls it planned,
            agreeing or not: which version the candidate was compared with.
    """

    conversations: int = 0
    calls: int = 0
    disagreements: int = 0
    conversations_disagreeing: int = 0
    by_rules: list[DisagreementCount] = Field(default_factory=list[DisagreementCount])
    by_tool: list[ToolDisagreements] = Field(default_factory=list[ToolDisagreements])
    active_versions: dict[str, int] = Field(default_factory=dict[str, int])


def summarize_disagreements(read: Iterable[tuple[str, list[PlannedCall]]]) -> PolicyDiff:
    """Sum the disagreements of conversations' planned calls (`workflow_id`, plans).

    Rows are sorted by count (most first), then by their keys.
    """
    diff = PolicyDiff()
    rules: dict[tuple[str, str, str, str], DisagreementCount] = {}
    tools: dict[str, ToolDisagreements] = {}
    versions: Counter[str] = Counter()
    for workflow_id, plans in read:
        diff.conversations += 1
        diff.calls += len(plans)
        found = False
        for plan in plans:
            active = plan.policy
            versions[f"{active.policy} {active.version}" if active else "(tool)"] += 1
            if plan.shadow is None:
                continue
            found = True
            diff.disagreements += 1
            outcomes = disagreement_text(plan.shadow)
            version = active.version if active is not None else ""
            key = (rule_label(active), rule_label(plan.shadow.candidate), outcomes, version)
            row = rules.setdefault(
                key,
                DisagreementCount(
                    active=key[0], candidate=key[1], outcomes=outcomes, active_version=version
                ),
            )
            tool = tools.setdefault(plan.call.name, ToolDisagreements(tool=plan.call.name))
            for counted in (row, tool):
                counted.count += 1
                if len(counted.examples) < MAX_EXAMPLES and workflow_id not in counted.examples:
                    counted.examples.append(workflow_id)
        diff.conversations_disagreeing += found
    diff.by_rules = sorted(
        rules.values(),
        key=lambda r: (-r.count, r.active, r.active_version, r.candidate, r.outcomes),
    )
    diff.by_tool = sorted(tools.values(), key=lambda t: (-t.count, t.tool))
    diff.active_versions = dict(sorted(versions.items(), key=lambda v: (-v[1], v[0])))
    return diff


async def read_plans(
    client: Client, workflow_ids: Iterable[str], *, concurrency: int = 8
) -> list[tuple[str, list[PlannedCall]]]:
    """The planned calls of each conversation, `concurrency` histories read at a time."""
    slots = asyncio.Semaphore(concurrency)

    async def one(workflow_id: str) -> tuple[str, list[PlannedCall]]:
        async with slots:
            return workflow_id, [plan async for plan in planned_calls(client, workflow_id)]

    return list(await asyncio.gather(*(one(w) for w in workflow_ids)))
