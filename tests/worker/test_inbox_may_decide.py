"""The inbox checks a tool's approvers before it sends anything."""

from __future__ import annotations

from datetime import UTC, datetime

from durable_tools.conversation import PendingApproval
from durable_tools.worker.inbox.auth import Identity, may_decide


def _approval(*approvers: str) -> PendingApproval:
    now = datetime.now(UTC)
    return PendingApproval(
        call_id="c1",
        tool="refund",
        arguments="{}",
        arguments_hash="h",
        summary="refund()",
        requested_at=now,
        deadline=now,
        approvers=list(approvers),
    )


def test_approvers_by_group_and_by_user() -> None:
    finance = _approval("group:finance", "user:cfo")
    assert may_decide(Identity(name="ana", groups=("finance",), method="proxy"), finance)
    assert may_decide(Identity(name="cfo", method="bearer"), finance)
    assert not may_decide(Identity(name="bo", groups=("support",), method="proxy"), finance)
    assert not may_decide(
        Identity(name="finance", method="bearer"), finance
    )  # a name is not a group


def test_no_approvers_means_anyone_authenticated() -> None:
    assert may_decide(Identity(name="bo", method="dev"), _approval())
    assert not may_decide(Identity(name="", method="dev"), _approval())
