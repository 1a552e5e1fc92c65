"""`durable_tools.policies`: CEL rules decide a call; versions, fail closed, quorum bookkeeping."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_tools._wire import CarriedCall, PlannedCall
from durable_tools.approvals import Decision, call_digest
from durable_tools.conversation import ConversationOptions
from durable_tools.errors import ConfigurationError, MissingExtra
from durable_tools.policies import Policy, PolicyInput, Rule, decide
from durable_tools.policy_verdict import PolicyVerdict, explain_verdict
from durable_tools.results import ToolCall
from durable_tools.workflows.decision_book import DecisionBook

REFUNDS = Policy(
    "refunds",
    [
        Rule(
            id="never",
            when='tool == "refund" && args.cents > 1000000',
            outcome="deny",
            reason="never above 10,000 EUR",
        ),
        Rule(
            id="two",
            when='tool == "refund" && args.cents > 100000',
            outcome="approve",
            groups=("finance",),
            quorum=2,
        ),
        Rule(
            id="large",
            when='tool == "refund" && args.cents > 5000',
            outcome="approve",
            groups=("finance",),
        ),
        Rule(id="small", when='tool == "refund"', outcome="run"),
    ],
)


def _refund(cents: Any) -> PolicyVerdict | None:
    return REFUNDS.decide(PolicyInput(tool="refund", args={"cents": cents}))


def test_the_first_matching_rule_decides() -> None:
    outcomes = {c: _refund(c) for c in (0, 5000, 5001, 100001, 1000001)}
    assert {c: (v.rule, v.outcome) for c, v in outcomes.items() if v} == {
        0: ("small", "run"),
        5000: ("small", "run"),
        5001: ("large", "approve"),
        100001: ("two", "approve"),
        1000001: ("never", "deny"),
    }
    two = outcomes[100001]
    assert two is not None and (two.approvers, two.quorum) == (["group:finance"], 2)
    assert REFUNDS.decide(PolicyInput(tool="lookup")) is None  # nothing matched, no default


def test_defaults_and_the_order_of_policies() -> None:
    gate_all = Policy("strict", [], default="approve")
    verdict = decide([REFUNDS, gate_all], PolicyInput(tool="lookup"), tool_approvers=["user:x"])
    assert verdict is not None and verdict.policy == "strict" and verdict.rule == ""
    assert verdict.approvers == ["user:x"]
    assert explain_verdict(verdict).startswith("needs user:x approval: no rule matched")
    verdict = decide([REFUNDS, gate_all], PolicyInput(tool="refund", args={"cents": 1}))
    assert verdict is not None and verdict.policy == "refunds"


def test_the_version_is_the_digest_of_the_canonical_text() -> None:
    text = "name: p\nrules:\n  - {id: a, when: 'tool == \"x\"', outcome: run}\n"
    same = '{"rules": [{"outcome": "run", "when": "tool == \\"x\\"", "id": "a"}], "name": "p"}'
    assert Policy.from_text(text).version == Policy.from_text(same).version
    other = Policy.from_text(text.replace("run", "deny"))
    assert other.version != Policy.from_text(text).version
    assert Policy.from_text(text).version.startswith("sha256:")


def test_configuration_mistakes_raise_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="does not compile"):
        Policy("p", [Rule(id="a", when="tool ==", outcome="run")])
    with pytest.raises(ConfigurationError, match="two rules have the id"):
        Policy("p", [Rule(id="a", when="true", outcome="run")] * 2)
    with pytest.raises(ConfigurationError, match="a quorum needs groups"):
        Policy("p", [Rule(id="a", when="true", outcome="approve", quorum=2)])
    with pytest.raises(ConfigurationError, match="invalid policy text"):
        Policy.from_text("name: p\nrules: [{id: a, when: 'true', outcome: maybe}]")


def test_rules_that_cannot_decide_fail_closed_with_the_error() -> None:
    kept = Policy("p", [Rule(id="bad", when="(", outcome="deny", groups=("ops",))], check=False)
    verdict = kept.decide(PolicyInput(tool="x"))
    assert verdict is not None and verdict.outcome == "approve"
    assert verdict.approvers == ["group:ops"] and "does not compile" in verdict.error
    for cents in ("5000", None, float("nan"), "\ud800", [1], {"a": 1}):
        verdict = _refund(cents)
        assert verdict is not None and verdict.outcome == "approve" and verdict.error, cents
        assert verdict.rule == "never"
    not_bool = Policy("p", [Rule(id="n", when="1", outcome="run")])
    verdict = not_bool.decide(PolicyInput(tool="x"))
    assert verdict is not None and "gave int, not a bool" in verdict.error


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(args=st.dictionaries(st.text(), JSON, max_size=5), tool=st.text(max_size=30))
def test_any_input_gives_a_verdict_that_can_be_recorded(args: dict[str, Any], tool: str) -> None:
    verdict = REFUNDS.decide(PolicyInput(tool=tool, args=args, conversation={"caller": tool}))
    if verdict is not None:
        verdict.model_dump_json()  # encodable: what history and queries hold
        json.dumps(verdict.error)


# ---------------------------------------------------------------- quorum


def _book() -> tuple[DecisionBook, list[str]]:
    kinds: list[str] = []
    book = DecisionBook(
        ConversationOptions(),
        early_decisions={},
        early_answers={},
        rejected=[],
        event=lambda kind, **_: kinds.append(kind),
        is_call=lambda _: False,
        now=lambda: datetime(2026, 11, 26, tzinfo=UTC),
        instance_of=lambda _: "",
    )
    return book, kinds


def _plan(quorum: int) -> PlannedCall:
    call = ToolCall(call_id="c1", name="refund", arguments='{"cents": 200000}')
    verdict = PolicyVerdict(
        policy="p", version="sha256:0", rule="two", outcome="approve", approvers=[], quorum=quorum
    )
    return PlannedCall(
        call=call,
        kind="local",
        needs_approval=True,
        policy=verdict,
        arguments_hash=call_digest("refund", "c1", call.arguments),
        summary="r",
    )


def _decision(plan: PlannedCall, who: str, approved: bool = True) -> Decision:
    return Decision(
        call_id="c1", arguments_hash=plan.arguments_hash, approved=approved, decided_by=who
    )


def test_a_quorum_counts_each_person_once() -> None:
    book, kinds = _book()
    plan = _plan(2)
    book.register_approval(plan)
    assert book.approvals["c1"].quorum == 2 and book.approvals["c1"].policy == plan.policy
    book.take(_decision(plan, "ana"))
    assert "c1" not in book.decisions and book.approvals["c1"].approved_by == ["ana"]
    assert kinds == ["approval_counted"]
    problem = book.decision_problem(_decision(plan, "ana"))
    assert problem is not None and "each person counts once (1 of 2" in problem
    assert book.decision_problem(_decision(plan, "bob")) is None
    book.take(_decision(plan, "bob"))
    assert book.decisions["c1"].decided_by == "bob"
    assert book.approvals["c1"].approved_by == ["ana", "bob"]


def test_one_denial_decides_a_quorum_call() -> None:
    book, _ = _book()
    plan = _plan(3)
    book.register_approval(plan)
    book.take(_decision(plan, "ana"))
    book.take(_decision(plan, "ana", approved=False))
    assert book.decisions["c1"].approved is False


def test_a_partial_quorum_is_carried_across_continue_as_new() -> None:
    book, _ = _book()
    plan = _plan(2)
    book.register_approval(plan)
    book.take(_decision(plan, "ana"))
    carried = CarriedCall.model_validate_json(
        CarriedCall(plan=plan, **book.waits_of("c1")).model_dump_json()
    )
    after, _ = _book()
    after.restore(carried)
    assert after.approvals["c1"].approved_by == ["ana"] and "c1" not in after.decisions
    problem = after.decision_problem(_decision(plan, "ana"))
    assert problem is not None and "already approved" in problem
    after.take(_decision(plan, "bob"))
    assert after.decisions["c1"].decided_by == "bob"


def test_without_the_policy_extra_a_policy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CEL bindings are the `policy` extra: building a policy without them says so."""
    monkeypatch.setitem(sys.modules, "cel", None)  # `import cel` raises ModuleNotFoundError
    with pytest.raises(MissingExtra) as raised:
        Policy("p", [Rule(id="a", when="true", outcome="run")])
    assert raised.value.extra == "policy"
