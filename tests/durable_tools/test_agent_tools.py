"""`agent_tool`: what the model sees, how a call is planned, how a sub-agent's result answers it.

Pure parts, no server (the durable runs are tests/workflows/test_sub_agents.py).
"""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from durable_tools import RunAgent, Toolkit, agent_tool
from durable_tools._wire import PlannedCall
from durable_tools.activities.planning import plan_calls
from durable_tools.agent_tools import (
    MAX_SUB_AGENT_OUTPUT_BYTES,
    SUB_AGENT_FAILED,
    sub_agent_result,
    sub_agent_workflow_id,
)
from durable_tools.conversation import ConversationResult
from durable_tools.errors import ConfigurationError, InvalidToolName
from durable_tools.results import Failure, Ok, ToolCall


class Question(BaseModel):
    """A structured task."""

    topic: str
    depth: int = 1


KIT = Toolkit(
    agent_tool("researcher"),
    agent_tool("analyst", name="ask_analyst", parameters=Question, description="Analyse."),
)


def _plan(name: str, arguments: str) -> PlannedCall:
    (plan,) = plan_calls(KIT, [ToolCall(call_id="c1", name=name, arguments=arguments)], [])
    return plan


def test_a_message_call_plans_a_run_agent_action() -> None:
    plan = _plan("researcher", json.dumps({"message": "find the answer"}))
    assert plan.failure is None
    assert plan.action == RunAgent(agent="researcher", message="find the answer")


def test_structured_input_is_the_sub_agents_message_as_json() -> None:
    plan = _plan("ask_analyst", json.dumps({"topic": "rates"}))
    action = plan.action
    assert isinstance(action, RunAgent) and action.agent == "analyst"
    assert json.loads(action.message) == {"topic": "rates", "depth": 1}
    descriptor = KIT.tools["ask_analyst"].descriptor()
    assert descriptor.parameters["required"] == ["topic"]
    assert descriptor.description == "Analyse."


@pytest.mark.parametrize(
    "arguments",
    [
        "not json",
        "[]",
        json.dumps({"message": 3}),
        json.dumps({"message": ""}),
        json.dumps({"message": "x", "extra": 1}),
        '{"message": "\\ud800"}',
    ],
)
def test_hostile_arguments_are_an_input_validation_error(arguments: str) -> None:
    plan = _plan("researcher", arguments)
    failure = plan.failure
    assert isinstance(failure, Failure) and failure.kind == "input_validation_error"
    assert plan.action is None


def test_construction_mistakes_raise() -> None:
    with pytest.raises(ConfigurationError):
        agent_tool("")
    with pytest.raises(InvalidToolName):
        agent_tool("research desk")  # not a valid tool name: give name=...
    assert agent_tool("research desk", name="research_desk").name == "research_desk"


def _result(status: str, output: object, turns: int = 2) -> ConversationResult:
    return ConversationResult.model_validate(
        {"status": status, "output": output, "turns": turns, "transcript_items": 5}
    )


CALL = ToolCall(call_id="c1", name="researcher", arguments="{}")


def test_a_finished_sub_agents_output_is_the_result() -> None:
    ok = sub_agent_result(CALL, "researcher", "w/sub-agent/1/c1", _result("finished", {"a": 1}))
    assert ok == Ok(call_id="c1", tool="researcher", value={"a": 1})


def test_other_ends_and_oversized_outputs_are_failures() -> None:
    limit = sub_agent_result(CALL, "researcher", "w/x", _result("turn_limit", "almost", 9))
    assert isinstance(limit, Failure) and limit.kind == SUB_AGENT_FAILED
    assert "ended with turn_limit after 9 model turns" in limit.reason
    assert "almost" in limit.reason and "w/x" in limit.reason
    big = "x" * (MAX_SUB_AGENT_OUTPUT_BYTES + 1)
    too_large = sub_agent_result(CALL, "researcher", "w/x", _result("finished", big))
    assert isinstance(too_large, Failure) and too_large.kind == "output_too_large"


def test_child_ids_are_stable_bounded_and_plain() -> None:
    assert sub_agent_workflow_id("p", 2, "call_1") == "p/sub-agent/2/call_1"
    hostile = sub_agent_workflow_id("p", 2, "\ud800/../" + "z" * 500)
    assert hostile == sub_agent_workflow_id("p", 2, "\ud800/../" + "z" * 500)
    assert hostile.startswith("p/sub-agent/2/h") and len(hostile) < 60
    long_parent = sub_agent_workflow_id("p" * 1000, 1, "c")
    assert len(long_parent) <= 900 and long_parent.startswith("sub-agent-")
