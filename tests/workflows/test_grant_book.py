"""Which grant runs which call (`workflows/grant_book.py`), without a server."""

from __future__ import annotations

from datetime import UTC, datetime

from durable_tools.approvals import Decision, decision_payload
from durable_tools.conversation import PendingApproval
from durable_tools.grants import Grant, GrantScope
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
    assert Grants([_grant()]).applying(_pending("p2", "acme", **approvers)) is None  # unsigned
    other = Grants([_grant(signed=True, groups=["support"])])
    assert other.applying(_pending("p2", "acme", **approvers)) is None
    books = Grants([_grant(signed=True, groups=["finance"])])
    used = books.applying(_pending("p2", "acme", **approvers))
    assert used is not None and used.uses == ["p2"] and books.used["p2"] is used


def test_no_grant_for_a_quorum_another_value_or_an_mcp_question() -> None:
    grants = Grants([_grant()])
    assert grants.applying(_pending("p2", "acme", quorum=2)) is None
    assert grants.applying(_pending("p2", "other")) is None
    assert grants.applying(_pending("p2", "acme")) is not None


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
