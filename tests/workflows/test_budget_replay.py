"""A budget's stop replays from history (`histories/budget_raised.json`).

Recorded by `record_histories.py budget_raised`: a budget of 1,000 tokens, a
model that reports 400 tokens a call; the third model call waited for
`raise_budget`. Its cost was priced on the worker and recorded in each model
turn's result, so replay reads no price table; a loop that does not stop
issues the third `model.turn` before the signal and fails replay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_tools._wire import ConversationInput, ModelTurn
from durable_tools.conversation import ConversationResult
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import AgentWorkflow, StrictAgentWorkflow
from durable_tools.workflows.budget_check import BudgetCheck

PATH = Path(__file__).resolve().parent / "histories" / "budget_raised.json"
CALL_USD = (200 * 1.0 + 100 * 0.5 + 100 * 2.0) / 1_000_000


def _history() -> WorkflowHistory:
    return WorkflowHistory.from_json("budget_raised", PATH.read_text())


def _replayer(workflow_class: type) -> Replayer:
    return Replayer(
        workflows=[workflow_class],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(strict=True),
    )


def test_the_third_model_call_ran_after_the_raise_and_costs_are_recorded() -> None:
    history = _history()
    steps: list[str] = []
    costs: list[float | None] = []
    scheduled: dict[int, str] = {}
    converter = pydantic_data_converter.payload_converter
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = name
            steps.append(name)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            steps.append(event.workflow_execution_signaled_event_attributes.signal_name)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            if scheduled[attributes.scheduled_event_id] == "model.turn":
                (payload,) = attributes.result.payloads
                turn = converter.from_payload(payload, ModelTurn)
                costs.append(turn.cost_usd)
    assert steps == [
        "model.turn",
        "tool.get_weather",
        "model.turn",
        "tool.get_weather",
        "raise_budget",
        "model.turn",
    ]
    assert costs == [pytest.approx(CALL_USD)] * 3


async def test_the_recorded_stop_replays() -> None:
    result = await _replayer(StrictAgentWorkflow).replay_workflow(
        _history(), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, repr(result.replay_failure)


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class NoBudgetCheck(AgentWorkflow):
    """The loop with budgets never checked (unsandboxed: this module reads files)."""

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        return await super().run(input)


async def test_a_loop_that_does_not_stop_fails_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(self: BudgetCheck, agent: str, turn: int) -> Any:
        return None

    monkeypatch.setattr(BudgetCheck, "check", never)
    with pytest.raises(workflow.NondeterminismError):
        await _replayer(NoBudgetCheck).replay_workflow(_history())
