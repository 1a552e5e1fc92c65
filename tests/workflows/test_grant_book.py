"""Which grant runs which call (`workflows/grant_book.py`), without a server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from durable_tools.approvals import Decision, decision_payload
from durable_tools.conversation import PendingApproval
from durable_tools.grants import Grant, GrantRevocation, GrantScope, describe_scope
from durable_tools.workflows.grant_book import Grants

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)
SCOPE = GrantScope(tool="pay", arguments={"/to": "acme"})


def _pending(call_id: str, to: str, **fields: object) -> PendingApproval:
    return PendingApproval.model_validate(
        {
            "call_id": call_id,
            "tool": "pay",
            "arguments": f'{{"to": "{to}", "cents": 5}}',
            "arguments_hash": f"h-{call_id}",
            "summary": "pay()",
            "requested_at": NOW,
            "deadline": NOW,
            **fields,
        }
    )


def _grant(**fields: object) -> Grant:
    base = {"id": "g1", "scope": SCOPE, "granted_by": "ana", "granted_at": NOW, "call_id": "p1"}
    return Grant.model_validate({**base, **fields})


def test_a_signed_call_runs_only_by_a_signed_grant_of_one_of_its_approvers() -> None:
    approvers = {"approvers": ["group:finance"], "signed": True}
    assert Grants([_grant()]).applying(_pending("p2", "acme", **approvers), NOW) is None  # unsigned
    other = Grants([_grant(signed=True, groups=["support"])])
    assert other.applying(_pending("p2", "acme", **approvers), NOW) is None
    books = Grants([_grant(signed=True, groups=["finance"])])
    used = books.applying(_pending("p2", "acme", **approvers), NOW)
    assert used is not None and used.uses == ["p2"] and books.used["p2"] is used


def test_no_grant_for_a_quorum_another_value_or_an_mcp_question() -> None:
    grants = Grants([_grant()])
    assert grants.applying(_pending("p2", "acme", quorum=2), NOW) is None
    assert grants.applying(_pending("p2", "other"), NOW) is None
    assert grants.applying(_pending("p2", "acme"), NOW) is not None


def test_a_decision_s_grant_must_cover_its_call_and_no_quorum() -> None:
    grants = Grants([])

    def decision(scope: GrantScope, approved: bool = True) -> Decision:
        return Decision(call_id="p1", approved=approved, arguments_hash="h-p1", grant=scope)

    pending = _pending("p1", "acme")
    assert grants.problem(decision(SCOPE), pending) is None
    assert "denial" in (grants.problem(decision(SCOPE, approved=False), pending) or "")
    assert "does not match" in (
        grants.problem(decision(GrantScope(tool="pay", arguments={"/to": "x"})), pending) or ""
    )
    assert "quorum" in (grants.problem(decision(SCOPE), _pending("p1", "acme", quorum=2)) or "")
    assert grants.add(decision(SCOPE), pending, NOW) is not None
    assert [g.id for g in grants.carried()] == ["g1"]


def test_the_signature_covers_the_grant() -> None:
    plain = Decision(call_id="p1", approved=True, arguments_hash="h", instance="i")
    granted = plain.model_copy(update={"grant": SCOPE})
    assert decision_payload("w", plain) != decision_payload("w", granted)
    assert b'"grant"' not in decision_payload("w", plain)  # older signatures unchanged


def test_an_expiring_grant_runs_calls_until_its_time_and_then_none() -> None:
    grants = Grants([])
    scope = GrantScope(tool="pay", arguments={"/to": "acme"}, expires_after=60)
    decision = Decision(call_id="p1", approved=True, arguments_hash="h-p1", grant=scope)
    grant = grants.add(decision, _pending("p1", "acme"), NOW)
    assert grant is not None and grant.expires_at == NOW + timedelta(seconds=60)
    assert grants.applying(_pending("p2", "acme"), NOW + timedelta(seconds=59.9)) is not None
    assert grants.applying(_pending("p3", "acme"), NOW + timedelta(seconds=60)) is None
    assert describe_scope(scope) == 'pay where /to == "acme" for 60 s'
    assert "expired" in str(grants.revoke(GrantRevocation(grant_id="g1"), NOW + timedelta(1)))


def test_a_revoked_grant_runs_nothing_more_and_is_revoked_once() -> None:
    grants = Grants([_grant()])
    assert grants.applying(_pending("p2", "acme"), NOW) is not None
    later = NOW + timedelta(minutes=5)
    revoked = grants.revoke(GrantRevocation(grant_id="g1", revoked_by="bo", reason="done"), later)
    assert isinstance(revoked, Grant)
    assert (revoked.revoked_by, revoked.revoked_at, revoked.revoke_reason) == ("bo", later, "done")
    assert revoked.uses == ["p2"]  # the calls it ran stay recorded
    assert grants.applying(_pending("p3", "acme"), later) is None
    assert "revoked already, by bo" in str(grants.revoke(GrantRevocation(grant_id="g1"), later))
    assert "no grant 'g9'" in str(grants.revoke(GrantRevocation(grant_id="g9"), later))
    assert grants.carried()[0].revoked_at == later  # carried across continue-as-new


def test_an_expiry_is_bounded_and_absent_from_the_signed_bytes_when_unset() -> None:
    for bad in (0, -1, float("inf"), 367 * 24 * 3600, "60"):
        with pytest.raises(ValidationError):
            GrantScope.model_validate({"tool": "pay", "expires_after": bad})
    assert "expires_after" not in SCOPE.model_dump(mode="json")
    timed = GrantScope(tool="pay", expires_after=30)
    assert timed.model_dump(mode="json")["expires_after"] == 30
    plain = Decision(call_id="p1", approved=True, arguments_hash="h", instance="i", grant=SCOPE)
    longer = plain.model_copy(update={"grant": timed})
    assert decision_payload("w", plain) != decision_payload("w", longer)
