"""What an approval policy decided for one tool call, as recorded in history.

A `PolicyVerdict` is made on the worker when a model turn's calls are
planned (`durable_tools.policies.Policy.decide`), recorded in the model
activity's result (`PlannedCall.policy`), and read from there by the
workflow, `pending`, the inbox, the event stream and `durable-tools policy
explain`. A replay reads the recorded verdict: the policy installed on the
replaying worker never changes it.

This module holds data only (no CEL), so workflow code imports it freely.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from durable_tools.escalation import Escalation

__all__ = [
    "Effect",
    "PolicyDisagreement",
    "PolicyOutcome",
    "PolicyVerdict",
    "disagreement_text",
    "effect_text",
    "explain_verdict",
    "rule_label",
]

PolicyOutcome = Literal["run", "approve", "deny"]
"""What a rule decides: run the call, wait for approval, or refuse it."""


class PolicyVerdict(BaseModel):
    """Which policy version and which rule decided one call, and how.

    Attributes:
        policy: The name of the policy whose rule decided (`Policy.name`).
        version: The policy's version: `sha256:` and the hex SHA-256 digest of
            its canonical text (`Policy.version`).
        rule: The id of the rule that decided (`""`: none matched, and the
            policy's `default` decided).
        when: The rule's CEL condition, as written (`""` for the default).
        outcome: `run`, `approve` (wait for `quorum` distinct approvers among
            `approvers`) or `deny` (the model reads `reason` as a `Failure`
            of kind `denied`).
        approvers: Who may approve (`group:NAME`, `user:ID`); empty: the
            tool's own approvers, else anyone who may decide.
        quorum: Distinct approvers needed (default 1).
        reason: The rule's reason, as approvers and (for a denial) the model read it.
        error: Why evaluation failed (a rule did not compile, raised, or gave
            a non-bool). A failed evaluation fails closed: the outcome is
            `approve`, whatever the rule said.
        escalation: For `approve`: the rule's reminder and escalation
            (`durable_tools.escalation`); `None` (left out when recorded): none.
    """

    policy: str
    version: str
    rule: str = ""
    when: str = ""
    outcome: PolicyOutcome
    approvers: list[str] = Field(default_factory=list[str])
    quorum: int = 1
    reason: str = ""
    error: str = ""
    escalation: Escalation | None = None

    @model_serializer(mode="wrap")
    def _without_escalation(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Verdicts recorded before escalation existed keep their bytes.
        dumped: dict[str, Any] = handler(self)
        if dumped.get("escalation") is None:
            dumped.pop("escalation", None)
        return dumped


class Effect(BaseModel):
    """What a policy, or the tool's own `needs_approval`, makes of a call: comparable.

    Attributes:
        outcome: `run`, `approve` or `deny`.
        approvers: Who may approve, sorted (`approve` only).
        quorum: Distinct approvers needed (`approve` only; else 1).
    """

    outcome: PolicyOutcome
    approvers: list[str] = Field(default_factory=list[str])
    quorum: int = 1


class PolicyDisagreement(BaseModel):
    """The candidate (shadow) policy would have decided a call otherwise than the active one.

    Recorded with the call's plan (`PlannedCall.shadow`) only when the two
    disagree: another outcome, other approvers or another quorum. The
    candidate's verdict never changes what happens to the call.

    Attributes:
        candidate: The candidate's verdict (`None`: no rule of the candidate
            decided, so the tool's own `needs_approval` would have).
        active: What the active policy made of the call (its verdict is
            `PlannedCall.policy`; `None` there: the tool's own).
        shadow: What the candidate would have made of it.
    """

    candidate: PolicyVerdict | None = None
    active: Effect
    shadow: Effect


def effect_text(effect: Effect) -> str:
    """`run`, `deny`, `approve(N)` or, with approvers, `approve(N finance)`."""
    if effect.outcome != "approve":
        return effect.outcome
    who = ",".join(a.removeprefix("group:") for a in effect.approvers)
    return f"approve({effect.quorum}{' ' + who if who else ''})"


def disagreement_text(disagreement: PolicyDisagreement) -> str:
    """`ACTIVE -> CANDIDATE` effects of a disagreement, e.g. `run -> approve(1 finance)`."""
    return f"{effect_text(disagreement.active)} -> {effect_text(disagreement.shadow)}"


def rule_label(verdict: PolicyVerdict | None) -> str:
    """`policy/rule` of a verdict (`policy/(default)`), or `(tool)` when none decided."""
    if verdict is None:
        return "(tool)"
    return f"{verdict.policy}/{verdict.rule or '(default)'}"


def explain_verdict(verdict: PolicyVerdict) -> str:
    """One line saying what a policy decided and why, for people.

    Args:
        verdict: A recorded verdict.

    Returns:
        E.g. `needs finance approval: args.amount_cents > 5000, rule
        refund-large (policy refunds sha256:3f2a9c0d1e4b)`; `denied: ...`;
        `runs: ...`; a failed evaluation says `policy error: ...`.
    """
    groups = [a.removeprefix("group:") for a in verdict.approvers]
    who = " or ".join(groups) if groups else "a person's"
    if verdict.outcome == "approve":
        head = (
            f"needs {who} approval"
            if verdict.quorum <= 1
            else (f"needs {verdict.quorum} distinct {who} approvals")
        )
    elif verdict.outcome == "deny":
        head = "denied"
    else:
        head = "runs"
    because = verdict.when or "no rule matched (the policy's default)"
    rule = f", rule {verdict.rule}" if verdict.rule else ""
    text = f"{head}: {because}{rule} (policy {verdict.policy} {verdict.version[:19]})"
    if verdict.reason:
        text += f"; {verdict.reason}"
    if verdict.error:
        text += f"; policy error, failed closed: {verdict.error}"
    return text
