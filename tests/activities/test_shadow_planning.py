"""Shadow mode while a turn's calls are planned: what counts as a disagreement, and what not."""

from __future__ import annotations

import json
from typing import Any

from tracing_support import meter_provider

from durable_tools import Toolkit, tool
from durable_tools._wire import ModelTurn, PlannedCall
from durable_tools.activities.call_policies import CallPolicies
from durable_tools.activities.planning import plan_calls
from durable_tools.policies import Policy, Rule
from durable_tools.policy_verdict import disagreement_text
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage


@tool(needs_approval=True, approvers=["group:ops"])
async def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    return path


@tool
async def look(path: str) -> str:
    """Look at a path.

    Args:
        path: The path.
    """
    return path


KIT = Toolkit(wipe, look, label="kit")


def _plan(
    name: str, active: list[Policy], candidate: list[Policy] | None, path: str = "/srv/x"
) -> PlannedCall:
    call = ToolCall(call_id="c1", name=name, arguments=json.dumps({"path": path}))
    policies = CallPolicies(
        lambda _: active, [], {}, candidates_for=(lambda _: candidate) if candidate else None
    )
    [plan] = plan_calls(KIT, [call], [], policies=policies)
    return plan


def _policy(name: str, *rules: Rule) -> Policy:
    return Policy(name, list(rules))


RUN_ALL = _policy("open", Rule(id="all", when="true", outcome="run"))
TWO_OPS = _policy(
    "strict", Rule(id="two", when="true", outcome="approve", groups=("ops",), quorum=2)
)
ONE_OPS = _policy("one", Rule(id="one", when="true", outcome="approve", groups=("ops",)))
DENY_SRV = _policy(
    "deny", Rule(id="srv", when='args.path.startsWith("/srv")', outcome="deny", reason="no")
)


def test_the_candidate_changes_nothing_and_its_disagreement_is_recorded() -> None:
    plan = _plan("look", [RUN_ALL], [DENY_SRV])
    assert plan.failure is None and not plan.needs_approval  # the active policy decided
    assert plan.policy is not None and plan.policy.rule == "all"
    assert plan.shadow is not None
    assert plan.shadow.candidate is not None and plan.shadow.candidate.rule == "srv"
    assert disagreement_text(plan.shadow) == "run -> deny"


def test_quorum_and_approvers_are_disagreements_too() -> None:
    plan = _plan("look", [ONE_OPS], [TWO_OPS])
    assert plan.needs_approval and plan.policy is not None and plan.policy.quorum == 1
    assert plan.shadow is not None
    assert disagreement_text(plan.shadow) == "approve(1 ops) -> approve(2 ops)"


def test_the_tool_own_needs_approval_is_either_side_when_no_policy_decides() -> None:
    # No active policy decides `wipe`: its own needs_approval (ops) does.
    plan = _plan("wipe", [DENY_SRV], [RUN_ALL], path="/tmp/x")
    assert plan.needs_approval and plan.policy is None
    assert plan.shadow is not None and disagreement_text(plan.shadow) == "approve(1 ops) -> run"
    # The same effect by another route is no disagreement: the tool's own
    # approval by ops, and a candidate rule asking ops for one approval.
    assert _plan("wipe", [DENY_SRV], [ONE_OPS], path="/tmp/x").shadow is None
    # Nor is the same verdict.
    assert _plan("look", [ONE_OPS], [ONE_OPS]).shadow is None


def test_no_candidate_records_nothing_and_the_record_round_trips() -> None:
    assert _plan("look", [RUN_ALL], None).shadow is None
    plan = _plan("look", [RUN_ALL], [TWO_OPS])
    turn = ModelTurn(message=AssistantMessage(tool_calls=(plan.call,)), plans=[plan])
    again = ModelTurn.model_validate_json(turn.model_dump_json())
    assert again.plans[0].shadow == plan.shadow
    plain = ModelTurn(
        message=AssistantMessage(tool_calls=(plan.call,)),
        plans=[plan.model_copy(update={"shadow": None})],
    )
    assert "shadow" not in plain.model_dump_json()  # left out: old histories unchanged


def test_each_disagreement_is_counted_in_the_metric() -> None:
    reader = meter_provider()
    before = _disagreements(reader)
    _plan("look", [RUN_ALL], [TWO_OPS])
    _plan("look", [RUN_ALL], [TWO_OPS])
    _plan("look", [RUN_ALL], [RUN_ALL])  # agreement: not counted
    after = _disagreements(reader)
    key = ("look", "open/all", "strict/two")
    assert after.get(key, 0) - before.get(key, 0) == 2


def _disagreements(reader: Any) -> dict[tuple[str, str, str], int]:
    data = reader.get_metrics_data()
    found: dict[tuple[str, str, str], int] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "durable_tools.policy.disagreements":
                    continue
                for point in metric.data.data_points:
                    a = point.attributes
                    key = (
                        a["gen_ai.tool.name"],
                        a["durable_tools.policy.rule"],
                        a["durable_tools.policy.candidate_rule"],
                    )
                    found[key] = found.get(key, 0) + point.value
    return found
