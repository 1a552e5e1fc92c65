"""Approvals: decisions bound to the call digest (RFC 8785), signatures, approvers, planning."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError

from durable_tools import (
    Decision,
    ToolCall,
    arguments_hash,
    call_digest,
    check_decision,
    plan_approvals,
    sign_decision,
)
from durable_tools.approvals import (
    DECISION_CLOCK_SKEW,
    approver_problem,
    canonical_json,
    decision_payload,
    instance_problem,
    pending_instance,
    verify_signature,
)
from durable_tools.arguments import ArgumentsError, parse_arguments
from durable_tools.conversation import Answer


def call(call_id: str, arguments: str = '{"amount": 5}', name: str = "pay") -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=arguments)


def decide(c: ToolCall, approved: bool, **kwargs: str) -> Decision:
    digest = call_digest(c.name, c.call_id, c.arguments)
    return Decision(call_id=c.call_id, approved=approved, arguments_hash=digest, **kwargs)


def always(_: ToolCall) -> bool:
    return True


# canonical form (RFC 8785) and the call digest -----------------------------------------


def test_the_digest_is_sha256_of_one_rfc8785_document() -> None:
    document = '{"arguments":{"a":1,"b":"é"},"call_id":"c1","tool":"pay"}'
    expected = hashlib.sha256(document.encode()).hexdigest()
    assert call_digest("pay", "c1", '{ "b" : "é",\n "a": 1 }') == expected
    assert call_digest("pay", "c1", {"a": 1, "b": "é"}) == expected


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        (1.0, b"1"),
        (-0.0, b"0"),
        (1e21, b"1e+21"),
        (1e-7, b"1e-7"),
        (123456789012.5, b"123456789012.5"),
        ("\u00e9\u20ac\U0001f600", '"é€😀"'.encode()),
        ('\u000f"\\', b'"\\u000f\\"\\\\"'),
        ({"b": 1, "a": 2, "\u20ac": 3, "\U0001f600": 4}, '{"a":2,"b":1,"€":3,"😀":4}'.encode()),
    ],
)
def test_canonical_json_is_rfc8785(value: Any, canonical: bytes) -> None:
    assert canonical_json(value) == canonical


def test_number_spelling_never_changes_the_digest() -> None:
    assert call_digest("pay", "c1", '{"x": 1.0}') == call_digest("pay", "c1", '{"x": 1}')
    assert call_digest("pay", "c1", '{"x": -0.0}') == call_digest("pay", "c1", '{"x": 0}')
    assert call_digest("pay", "c1", '{"x": 1e21}') == call_digest("pay", "c1", '{"x": 1.0E+21}')
    # Integers beyond I-JSON's 2**53 have no RFC 8785 form: held as text, so
    # neighbours never collide (as they would rounded to doubles).
    assert call_digest("pay", "c1", f'{{"x": {2**53 + 1}}}') != call_digest(
        "pay", "c1", f'{{"x": {2**53}}}'
    )
    assert call_digest("pay", "c1", '{"x": 1}') != call_digest("pay", "c1", '{"x": "1"}')


def test_key_order_follows_utf16_code_units() -> None:
    # U+E000 sorts after U+1F600 in UTF-16 (surrogates D83D...), before it in code points.
    assert canonical_json({"\ue000": 1, "\U0001f600": 2}) == '{"😀":2,"\ue000":1}'.encode()


def test_text_that_is_not_an_object_is_held_as_text() -> None:
    assert len(call_digest("pay", "c1", "{oops")) == 64
    assert call_digest("pay", "c1", "{oops") != call_digest("pay", "c1", "{oops}")
    assert len(call_digest("pay", "c1", '{"a": NaN}')) == 64
    assert len(call_digest("pay", "c1", '{"a": "\\ud800"}')) == 64  # a lone surrogate
    assert len(call_digest("pay", "c1", '{"a": 123456789012345678901234567890}')) == 64


def test_arguments_hash_covers_the_arguments_alone() -> None:
    assert arguments_hash('{"b": 1, "a": 2}') == arguments_hash({"a": 2, "b": 1.0})
    assert arguments_hash('{"amount": 5}') != call_digest("pay", "c1", '{"amount": 5}')


# Keys parse_arguments refuses (prototype pollution) are left out: such calls never plan.
_keys = st.text().filter(lambda key: key not in ("__proto__", "constructor"))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)
_objects = st.dictionaries(_keys, _json, max_size=6)


@given(_objects, st.randoms())
def test_key_order_and_escapes_never_change_the_digest(args: dict[str, Any], rnd: Any) -> None:
    items = list(args.items())
    rnd.shuffle(items)
    reordered = json.dumps(dict(items), ensure_ascii=True, indent=1)
    plain = json.dumps(args, ensure_ascii=False)
    assert call_digest("pay", "c1", reordered) == call_digest("pay", "c1", plain)


@given(_objects, st.text(min_size=1), _json)
def test_any_change_of_an_argument_value_changes_the_digest(
    args: dict[str, Any], key: str, value: Any
) -> None:
    changed = {**args, key: value}
    same = key in args and canonical_json(args[key]) == canonical_json(value)
    if not same:
        assert call_digest("pay", "c1", changed) != call_digest("pay", "c1", args)


@given(_objects, st.text(min_size=1), st.text(min_size=1))
def test_any_change_of_tool_or_call_id_changes_the_digest(
    args: dict[str, Any], other_tool: str, other_id: str
) -> None:
    digest = call_digest("pay", "c1", args)
    if other_tool != "pay":
        assert call_digest(other_tool, "c1", args) != digest
    if other_id != "c1":
        assert call_digest("pay", other_id, args) != digest


# strict decisions and answers ----------------------------------------------------------


@pytest.mark.parametrize("approved", ['"yes"', "1", '"true"', "null"])
def test_approved_must_be_a_json_boolean(approved: str) -> None:
    with pytest.raises(ValidationError, match="valid boolean"):
        Decision.model_validate_json(
            f'{{"call_id": "c1", "approved": {approved}, "arguments_hash": "h"}}'
        )


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Decision.model_validate_json(
            '{"call_id": "c1", "approved": true, "arguments_hash": "h", "approve": true}'
        )
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Answer.model_validate_json('{"call_id": "c1", "arguments_hash": "h", "valu": 1}')
    with pytest.raises(ValidationError, match="valid string"):
        Answer.model_validate_json('{"call_id": 5, "arguments_hash": "h"}')


def test_a_decision_still_reads_its_json_dates() -> None:
    decision = Decision.model_validate_json(
        '{"call_id": "c1", "approved": false, "arguments_hash": "h",'
        ' "decided_at": "2026-11-22T10:00:00Z"}'
    )
    assert decision.decided_at == datetime(2026, 11, 22, 10, tzinfo=UTC)


# signatures and approvers --------------------------------------------------------------

KEY = b"0123456789abcdef0123456789abcdef"


def _signed(**kwargs: Any) -> Decision:
    fields: dict[str, Any] = {
        "workflow_id": "wf",
        "call_id": "c1",
        "arguments_hash": "d" * 64,
        "approved": True,
        "decided_by": "ana",
        "groups": ["finance"],
        "instance": "run-1@2026-11-26T10:00:00.000000+00:00",
    }
    return sign_decision("k1", KEY, **{**fields, **kwargs})


def test_a_signed_decision_verifies_and_survives_json() -> None:
    decision = _signed()
    again = Decision.model_validate_json(decision.model_dump_json())
    assert verify_signature(again, "wf", {"k1": KEY}) is None
    assert verify_signature(again, "wf", {"k0": b"o" * 32, "k1": KEY}) is None  # rotation


@pytest.mark.parametrize(
    ("change", "workflow_id", "reason"),
    [
        ({"approved": False}, "wf", "invalid signature"),
        ({"call_id": "c2"}, "wf", "invalid signature"),
        ({"arguments_hash": "e" * 64}, "wf", "invalid signature"),
        ({"decided_by": "mallory"}, "wf", "invalid signature"),
        ({"groups": ["finance", "admin"]}, "wf", "invalid signature"),
        ({"decided_at": datetime(2020, 1, 1, tzinfo=UTC)}, "wf", "invalid signature"),
        ({"instance": "run-2@2026-11-26T10:00:00.000000+00:00"}, "wf", "invalid signature"),
        ({"reason": "forged reason the model reads"}, "wf", "invalid signature"),
        ({}, "another-wf", "invalid signature"),
        ({"key_id": "k9"}, "wf", "unknown key id 'k9'"),
        ({"signature": ""}, "wf", "not signed"),
    ],
)
def test_any_change_breaks_the_signature(
    change: dict[str, Any], workflow_id: str, reason: str
) -> None:
    tampered = _signed().model_copy(update=change)
    problem = verify_signature(tampered, workflow_id, {"k1": KEY})
    assert problem is not None and reason in problem


def test_a_wrong_key_or_no_keys_refuses() -> None:
    assert "invalid signature" in (verify_signature(_signed(), "wf", {"k1": b"x" * 32}) or "")
    assert "no decision keys" in (verify_signature(_signed(), "wf", {}) or "")


def test_the_payload_names_what_is_signed() -> None:
    payload = json.loads(decision_payload("wf", _signed()))
    assert sorted(payload) == [
        "approved",
        "arguments_hash",
        "call_id",
        "decided_at",
        "decided_by",
        "groups",
        "instance",
        "reason",
        "workflow_id",
    ]


def test_approvers_are_groups_or_users() -> None:
    approvers = ["group:finance", "user:cfo", "auditor"]
    assert approver_problem(_signed(), []) is None
    assert approver_problem(_signed(), approvers) is None
    assert approver_problem(_signed(decided_by="cfo", groups=[]), approvers) is None
    assert approver_problem(_signed(decided_by="auditor", groups=[]), approvers) is None
    problem = approver_problem(_signed(decided_by="bob", groups=["support"]), approvers)
    assert problem is not None and "not among the approvers" in problem
    # `group:cfo` is not the user cfo, and a group named like a user is not that user.
    assert approver_problem(_signed(decided_by="x", groups=["cfo"]), ["user:cfo"]) is not None


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


def _digest_by_definition(tool: str, call_id: str, arguments: str) -> str:
    """The digest as `call_digest` documents it, step by step (the slow way)."""
    try:
        parsed = parse_arguments(arguments)
        canonical_json(parsed)
        value: dict[str, Any] = {"arguments": parsed}
    except (ArgumentsError, ValueError):
        value = {"arguments_text": arguments.encode("utf-8", "backslashreplace").decode()}
    document = {"tool": tool, "call_id": call_id, **value}
    try:
        data = canonical_json(document)
    except ValueError:
        data = repr(document).encode("utf-8", "backslashreplace")
    return hashlib.sha256(data).hexdigest()


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    tool=st.text(max_size=6) | st.just("pay\ud800"),  # a lone surrogate: no canonical form
    call_id=st.text(max_size=6),
    arguments=st.one_of(
        st.dictionaries(st.text(max_size=5), _json_values, max_size=4).map(
            lambda d: json.dumps(d, allow_nan=True)
        ),
        st.text(max_size=30),
        st.sampled_from(
            ['{"a": NaN}', '{"a": 1e400}', '{"a": "\\ud800"}', '{"a": 9007199254740993}']
        ),
    ),
)
def test_the_digest_is_its_definition_for_any_text(tool: str, call_id: str, arguments: str) -> None:
    # One canonicalization on the common path; the result is the definition's
    # for valid, invalid and non-canonicalizable arguments and odd names alike.
    assert call_digest(tool, call_id, arguments) == _digest_by_definition(tool, call_id, arguments)


_tricky_text = st.text(
    st.characters(codec=None, exclude_categories=())
    | st.sampled_from(
        ["\x00", "\x1f", "\x7f", '"', "\\", "\u2028", "\ue000", "\U0001f600", "\ud800"]
    ),
    max_size=6,
)
_canonical_inputs = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.sampled_from([2**53 - 1, -(2**53) + 1, 2**53, -(2**53)])
    | st.floats()
    | _tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_tricky_text, inner, max_size=4),
    max_leaves=12,
)


@given(_canonical_inputs)
@example({"\ue000": 1, "\U0001f600": 2})  # UTF-16 order differs from code point order
@example({"a": [2**53 - 1, "\x00\x7f\u2028", None, True]})
def test_canonical_json_is_rfc8785_for_any_json_value(value: Any) -> None:
    # The C encoder's fast path writes what the rfc8785 package does, or the
    # value takes the package's path: keys past U+FFFF (UTF-16 order), floats,
    # integers outside I-JSON's range, lone surrogates (refused by both).
    try:
        expected: bytes | None = rfc8785.dumps(value)
    except Exception:
        expected = None
    if expected is None:
        with pytest.raises(ValueError, match="not canonicalizable JSON"):
            canonical_json(value)
    else:
        assert canonical_json(value) == expected


# instance_problem (issue 23, item 5) ------------------------------------------------------

REQUESTED = datetime(2026, 11, 26, 10, tzinfo=UTC)
INSTANCE = pending_instance("run-1", REQUESTED)


def _bound(**kwargs: Any) -> str | None:
    fields: dict[str, Any] = {"instance": INSTANCE, "decided_at": REQUESTED + timedelta(hours=1)}
    decision = _signed(**{**fields, **kwargs})
    return instance_problem(
        decision, instance=INSTANCE, requested_at=REQUESTED, deadline=REQUESTED + timedelta(days=1)
    )


def test_a_signed_decision_applies_to_its_own_wait_only() -> None:
    assert INSTANCE == "run-1@2026-11-26T10:00:00.000000+00:00"
    assert _bound() is None
    # Another run under the same workflow id, or the same call asked again later.
    for other in (
        pending_instance("run-2", REQUESTED),
        pending_instance("run-1", REQUESTED + timedelta(seconds=1)),
        "",
    ):
        problem = _bound(instance=other)
        assert problem is not None and "another wait" in problem
    # Made before the call waited or after it expired (beyond the clock skew).
    assert _bound(decided_at=REQUESTED - DECISION_CLOCK_SKEW + timedelta(seconds=1)) is None
    early = _bound(decided_at=REQUESTED - DECISION_CLOCK_SKEW - timedelta(seconds=1))
    assert early is not None and "outside the call's wait" in early
    late = _bound(
        decided_at=REQUESTED + timedelta(days=1) + DECISION_CLOCK_SKEW + timedelta(seconds=1)
    )
    assert late is not None and "outside the call's wait" in late
