"""A turn's calls across continue-as-new, signal tools and outcomes, without a server.

`workflows/continuation.py` (snapshot and restore of a waiting turn),
`workflows/signal_tools.py` (`handoff`, `resume`) and `workflows/turn_calls.py`
(what a turn's outcomes tell the loop).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from durable_tools._wire import CarriedState, PlannedCall
from durable_tools.approvals import Decision
from durable_tools.conversation import Answer, ConversationOptions, Resume
from durable_tools.results import Ok, ToolCall
from durable_tools.signals import Finish, Handoff, Pause
from durable_tools.transcript import ToolCallOutput
from durable_tools.workflows.continuation import restore_turn, snapshot_turn
from durable_tools.workflows.decision_book import DecisionBook
from durable_tools.workflows.handler_inputs import after_turns
from durable_tools.workflows.run_transcript import RunTranscript
from durable_tools.workflows.signal_tools import SignalWaits, handoff_result
from durable_tools.workflows.turn_calls import TurnCalls, fold_outcomes
from durable_tools.workflows.visibility import Visibility
from durable_tools.workflows.waits import MOVED, Waits, seconds_text

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _calls() -> tuple[TurnCalls, RunTranscript]:
    options = ConversationOptions()
    log = RunTranscript(CarriedState(agent="default"))
    view = Visibility(object(), options, None, embedded=False)

    async def no_tool(plan: PlannedCall, toolkit: str) -> Any:
        raise AssertionError("no tool runs here")

    calls = TurnCalls(
        options,
        CarriedState(agent="default"),
        waits=Waits(None, embedded=False),
        view=view,
        transcript=log,
        publish=lambda: None,
        run_tool=no_tool,
        turn=lambda: 1,
    )
    # The same book with a fixed clock (outside a workflow there is no `workflow.now`).
    calls.book = DecisionBook(
        options,
        early_decisions={},
        early_answers={},
        rejected=[],
        event=view.event,
        is_call=calls.is_call,
        now=lambda: NOW,
        instance_of=lambda at: f"run-1@{at.isoformat()}",
    )
    return calls, log


def _outputs(log: RunTranscript) -> list[ToolCallOutput]:
    return [item for item in log.items if isinstance(item, ToolCallOutput)]


def _plan(call_id: str, kind: str = "local", **fields: Any) -> PlannedCall:
    call = ToolCall(call_id=call_id, name=f"tool_{call_id}", arguments="{}")
    return PlannedCall(call=call, kind=kind, arguments_hash=f"h-{call_id}", summary="s", **fields)  # type: ignore[arg-type]


def test_a_waiting_turn_is_carried_with_what_arrived_and_waits_again() -> None:
    calls, _ = _calls()
    approve, ask, pause, done = (
        _plan("c1", needs_approval=True),
        _plan("q1", "interaction"),
        _plan("p1", "signal", action=Pause(reason="stock")),
        _plan("d1"),
    )
    calls.plans = {p.call.call_id: p for p in (approve, ask, pause, done)}
    calls.open = {p.call.call_id: p.call for p in (approve, ask, pause)}
    calls.toolkit = "shop"
    calls.answered.add("d1")
    calls.register_approval(approve)
    calls.register_interaction(ask)
    decision = Decision(call_id="c1", approved=True, arguments_hash="h-c1")
    calls.book.decisions["c1"] = decision
    waits = calls.signal_waits
    waits.paused, waits.pause_call, waits.pause_until = "stock", "p1", NOW
    waits.resume = Resume(message="arrived")

    turn = snapshot_turn(calls)
    assert [c.plan.call.call_id for c in turn.calls] == ["c1", "q1", "p1"]  # d1 is answered
    assert turn.calls[0].decision == decision and turn.calls[1].answer is None
    assert turn.calls[2].pause_until == NOW and turn.calls[0].pause_until is None
    assert (turn.toolkit, turn.paused, turn.resume) == ("shop", "stock", waits.resume)

    restored, _ = _calls()
    restore_turn(turn, restored)
    assert set(restored.open) == {"c1", "q1", "p1"}
    assert restored.book.decisions == {"c1": decision}
    assert set(restored.book.interactions) == {"q1"}
    assert restored.signal_waits.paused == "stock"
    assert restored.signal_waits.pause_until == NOW
    # An answer arriving before the new run's loop finds its question waiting.
    answer = Answer(call_id="q1", value="yes", arguments_hash="h-q1")
    assert restored.book.answer_problem(answer) is None
    # And a decision for a call already decided is refused.
    assert "already received" in (restored.book.decision_problem(decision) or "")


def test_a_recorded_call_gets_one_output_and_leaves_the_open_calls() -> None:
    calls, log = _calls()
    plan = _plan("c1")
    calls.open["c1"] = plan.call
    calls.record(Ok(call_id="c1", tool="tool_c1", value=1))
    calls.record(Ok(call_id="c1", tool="tool_c1", value=2))
    assert [o.content for o in _outputs(log)] == ["1"]
    assert log.sources == {}  # not produced by a tool activity: given whole in the delta
    assert calls.open == {} and calls.is_call("c1")


def test_cancellation_tells_never_started_from_interrupted() -> None:
    calls, log = _calls()
    for call_id in ("a", "b"):
        calls.open[call_id] = _plan(call_id).call
    calls.started.add("b")
    calls.close_open()
    assert [o.failure_kind for o in _outputs(log)] == ["cancelled", "interrupted"]


def test_the_last_handoff_and_the_first_finish_win_unless_a_wait_moved() -> None:
    first, second = Finish(output="a"), Finish(output="b")
    assert fold_outcomes([None, Handoff(agent="x"), Handoff(agent="y")]) == ("y", None)
    assert fold_outcomes([first, second]) == (None, first)
    assert fold_outcomes([first, MOVED, Handoff(agent="x")]) == ("x", MOVED)


def test_a_handoff_names_the_agents_there_are() -> None:
    call = ToolCall(call_id="h1", name="handoff", arguments="{}")
    ok = handoff_result(call, Handoff(agent="billing"), {"billing": 1, "support": 2})
    assert isinstance(ok, Ok) and ok.value == "handed off to billing"
    unknown = handoff_result(call, Handoff(agent="legal"), {"billing": 1, "support": 2})
    assert not isinstance(unknown, Ok)
    assert unknown.kind == "input_validation_error"
    assert unknown.reason.endswith("known agents: billing, support")


def test_a_resume_before_the_pause_is_kept_for_it() -> None:
    waits = SignalWaits()
    early = Resume(message="go on")
    waits.take_resume(early)
    assert waits.early_resume == early and waits.resume is None
    waits.paused = "hold"
    later = Resume(message="now")
    waits.take_resume(later)
    assert waits.resume == later and waits.early_resume == early


def test_small_readings_of_inputs_and_durations() -> None:
    assert after_turns([{"after_turns": 3}]) == 3
    assert after_turns([{"after_turns": True}]) == 0
    assert after_turns(["3"]) == 0 and after_turns([]) == 0
    assert seconds_text(7 * 86400) == "7 days"
    assert seconds_text(7200) == "2 hours"
    assert seconds_text(90) == "90 s"
