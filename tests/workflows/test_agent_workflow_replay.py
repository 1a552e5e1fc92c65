"""Recorded `AgentWorkflow` histories replay deterministically (DESIGN.md, invariant 6).

The histories in `histories/` were recorded on a real dev server by
`record_histories.py` (run it by hand after a deliberate change, and commit
the files). Each is replayed against today's workflow code in the sandbox the
worker uses; a change of the commands the workflow issues (another activity,
a timer more or less, another order) fails the replay with a nondeterminism
error, which the last tests prove by replaying against modified workflows.
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import MODELS, TOOLKITS
from jsonschema import FormatChecker
from record_histories import SCENARIOS
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_tools import formats
from durable_tools._wire import ConversationInput, PlannedCall
from durable_tools.conversation import ConversationResult
from durable_tools.worker.plugin import DurableToolsPlugin, sandbox_runner
from durable_tools.workflows.agent_workflow import AgentWorkflow, StrictAgentWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"
FILES = sorted(HISTORIES.glob("*.json"))


def _history(path: Path) -> WorkflowHistory:
    # Recorded with the scenario's name as the workflow id; runs of a
    # conversation that continued as new are `<scenario>.run<k>.json`.
    workflow_id = path.name.split(".")[0]
    return WorkflowHistory.from_json(workflow_id, path.read_text())


def _replayer(*workflows: type) -> Replayer:
    return Replayer(
        workflows=list(workflows),
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(strict=True),
    )


def test_every_scenario_has_a_recorded_history() -> None:
    recorded = {path.name.split(".")[0] for path in FILES}
    assert recorded == set(SCENARIOS)
    assert len([p for p in FILES if p.name.startswith("continue_as_new.run")]) > 1


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_recorded_history_replays(path: Path) -> None:
    result = await _replayer(StrictAgentWorkflow).replay_workflow(
        _history(path), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


async def test_histories_replay_with_the_worker_plugin() -> None:
    """The replayer configured by `DurableToolsPlugin`, as a deployment would run it."""
    replayer = Replayer(
        workflows=[], plugins=[DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)]
    )

    async def histories() -> AsyncIterator[WorkflowHistory]:
        for path in FILES:
            yield _history(path)

    async with replayer.workflow_replay_iterator(histories()) as results:
        replayed = [(r.history.workflow_id, r.replay_failure) async for r in results]
    assert len(replayed) == len(FILES)
    assert [(wid, failure) for wid, failure in replayed if failure is not None] == []


# ------------------------------------------------- the replay test can fail
# Copies of the workflow registered under its name, each issuing different
# commands. Unsandboxed: the sandbox would re-import this test module, whose
# module-level file access it forbids.


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class RenamedToolActivities(AgentWorkflow):
    """Schedules `tool.renamed_<name>` instead of `tool.<name>`."""

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        return await super().run(input)

    async def _execute(self, plan: PlannedCall, toolkit: str):  # type: ignore[override]
        call = plan.call.model_copy(update={"name": f"renamed_{plan.call.name}"})
        return await super()._execute(plan.model_copy(update={"call": call}), toolkit)


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class ExtraTimerBeforeTools(AgentWorkflow):
    """Sleeps one second before answering a turn's calls (one timer more)."""

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        return await super().run(input)

    async def _answer_plans(self, plans: Any, toolkit: str, carried: Any):  # type: ignore[override]
        await workflow.sleep(1)
        return await super()._answer_plans(plans, toolkit, carried)


@pytest.mark.parametrize("modified", [RenamedToolActivities, ExtraTimerBeforeTools])
async def test_a_modified_workflow_fails_replay_with_nondeterminism(modified: type) -> None:
    history = _history(HISTORIES / "approval_approved.json")
    with pytest.raises(workflow.NondeterminismError) as failure:
        await _replayer(modified).replay_workflow(history)
    assert "nondetermin" in str(failure.value).lower()
    # The same history replays against the real workflow.
    await _replayer(StrictAgentWorkflow).replay_workflow(history)


async def test_a_model_failure_recorded_before_model_failed_still_fails_the_same_way() -> None:
    """Before `model_failed`, a failed model turn failed the workflow (`legacy/`).

    Recorded with the code of that time; today's code must replay it to the
    same end (the `model-failed-waits` patch), not wait for an operator.
    """
    path = HISTORIES / "legacy" / "model_failed_before_patch.json"
    result = await _replayer(StrictAgentWorkflow).replay_workflow(
        _history(path), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, repr(result.replay_failure)


async def test_an_answer_format_verdict_is_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`answer_with_format`: a malformed `format: date` answer was rejected and the call expired.

    It replays with the fixed stdlib checker whatever the worker has installed;
    a checker that does not check `date` (as jsonschema's default one would on
    an image without the stdlib check) accepts that answer, cancels the
    deadline timer the history shows firing, and fails the replay.
    """
    history = _history(HISTORIES / "answer_with_format.json")
    await _replayer(StrictAgentWorkflow).replay_workflow(history)
    monkeypatch.setattr(formats, "STDLIB_FORMAT_CHECKER", FormatChecker(formats=()))
    result = await _replayer(StrictAgentWorkflow).replay_workflow(
        history, raise_on_replay_failure=False
    )
    # Core reports it as the cancelled deadline timer meeting its TimerFired event.
    assert result.replay_failure is not None
    assert "TimerFired" in str(result.replay_failure)


async def test_signature_verdicts_replay_from_their_markers_without_keys() -> None:
    """Recorded with the worker holding `k1`; replayed here with no key at all."""
    path = HISTORIES / "signed_decisions.json"
    history = _history(path)
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
    ]
    assert markers.count("core_local_activity") == 2  # the forged and the signed decision
    replayer = Replayer(
        workflows=[],
        plugins=[DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS, decision_keys={})],
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, repr(result.replay_failure)


def test_the_bounded_carry_histories_start_past_item_zero() -> None:
    """`bounded_carry`: runs two to four start from a tail, with the `bounded-carry` marker.

    And `continue_as_new`, recorded before it, carried the whole transcript:
    both replay (`test_recorded_history_replays`), each to its own carry.
    """
    bases: list[int] = []
    for k in range(1, 5):
        history = _history(HISTORIES / f"bounded_carry.run{k}.json")
        started = history.events[0].workflow_execution_started_event_attributes
        (input,) = pydantic_data_converter.payload_converter.from_payloads(
            started.input.payloads, [ConversationInput]
        )
        bases.append(input.state.base if input.state else 0)
        markers = [
            e.marker_recorded_event_attributes.details["patch_data"]
            for e in history.events
            if e.HasField("marker_recorded_event_attributes")
        ]
        assert len(markers) == (1 if k < 4 else 0)  # before each continue-as-new
    assert bases == [0, 3, 7, 11]
    old = _history(HISTORIES / "continue_as_new.run4.json")
    started = old.events[0].workflow_execution_started_event_attributes
    (input,) = pydantic_data_converter.payload_converter.from_payloads(
        started.input.payloads, [ConversationInput]
    )
    assert input.state is not None and input.state.base == 0 and len(input.state.transcript) == 13


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class CarryAlwaysBounded(AgentWorkflow):
    """Carries a bounded tail whether or not the history has the `bounded-carry` marker."""

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        return await super().run(input)

    def _carry(self, *, bounded: bool) -> ConversationInput:
        return super()._carry(bounded=True)


async def test_a_carry_over_2_mb_recorded_before_the_bounded_carry_still_stays_in_its_run() -> None:
    """Three 1.1 MB outputs, continue-as-new every 2 turns, recorded with the code before.

    That code found the carried transcript over 2 MB at turn 2 and stayed in
    the run (one run, 3.3 MB of outputs). Today's code replays it to the same
    end (no marker, so the whole transcript is measured, as then); carrying a
    bounded tail regardless would continue as new there and fail the replay.
    Stored gzipped (4.4 MB of JSON, 17 KB compressed).
    """
    path = HISTORIES / "legacy" / "carry_over_2_mb_before_bounded_carry.json.gz"
    history = WorkflowHistory.from_json(
        "carry_over_2_mb_before_bounded_carry", gzip.decompress(path.read_bytes()).decode()
    )
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW not in kinds
    assert kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) == 7  # 4 model, 3 tool
    result = await _replayer(StrictAgentWorkflow).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert result.replay_failure is None, repr(result.replay_failure)
    result = await _replayer(CarryAlwaysBounded).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
