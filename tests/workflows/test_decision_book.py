"""`DecisionBook`: approvals and answers checked, kept and rejected, without a server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from durable_tools._wire import CarriedCall, PlannedCall
from durable_tools.approvals import Decision, call_digest
from durable_tools.conversation import Answer, ConversationOptions, PendingApproval
from durable_tools.results import ToolCall
from durable_tools.workflows.decision_book import MAX_REJECTED, UNKNOWN, DecisionBook

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _plan(call_id: str, name: str = "refund", **fields: Any) -> PlannedCall:
    call = ToolCall(call_id=call_id, name=name, arguments='{"amount": 5}')
    digest = call_digest(name, call_id, call.arguments)
    fields.setdefault("kind", "local")
    return PlannedCall(call=call, arguments_hash=digest, summary=name, **fields)


def _book(
    options: ConversationOptions | None = None, closed: frozenset[str] = frozenset()
) -> tuple[DecisionBook, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    book = DecisionBook(
        options or ConversationOptions(),
        early_decisions={},
        early_answers={},
        rejected=[],
        event=lambda kind, **fields: events.append((kind, fields)),
        is_call=lambda call_id: call_id in closed,
        now=lambda: NOW,
        instance_of=lambda at: f"run-1@{at.isoformat()}",
    )
    return book, events


def _decision(plan: PlannedCall, **fields: Any) -> Decision:
    fields.setdefault("approved", True)
    return Decision(call_id=plan.call.call_id, arguments_hash=plan.arguments_hash, **fields)


def test_a_registered_approval_is_pending_until_its_deadline() -> None:
    book, _ = _book(ConversationOptions(approval_deadline=3600))
    plan = _plan("c1")
    assert book.register_approval(plan) is None
    pending = book.approvals["c1"]
    assert pending.requested_at == NOW
    assert pending.deadline == NOW + timedelta(seconds=3600)
    assert not pending.signed
    # A tool's own deadline wins over the conversation's.
    book.register_approval(_plan("c2", approval_deadline=60))
    assert book.approvals["c2"].deadline == NOW + timedelta(seconds=60)


def test_approvers_or_the_options_make_a_call_need_a_signed_decision() -> None:
    book, _ = _book(ConversationOptions(require_signed_decisions=True))
    book.register_approval(_plan("c1"))
    assert book.approvals["c1"].signed
    book, _ = _book()
    book.register_approval(_plan("c1", approvers=["group:finance"]))
    assert book.approvals["c1"].signed
    problem = book.decision_problem(_decision(_plan("c1")))
    assert problem is not None and "needs a signed decision" in problem


def test_registering_returns_the_early_decision_kept_for_the_call() -> None:
    book, _ = _book()
    plan = _plan("c1")
    early = _decision(plan)
    book.early_decisions["c1"] = early
    assert book.register_approval(plan) is early
    assert "c1" not in book.early_decisions


def test_a_decision_is_checked_against_the_pending_call() -> None:
    book, _ = _book(closed=frozenset({"done"}))
    plan = _plan("c1")
    book.register_approval(plan)
    assert book.decision_problem(_decision(plan)) is None
    forged = Decision(call_id="c1", approved=True, arguments_hash="sha256:other")
    assert "arguments hash does not match" in (book.decision_problem(forged) or "")
    book.decisions["c1"] = _decision(plan)
    assert "already received" in (book.decision_problem(_decision(plan)) or "")
    done = Decision(call_id="done", approved=True, arguments_hash="x")
    assert "not waiting for a decision" in (book.decision_problem(done) or "")
    nobody = Decision(call_id="nobody", approved=True, arguments_hash="x")
    assert book.decision_problem(nobody) == UNKNOWN


def test_the_legacy_rules_keep_unknown_decisions_and_reject_bad_ones() -> None:
    book, events = _book()
    plan = _plan("c1")
    book.register_approval(plan)
    early = Decision(call_id="later", approved=True, arguments_hash="x", decided_by="ana")
    book.accept_or_reject_decision(early)
    assert book.early_decisions == {"later": early}
    bad = Decision(call_id="c1", approved=True, arguments_hash="x", decided_by="eve")
    book.accept_or_reject_decision(bad)
    assert "c1" not in book.decisions
    [rejected] = book.rejected
    assert rejected.call_id == "c1" and rejected.decided_by == "eve"
    assert rejected.received_at == NOW and rejected.signal == "decide"
    assert events == [
        (
            "approval_rejected",
            {
                "call_id": "c1",
                "reason": rejected.reason,
                "decided_by": "eve",
                "outcome": "decide",
            },
        )
    ]
    book.accept_or_reject_decision(_decision(plan))
    assert book.decisions["c1"].approved


def test_rejections_keep_the_newest_and_clean_what_a_client_sent() -> None:
    book, _ = _book()
    for n in range(MAX_REJECTED + 5):
        book.reject(f"c{n}\ud800", "bad", "x" * 1000, "decide")
    assert len(book.rejected) == MAX_REJECTED
    assert book.rejected[0].call_id == "c5?"
    assert book.rejected[-1].call_id.encode()  # a lone surrogate would not encode
    assert len(book.rejected[-1].decided_by) <= 200


def test_the_update_validator_names_an_unknown_call() -> None:
    book, _ = _book()
    nobody = Decision(call_id="nobody", approved=True, arguments_hash="x")
    assert book.update_problem(nobody) == "unknown call id 'nobody'"
    assert book.update_problem(Answer(call_id="nobody", arguments_hash="x")) == (
        "unknown call id 'nobody'"
    )


def test_an_answer_is_checked_against_its_question_and_schema() -> None:
    book, _ = _book()
    plan = _plan("q1", kind="interaction", answer_schema={"type": "string", "format": "date"})
    assert book.register_interaction(plan) is None
    digest = plan.arguments_hash
    assert (
        book.answer_problem(Answer(call_id="q1", value="2026-11-24", arguments_hash=digest)) is None
    )
    malformed = Answer(call_id="q1", value="next tuesday", arguments_hash=digest)
    assert book.answer_problem(malformed) is not None
    wrong = Answer(call_id="q1", value="2026-11-24", arguments_hash="x")
    assert "arguments hash does not match" in (book.answer_problem(wrong) or "")


def test_an_early_answer_is_kept_only_when_early_answers_are_allowed() -> None:
    book, _ = _book()
    early = Answer(call_id="q9", value="yes", arguments_hash="x", answered_by="ana")
    book.accept_or_reject_answer(early, early=True)
    assert book.early_answers == {"q9": early}
    assert "already received" in (book.answer_problem(early) or "")
    late = Answer(call_id="q8", value="yes", arguments_hash="x")
    book.accept_or_reject_answer(late, early=False)
    assert "q8" not in book.early_answers
    assert "accept_early_decisions" in book.rejected[-1].reason
    assert book.rejected[-1].signal == "answer"


def test_a_carried_call_waits_again_with_what_arrived_for_it() -> None:
    book, _ = _book()
    plan = _plan("c1")
    book.register_approval(plan)
    decision = _decision(plan, approved=False, reason="no")
    book.decisions["c1"] = decision
    waits = book.waits_of("c1")
    assert waits["approval"] == book.approvals["c1"] and waits["decision"] == decision
    restored, _ = _book()
    restored.restore(CarriedCall(plan=plan, **waits))
    assert restored.approvals["c1"] == book.approvals["c1"]
    assert restored.decisions == {"c1": decision}
    assert isinstance(restored.approvals["c1"], PendingApproval)
