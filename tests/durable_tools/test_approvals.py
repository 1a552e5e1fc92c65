"""Approvals: decisions bound to call id and argument hash; the planning step."""

from __future__ import annotations

import hashlib

from durable_tools import (
    Decision,
    ToolCall,
    arguments_hash,
    check_decision,
    plan_approvals,
)


def call(call_id: str, arguments: str = '{"amount": 5}', name: str = "pay") -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=arguments)


def decide(c: ToolCall, approved: bool, **kwargs: str) -> Decision:
    return Decision(
        call_id=c.call_id, approved=approved, arguments_hash=arguments_hash(c.arguments), **kwargs
    )


def always(_: ToolCall) -> bool:
    return True


# arguments_hash -------------------------------------------------------------------------


def test_hash_is_sha256_of_the_canonical_json() -> None:
    expected = hashlib.sha256('{"a":1,"b":"é"}'.encode()).hexdigest()
    assert arguments_hash('{ "b" : "é",\n "a": 1 }') == expected
    assert arguments_hash({"a": 1, "b": "é"}) == expected


def test_different_arguments_have_different_hashes() -> None:
    assert arguments_hash('{"amount": 5}') != arguments_hash('{"amount": 50}')
    assert arguments_hash('{"amount": 5}') != arguments_hash('{"amount": "5"}')


def test_unparseable_arguments_are_hashed_as_they_are() -> None:
    assert arguments_hash("{oops") == hashlib.sha256(b"{oops").hexdigest()
    assert len(arguments_hash('{"a": NaN}')) == 64


# check_decision -------------------------------------------------------------------------


def test_a_matching_decision_applies() -> None:
    c = call("c1")
    assert check_decision(c, decide(c, True)) is None


def test_a_decision_for_another_call_is_rejected() -> None:
    problem = check_decision(call("c1"), decide(call("c2"), True))
    assert problem is not None and "'c2'" in problem


def test_a_decision_for_other_arguments_is_rejected() -> None:
    shown = call("c1", '{"amount": 5}')
    actual = call("c1", '{"amount": 5000}')
    problem = check_decision(actual, decide(shown, True))
    assert problem is not None and "arguments hash does not match" in problem


# plan_approvals --------------------------------------------------------------------------


def test_calls_that_need_no_approval_are_approved() -> None:
    c1, c2 = call("c1"), call("c2")
    plan = plan_approvals([c1, c2], lambda c: False, {})
    assert plan.approved == [c1, c2]
    assert plan.pending == [] and plan.rejected == []


def test_gated_calls_without_decisions_are_pending() -> None:
    c1 = call("c1")
    plan = plan_approvals([c1], always, {})
    assert plan.pending == [c1]
    assert plan.approved == [] and plan.invalid_decisions == []


def test_approved_and_denied_decisions_are_applied() -> None:
    c1, c2, c3 = call("c1"), call("c2"), call("c3", name="refund")
    decisions = {
        "c1": decide(c1, True),
        "c2": decide(c2, False, reason="over budget", decided_by="ada@example.com"),
    }
    plan = plan_approvals([c1, c2, c3], lambda c: c.name == "pay", decisions)
    assert plan.approved == [c1, c3]
    assert plan.pending == []
    [failure] = plan.rejected
    assert failure.call_id == "c2" and failure.kind == "denied" and failure.tool == "pay"
    assert "over budget" in failure.reason
    assert "ada@example.com" in failure.reason


def test_a_denial_without_a_reason_still_says_it_was_denied() -> None:
    c1 = call("c1")
    [failure] = plan_approvals([c1], always, {"c1": decide(c1, False)}).rejected
    assert "denied" in failure.reason


def test_a_hash_mismatch_keeps_the_call_pending_and_reports_the_decision() -> None:
    shown = call("c1", '{"amount": 5}')
    actual = call("c1", '{"amount": 5000}')
    stale = decide(shown, True)
    plan = plan_approvals([actual], always, {"c1": stale})
    assert plan.pending == [actual]
    assert plan.approved == [] and plan.rejected == []
    [(decision, problem)] = plan.invalid_decisions
    assert decision == stale
    assert "arguments hash does not match" in problem


def test_a_denial_with_a_wrong_hash_does_not_deny_either() -> None:
    """Fail closed both ways: a forged denial neither runs nor denies the call."""
    actual = call("c1", '{"amount": 5000}')
    forged = Decision(call_id="c1", approved=False, arguments_hash="0" * 64)
    plan = plan_approvals([actual], always, {"c1": forged})
    assert plan.pending == [actual]
    assert plan.rejected == []


def test_a_decision_filed_under_the_wrong_call_id_is_invalid() -> None:
    c1, c2 = call("c1"), call("c2")
    plan = plan_approvals([c1], always, {"c1": decide(c2, True)})
    assert plan.pending == [c1]
    assert len(plan.invalid_decisions) == 1
