"""The history recorder's scenarios of approval policies, grants, escalation, budgets (issue 28).

Part of `record_histories.py` (which lists them in `SCENARIOS` and installs
`RECORDED_POLICY` and `DECISION_KEY` on its worker); run that script to
record them.
"""

from __future__ import annotations

from typing import Any

from agent_support import AGENT, turns
from scenario_support import OPTIONS, approval_digest, until

from durable_tools.budgets import Budget
from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.policies import Policy

__all__ = [
    "DECISION_KEY",
    "LIVE_POLICY",
    "RECORDED_POLICY",
    "budget_raised",
    "grants_escalation",
    "policy_by_version",
    "policy_live_change",
    "policy_quorum",
    "signed_decisions",
]


DECISION_KEY = b"record-histories-decision-key-k1"


async def signed_decisions(c: Conversations, wid: str) -> None:
    """Trusted decisions: an early one, an unsigned one and a forged one refused; a signed one runs.

    The conversation requires signed decisions; the worker holds `k1`, and the
    verdicts of the `verify_decision` local activity are recorded as markers.
    """
    from durable_tools.approvals import call_digest, sign_decision

    args = {"order": "o5", "amount": 5}
    options = OPTIONS.model_copy(update={"require_signed_decisions": True})
    await c.start(wid, agent=AGENT, options=options)
    await c.approve(wid, "r1", arguments_hash=call_digest("refund", "r1", args))  # early
    await c.send(wid, turns([("r1", "refund", args)]))
    digest = await approval_digest(c, wid, "r1")
    [pending] = (await c.pending(wid)).approvals
    await c.approve(wid, "r1", arguments_hash=digest, decided_by="mallory")  # unsigned
    forged = sign_decision(
        "k1", b"x" * 32, workflow_id=wid, instance=pending.instance, call_id="r1",
        arguments_hash=digest,
        approved=True, decided_by="forger",
    )  # fmt: skip
    await c.send_decision(wid, forged)

    async def three_rejected() -> bool:
        return len((await c.pending(wid)).rejected) >= 3

    await until(three_rejected, "three rejected decisions")
    signed = sign_decision(
        "k1", DECISION_KEY, workflow_id=wid, instance=pending.instance, call_id="r1",
        arguments_hash=digest,
        approved=True, decided_by="ana", groups=["finance"],
    )  # fmt: skip
    await c.send_decision(wid, signed)


RECORDED_POLICY = Policy.from_text("""
name: recorded
rules:
  - {id: policy-deny, when: 'tool == "refund" && args.order == "policy-deny"', outcome: deny,
     reason: orders named policy-deny are never refunded}
  - {id: policy-quorum, when: 'tool == "refund" && args.order == "policy-quorum"',
     outcome: approve, groups: [finance], quorum: 2}
  - {id: policy-escalate, when: 'tool == "refund" && args.order == "policy-escalate"',
     outcome: approve, groups: [finance], remind_after: 1s, escalate_after: 2s,
     escalate_to: [oncall]}
""")
"""The recorder's policy for the `tests` toolkit: it matches only the orders
of `policy_quorum`, so the other scenarios record what they did before."""


async def policy_quorum(c: Conversations, wid: str) -> None:
    """Approval policies (issue 28): one call denied by a rule, one needing two distinct approvers.

    ana approves twice (the second is refused: a person counts once), bob's
    approval reaches the quorum and the call runs.
    """
    from durable_tools.approvals import sign_decision

    script = turns(
        [
            ("q1", "refund", {"order": "policy-quorum", "amount": 500}),
            ("d1", "refund", {"order": "policy-deny", "amount": 1}),
        ]
    )
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)
    digest = await approval_digest(c, wid, "q1")
    [pending] = (await c.pending(wid)).approvals

    def signed(who: str) -> Any:
        return sign_decision(
            "k1", DECISION_KEY, workflow_id=wid, instance=pending.instance, call_id="q1",
            arguments_hash=digest, approved=True, decided_by=who, groups=["finance"],
        )  # fmt: skip

    await c.send_decision(wid, signed("ana"))

    async def counted() -> bool:
        return any(a.approved_by == ["ana"] for a in (await c.pending(wid)).approvals)

    await until(counted, "ana's approval counted")
    await c.send_decision(wid, signed("ana"))

    async def refused() -> bool:
        return bool((await c.pending(wid)).rejected)

    await until(refused, "ana's second approval refused")
    await c.send_decision(wid, signed("bob"))


LIVE_POLICY = """
name: live
rules:
  - {id: release, when: 'tool == "refund" && args.order == "policy-quorum"', outcome: run}
  - {id: tight, when: 'tool == "refund" && args.order == "tight"', outcome: approve,
     groups: [finance], quorum: 2}
  - {id: never, when: 'tool == "refund" && args.order == "never"', outcome: deny,
     reason: no longer refunded}
"""
"""The version `policy_live_change` installs while its calls wait."""


async def policy_live_change(c: Conversations, wid: str) -> None:
    """A live policy change (issue 28, item 4) while three calls wait for approval.

    `set_policy` releases the call the recorder's policy gated (quorum 2),
    tightens the one the tool itself gated to two finance approvers, and
    denies the third; then a later call is planned under the new version.
    The tightened call is denied by a person to end the turn.
    """
    script = turns(
        [
            ("q1", "refund", {"order": "policy-quorum", "amount": 500}),
            ("t1", "refund", {"order": "tight", "amount": 7}),
            ("n1", "refund", {"order": "never", "amount": 9}),
        ],
        [("n2", "refund", {"order": "never", "amount": 10})],
    )
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)
    for call_id in ("q1", "t1", "n1"):
        await approval_digest(c, wid, call_id)
    await c.set_policy(wid, LIVE_POLICY, installed_by="ops-lead", reason="recorded")

    async def tightened() -> bool:
        return any(a.quorum == 2 for a in (await c.pending(wid)).approvals if a.call_id == "t1")

    await until(tightened, "t1 tightened")
    [pending] = (await c.pending(wid)).approvals
    from durable_tools.approvals import sign_decision

    denial = sign_decision(
        "k1", DECISION_KEY, workflow_id=wid, instance=pending.instance, call_id="t1",
        arguments_hash=pending.arguments_hash, approved=False, decided_by="ana",
        groups=["finance"], reason="not today",
    )  # fmt: skip
    await c.send_decision(wid, denial)


async def policy_by_version(c: Conversations, wid: str) -> None:
    """Workers load an installed policy by version (issue 28, item 4): history holds it once.

    A call waits under the recorder's policy; `set_policy` releases it (the
    `policy.reevaluate-v1` input names the version, `PolicyRef`); the next
    model turn is planned under it (its `model.turn` input names it too),
    and the version is carried across continue-as-new to the next run.
    """
    options = OPTIONS.model_copy(update={"continue_as_new_after_turns": 2})
    script = turns(
        [("q1", "refund", {"order": "policy-quorum", "amount": 500})],
        [("n2", "refund", {"order": "never", "amount": 10})],
    )
    await c.start(wid, agent=AGENT, message=script, options=options)
    await approval_digest(c, wid, "q1")
    await c.set_policy(wid, LIVE_POLICY, installed_by="ops-lead", reason="by version")


async def budget_raised(c: Conversations, wid: str) -> None:
    """Issue 28, item 6: a budget of 1,000 tokens stops the third model call (400 tokens
    each, priced by `BUDGET_PRICES`) in state `budget_exceeded`; `raise_budget` resumes it."""
    agent = AGENT.model_copy(update={"model": "metered"})
    script = turns(
        [("w1", "get_weather", {"city": "Oslo"})], [("w2", "get_weather", {"city": "Bergen"})]
    )
    options = OPTIONS.model_copy(update={"budget": Budget(max_tokens=1000)})
    await c.start(wid, agent=agent, message=script, options=options)

    async def exceeded() -> bool:
        return (await c.status(wid)).state == "budget_exceeded"

    await until(exceeded, "the budget stop")
    await c.raise_budget(wid, max_tokens=2000, requested_by="ops")


async def grants_escalation(c: Conversations, wid: str) -> None:
    """Reminder and escalation, then a grant (issue 28 item 5).

    e1 is reminded after 1 s and escalated to oncall after 2 s (real time),
    then approved by olga of oncall (signed); g1 is approved with a grant for
    `/order == "grant-me"`; g2, the same order, runs by the grant.
    """
    from durable_tools.approvals import sign_decision
    from durable_tools.grants import GrantScope

    script = turns(
        [("e1", "refund", {"order": "policy-escalate", "amount": 5})],
        [("g1", "refund", {"order": "grant-me", "amount": 1})],
        [("g2", "refund", {"order": "grant-me", "amount": 2})],
    )
    await c.start(wid, agent=AGENT, message=script, options=ConversationOptions(idle_timeout=2))
    digest = await approval_digest(c, wid, "e1")

    async def escalated() -> bool:
        return any(a.approvers == ["group:oncall"] for a in (await c.pending(wid)).approvals)

    await until(escalated, "e1 escalated")
    [pending] = (await c.pending(wid)).approvals
    await c.send_decision(
        wid,
        sign_decision(
            "k1", DECISION_KEY, workflow_id=wid, instance=pending.instance, call_id="e1",
            arguments_hash=digest, approved=True, decided_by="olga", groups=["oncall"],
        ),
    )  # fmt: skip
    digest = await approval_digest(c, wid, "g1")
    scope = GrantScope(tool="refund", arguments={"/order": "grant-me"})
    await c.approve(wid, "g1", arguments_hash=digest, decided_by="ana", grant=scope)
