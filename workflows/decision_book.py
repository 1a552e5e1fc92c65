"""Approval and answer bookkeeping of `AgentWorkflow`: register, check, verify, reject.

A `DecisionBook` holds what waits for a person (pending approvals and
interactions), what arrived for it (decisions, answers, early ones kept for
calls not yet pending) and what was refused (`rejected`). Its checks are
pure: `decision_problem` and `answer_problem` say why an input cannot apply
(`UNKNOWN`: no such call), from the book's state alone, so a replay reaches
the same verdict. Only `verify` (the signature, by the `verify_decision`
local activity, whose verdict is recorded) and what awaits it call workflow
APIs. The binding rule itself (RFC 8785 digest of tool name, call id and
arguments; DESIGN.md invariant 3) is `durable_tools.approvals.digest_problem`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from durable_tools.workflows.grant_book import Grants
from durable_tools.workflows.handler_inputs import MAX_NAME_CHARS
from durable_tools.workflows.notifications import Notifier

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import VERIFY_DECISION_ACTIVITY, CarriedCall, CarriedState, PlannedCall
    from durable_tools.approvals import (
        Decision,
        DecisionCheck,
        DecisionVerdict,
        approver_problem,
        digest_problem,
        instance_problem,
        pending_instance,
    )
    from durable_tools.conversation import (
        Answer,
        ConversationOptions,
        DecisionReceipt,
        MessagesSupersede,
        ModelFailure,
        PendingApproval,
        PendingInteraction,
        PendingState,
        RejectedDecision,
    )
    from durable_tools.formats import check_answer
    from durable_tools.grants import GrantRevocation
    from durable_tools.handler_input import clean_text
    from durable_tools.input_requests import InputQuestion, sendable

__all__ = [
    "BOUND_DECISIONS_PATCH",
    "MAX_REJECTED",
    "TRUSTED_DECISIONS_PATCH",
    "UNKNOWN",
    "DecisionBook",
]

TRUSTED_DECISIONS_PATCH = "trusted-decisions"
"""Patch id: histories recorded before it kept early decisions and answers by default."""

BOUND_DECISIONS_PATCH = "bound-decisions"
"""Patch id: approvals registered after it have an `instance` that a signed
decision must name, with its `decided_at` inside the wait (issue 23)."""

UNKNOWN = "unknown"
"""The problem of a decision or answer for a call the book does not know."""

MAX_REJECTED = 100
"""Rejected inputs kept (the newest), in the book and across continue-as-new."""

MAX_ID_CHARS = 200
"""Characters of a call id or a sender kept in a rejection."""

_MAX_EARLY = 1000

Event = Callable[..., None]


def _workflow_instance(requested_at: datetime) -> str:
    """The instance of a wait of this run that starts at `requested_at` (`""` before the patch)."""
    if not workflow.patched(BOUND_DECISIONS_PATCH):
        return ""
    return pending_instance(workflow.info().first_execution_run_id, requested_at)


class DecisionBook:
    """What waits for a person in one run, what arrived for it, and what was refused.

    Args:
        options: The conversation's options (`approval_deadline`,
            `require_signed_decisions`, `accept_early_decisions`).
        early_decisions: Decisions carried from the previous run, by call id.
        early_answers: Answers carried from the previous run, by call id.
        rejected: Rejections carried from the previous run.
        event: Publishes a `ConversationEvent` (`kind`, then its fields).
        is_call: Whether a call id is one of the conversation's open or
            answered calls (its inputs are then not early but late).
        now: The workflow's clock (`workflow.now`).
        messages_supersede: The agent's `messages_supersede` carried from
            the previous run (`None`: the conversation's option applies).
        instance_of: The `PendingApproval.instance` of a wait that starts at
            the given time (default: the run's `pending_instance` under
            `BOUND_DECISIONS_PATCH`, else `""`).
    """

    def __init__(
        self,
        options: ConversationOptions,
        *,
        early_decisions: dict[str, Decision],
        early_answers: dict[str, Answer],
        rejected: list[RejectedDecision],
        event: Event,
        is_call: Callable[[str], bool],
        now: Callable[[], datetime] = workflow.now,
        messages_supersede: MessagesSupersede | None = None,
        instance_of: Callable[[datetime], str] | None = None,
    ) -> None:
        self.options = options
        self.approvals: dict[str, PendingApproval] = {}
        self.interactions: dict[str, PendingInteraction] = {}
        self.decisions: dict[str, Decision] = {}
        self.answers: dict[str, Answer] = {}
        self.early_decisions: dict[str, Decision] = dict(early_decisions)
        self.early_answers: dict[str, Answer] = dict(early_answers)
        self.rejected: list[RejectedDecision] = list(rejected)
        # Decisions whose signatures are being checked (`verify_in_background`).
        self.verifications: set[asyncio.Task[None]] = set()
        self._event = event
        self._is_call = is_call
        self._now = now
        # The agent's `messages_supersede`, as its latest model turn reported it.
        self.messages_supersede: MessagesSupersede | None = messages_supersede
        self._instance_of = instance_of or _workflow_instance
        # Webhook deliveries (started beside the loop; carried while in flight).
        self.notifier = Notifier([])
        self.grants = Grants([])  # "approve for the rest of this conversation"

    @classmethod
    def from_state(
        cls,
        options: ConversationOptions,
        state: CarriedState,
        event: Event,
        is_call: Callable[[str], bool],
    ) -> DecisionBook:
        """The book of a run that starts from `state` (early inputs, rejections carried)."""
        book = cls(
            options,
            early_decisions=state.early_decisions,
            early_answers=state.early_answers,
            rejected=state.rejected,
            event=event,
            is_call=is_call,
            messages_supersede=state.messages_supersede,
        )
        book.notifier = Notifier(state.notifications)
        book.grants = Grants(state.grants)
        return book

    def carried(self) -> dict[str, Any]:
        """The `CarriedState` fields of the book: early inputs, rejections, deliveries."""
        return {
            "early_decisions": self.early_decisions,
            "early_answers": self.early_answers,
            "rejected": self.rejected[-MAX_REJECTED:],
            "messages_supersede": self.messages_supersede,
            "notifications": self.notifier.carried(),
            "grants": self.grants.carried(),
        }

    def pending_state(self, paused: str | None, model_failed: ModelFailure | None) -> PendingState:
        """The `pending` query: what waits for a person, the pause, a model failure, rejections."""
        return PendingState(
            approvals=list(self.approvals.values()),
            interactions=list(self.interactions.values()),
            paused=paused,
            rejected=list(self.rejected),
            model_failed=model_failed,
            messages_supersede=self.messages_supersede or self.options.messages_supersede,
            grants=self.grants.carried(),
        )

    def deadline(self, plan: PlannedCall) -> float:
        """Seconds a person has to decide or answer `plan`'s call."""
        return plan.approval_deadline or self.options.approval_deadline

    def _request(self, plan: PlannedCall) -> dict[str, Any]:
        """The fields of a pending approval or interaction of `plan`'s call, asked now."""
        call, now = plan.call, self._now()
        return {
            "call_id": call.call_id,
            "tool": call.name,
            "arguments": call.arguments,
            "arguments_hash": plan.arguments_hash,
            "requested_at": now,
            "deadline": now + timedelta(seconds=self.deadline(plan)),
        }

    # ------------------------------------------------------------ approvals

    def register_approval(self, plan: PlannedCall) -> Decision | None:
        """Make `plan`'s call wait for a decision; return an early decision kept for it."""
        call_id = plan.call.call_id
        request = self._request(plan)
        instance = self._instance_of(request["requested_at"])
        verdict = plan.policy
        self.approvals[call_id] = PendingApproval(
            **request,
            summary=plan.summary,
            approvers=plan.approvers,
            signed=bool(plan.approvers) or self.options.require_signed_decisions,
            instance=instance,
            policy=verdict,
            quorum=verdict.quorum if verdict is not None and verdict.outcome == "approve" else 1,
        )
        if self.grants.grants and self.grants.applying(self.approvals[call_id], self._now()):
            del self.approvals[call_id]  # runs by a grant, without waiting
            self.early_decisions.pop(call_id, None)
            return None
        return self.early_decisions.pop(call_id, None)

    def register_input_approval(
        self, plan: PlannedCall, digest: str, summary: str, question: InputQuestion
    ) -> PendingApproval:
        """Make a running call wait for approval of what its MCP server asked.

        A sampling request (`sampling = "approve"`) or a link only an
        approver may consent to (`url_elicitation = "approver"`): a
        decision must carry `digest` (`question_digest`), and the tool's
        approvers, signatures and deadline apply as to the call's own
        approval. A decision left from the call's own approval is dropped.
        """
        call_id = plan.call.call_id
        self.decisions.pop(call_id, None)
        request: dict[str, Any] = {**self._request(plan), "arguments_hash": digest}
        pending = PendingApproval(
            **request,
            summary=summary,
            approvers=plan.approvers,
            signed=bool(plan.approvers) or self.options.require_signed_decisions,
            instance=self._instance_of(request["requested_at"]),
            input_request=question,
        )
        self.approvals[call_id] = pending
        return pending

    def take_early_decision(self, decision: Decision) -> None:
        """Apply a decision that arrived before its call was pending (`register_approval`).

        Kept because the conversation accepts early decisions: it still must
        match this call's digest, signature and approvers (checked in a task
        that continue-as-new awaits, `verifications`). Histories before
        TRUSTED_DECISIONS_PATCH check it at once, by their rules.
        """
        if not workflow.patched(TRUSTED_DECISIONS_PATCH):
            self.accept_or_reject_decision(decision)
            return
        task = asyncio.create_task(self.consider_decision(decision, "decide"))
        self.verifications.add(task)
        task.add_done_callback(self.verifications.discard)

    def decision_problem(self, decision: Decision) -> str | None:
        """Why `decision` cannot apply now (`UNKNOWN`: no such call), or `None`.

        Everything but the signature itself, which only the worker's keys
        can check (`verify`).
        """
        call_id = decision.call_id
        pending = self.approvals.get(call_id)
        if pending is not None:
            if call_id in self.decisions:
                return f"a decision for call {call_id!r} was already received"
            mismatch = digest_problem(call_id, pending.arguments_hash, decision)
            if mismatch is not None:
                return mismatch
            if decision.approved and clean_text(decision.decided_by, MAX_ID_CHARS) in (
                pending.approved_by
            ):
                return (
                    f"{clean_text(decision.decided_by, MAX_ID_CHARS)!r} already approved call "
                    f"{call_id!r}; each person counts once ({len(pending.approved_by)} of "
                    f"{pending.quorum} distinct approvals)"
                )
            granting = self.grants.problem(decision, pending)
            if granting is not None:
                return granting
            if not pending.signed:
                return None
            if not decision.signature:
                return f"call {call_id!r} needs a signed decision (key_id and signature)"
            if pending.instance:  # bound: this wait, at a time inside it
                bound = instance_problem(
                    decision,
                    instance=pending.instance,
                    requested_at=pending.requested_at,
                    deadline=pending.deadline,
                    run_bound=self.options.accept_early_decisions,
                )
                if bound is not None:
                    return bound
            return approver_problem(decision, pending.approvers)
        if self._is_call(call_id):
            return f"call {call_id!r} is not waiting for a decision"
        if call_id in self.early_decisions:
            return f"a decision for call {call_id!r} was already received"
        return UNKNOWN

    def reject(
        self, call_id: str, reason: str, by: str, signal: str, at: datetime | None = None
    ) -> None:
        """Record a refused input (the newest `MAX_REJECTED`) and publish `approval_rejected`."""
        self._event(
            "approval_rejected",
            call_id=clean_text(call_id, MAX_ID_CHARS),
            reason=clean_text(reason),
            decided_by=clean_text(by, MAX_ID_CHARS),
            outcome=signal,
        )
        self.rejected.append(
            RejectedDecision(
                call_id=clean_text(call_id, MAX_ID_CHARS),
                reason=clean_text(reason),
                decided_by=clean_text(by, MAX_ID_CHARS),
                # When it arrived: after a local activity, `now()` differs on replay.
                received_at=at or self._now(),
                signal=signal,
            )
        )
        del self.rejected[:-MAX_REJECTED]

    def accept_or_reject_decision(self, decision: Decision) -> None:
        """Take or refuse a decision by the rules of histories before TRUSTED_DECISIONS_PATCH."""
        problem = self.decision_problem(decision)
        if problem is None:
            self.decisions[decision.call_id] = decision
        elif problem == UNKNOWN and len(self.early_decisions) < _MAX_EARLY:
            self.early_decisions[decision.call_id] = decision
        else:
            reason = f"unknown call id {decision.call_id!r}" if problem == UNKNOWN else problem
            self.reject(decision.call_id, reason, decision.decided_by, "decide")

    async def verify(self, decision: Decision) -> str | None:
        """Check the signature on the worker (a local activity: the verdict is recorded).

        A replay reads the recorded verdict, so rotating keys never changes
        the fate of a decision already received.
        """
        try:
            verdict = await workflow.execute_local_activity(
                VERIFY_DECISION_ACTIVITY,
                DecisionCheck(workflow_id=workflow.info().workflow_id, decision=decision),
                result_type=DecisionVerdict,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"verify decision on {clean_text(decision.call_id, MAX_NAME_CHARS)}",
            )
        except ActivityError as exc:
            return f"the signature could not be verified: {exc.cause or exc}"
        return None if verdict.valid else f"signature rejected: {verdict.reason}"

    async def checked(self, decision: Decision) -> str | None:
        """All checks of a decision on a pending call, the signature included."""
        problem = self.decision_problem(decision)
        pending = self.approvals.get(decision.call_id)
        if problem is None and pending is not None and pending.signed:
            problem = await self.verify(decision)
            # The call may have been decided, superseded or expired meanwhile.
            problem = problem or self.decision_problem(decision)
        if problem == UNKNOWN:
            return f"call {decision.call_id!r} is no longer waiting for a decision"
        return problem

    async def consider_decision(self, decision: Decision, signal: str) -> None:
        """Take a decision that passes every check; record it as rejected otherwise."""
        received = self._now()
        problem = self.decision_problem(decision)
        if problem == UNKNOWN:
            if self.options.accept_early_decisions and len(self.early_decisions) < _MAX_EARLY:
                self.early_decisions[decision.call_id] = decision
                return
            problem = (
                f"unknown call id {decision.call_id!r}: no such call is waiting for a decision "
                "(decisions for calls not yet pending are off; "
                "ConversationOptions.accept_early_decisions)"
            )
        elif problem is None:
            problem = await self.checked(decision)
        if problem is None:
            self.take(decision)
        else:
            self.reject(decision.call_id, problem, decision.decided_by, signal, received)

    async def decide(self, decision: Decision) -> None:
        """The `decide` signal: approve or deny a gated call (durable).

        Stored by the server even with no worker running. A decision that
        fails its checks, or names a call that is not pending (unless the
        conversation accepts early decisions), is recorded as rejected (see
        `pending`). A call that needs a signed decision has its signature
        checked by the `verify_decision` local activity.
        """
        if not workflow.patched(TRUSTED_DECISIONS_PATCH):
            self.accept_or_reject_decision(decision)
            return
        await self.consider_decision(decision, "decide")

    async def decide_now(self, decision: Decision) -> DecisionReceipt:
        """The `decide_now` update: decide a pending call, acknowledged at once.

        The update's validator checked everything but the signature
        (`update_problem`); a signature is checked here (a local activity, so
        the verdict is recorded) and a bad one fails the update, recorded in
        `rejected`.

        Raises:
            ApplicationError: Type `DecisionRejected`: the signature does not
                verify, or the call was decided or ended while it was checked.
        """
        pending = self.approvals.get(decision.call_id)
        if pending is not None and pending.signed:
            received = self._now()
            problem = await self.checked(decision)
            if problem is not None:
                self.reject(decision.call_id, problem, decision.decided_by, "decide_now", received)
                raise ApplicationError(
                    clean_text(problem), type="DecisionRejected", non_retryable=True
                )
        self.take(decision)
        return DecisionReceipt(call_id=decision.call_id)

    def revoke_grant(self, revocation: GrantRevocation) -> None:
        """Apply a decoded `revoke_grant` input: end the grant, or record why not.

        Never raises: an unknown, expired or already revoked grant is a
        rejection (`pending().rejected`, signal `revoke_grant`). A revoked
        grant runs no later call; calls it ran stay as they ran.
        """
        revoked = self.grants.revoke(revocation, self._now())
        if isinstance(revoked, str):
            self.reject("", f"grant not revoked: {revoked}", revocation.revoked_by, "revoke_grant")
            return
        self._event(
            "grant_revoked",
            call_id=revoked.call_id,
            tool=revoked.scope.tool,
            decided_by=revoked.revoked_by or None,
            reason=clean_text(f"{self.grants.explain(revoked)}; {revoked.revoke_reason}", 500),
            outcome="revoked",
        )

    def take(self, decision: Decision) -> None:
        """Apply a decision that passed its checks: it decides the call or counts to its quorum.

        A denial decides at once. An approval of a call whose policy asks for
        `quorum` distinct approvers is counted (`PendingApproval.approved_by`,
        carried across continue-as-new with the wait); the one that reaches
        the quorum decides. `decision_problem` refuses a second approval by
        the same `decided_by`, so a person counts once.
        """
        call_id = decision.call_id
        pending = self.approvals.get(call_id)
        if pending is None or not decision.approved or pending.quorum <= 1:
            if pending is not None and decision.grant is not None:
                self.grants.add(decision, pending, self._now())
            self.decisions[call_id] = decision
            return
        approved = [*pending.approved_by, clean_text(decision.decided_by, MAX_ID_CHARS)]
        self.approvals[call_id] = pending.model_copy(update={"approved_by": approved})
        if len(approved) >= pending.quorum:
            self.decisions[call_id] = decision
            return
        self._event(
            "approval_counted",
            call_id=call_id,
            tool=pending.tool,
            decided_by=clean_text(decision.decided_by, MAX_ID_CHARS),
            outcome=f"{len(approved)} of {pending.quorum}",
        )

    # --------------------------------------------------------- interactions

    def register_interaction(self, plan: PlannedCall) -> Answer | None:
        """Make `plan`'s call wait for an answer; return an early answer kept for it."""
        call_id = plan.call.call_id
        self.interactions[call_id] = PendingInteraction(
            **self._request(plan), answer_schema=plan.answer_schema
        )
        return self.early_answers.pop(call_id, None)

    def answer_problem(self, answer: Answer) -> str | None:
        """Why `answer` cannot apply now (`UNKNOWN`: no such call), or `None`."""
        call_id = answer.call_id
        pending = self.interactions.get(call_id)
        if pending is None:
            if self._is_call(call_id):
                return f"call {call_id!r} is not waiting for an answer"
            if call_id in self.early_answers:
                return f"an answer for call {call_id!r} was already received"
            return UNKNOWN
        if call_id in self.answers:
            return f"an answer for call {call_id!r} was already received"
        mismatch = digest_problem(call_id, pending.arguments_hash, answer)
        if mismatch is not None:
            return mismatch
        if pending.input_request is not None and not sendable(answer.value):
            return "the answer cannot be sent to the server (text that is not UTF-8)"
        asked = pending.input_request
        if asked is not None and asked.kind == "url" and answer.value is not None:
            return "a link's question is answered with no value (accept once done, or decline)"
        if answer.action != "accept":
            if pending.input_request is None:
                return f"call {call_id!r} asks for an answer: it cannot be declined or cancelled"
            if answer.value is not None:
                return f"an answer that {answer.action}s the question carries no value"
            return None
        if pending.answer_schema is not None:
            # Formats by a fixed stdlib checker: the verdict, and so the replay,
            # does not depend on the worker's installed packages.
            return check_answer(pending.answer_schema, answer.value)
        return None

    def early_answers_allowed(self) -> bool:
        """Whether an answer for a call not yet pending is kept (else rejected)."""
        return self.options.accept_early_decisions or not workflow.patched(TRUSTED_DECISIONS_PATCH)

    def update_problem(self, decoded: Decision | Answer) -> str | None:
        """Why the `decide_now` / `answer_now` validator rejects `decoded`, or `None`.

        Everything but a decision's signature (`decide_now` checks it).
        """
        if isinstance(decoded, Decision):
            problem = self.decision_problem(decoded)
        else:
            problem = self.answer_problem(decoded)
        if problem == UNKNOWN:
            return f"unknown call id {decoded.call_id!r}"
        return problem

    def answer(self, answer: Answer) -> None:
        """The `answer` signal: answer an interaction call (durable); invalid ones are rejected."""
        self.accept_or_reject_answer(answer, self.early_answers_allowed())

    def answer_now(self, answer: Answer) -> DecisionReceipt:
        """The `answer_now` update: answer a pending interaction (its validator checked it)."""
        self.answers[answer.call_id] = answer
        return DecisionReceipt(call_id=answer.call_id)

    def accept_or_reject_answer(self, answer: Answer, early: bool) -> None:
        """Take an answer, keep it for a call not yet pending (`early`), or reject it."""
        problem = self.answer_problem(answer)
        if problem is None:
            self.answers[answer.call_id] = answer
        elif problem == UNKNOWN and early and len(self.early_answers) < _MAX_EARLY:
            self.early_answers[answer.call_id] = answer
        else:
            reason = f"unknown call id {answer.call_id!r}" if problem == UNKNOWN else problem
            if problem == UNKNOWN and not early:
                reason += (
                    ": no such call is waiting for an answer (answers for calls not yet "
                    "pending are off; ConversationOptions.accept_early_decisions)"
                )
            self.reject(answer.call_id, reason, answer.answered_by, "answer")

    # -------------------------------------------------------------- carry

    def restore(self, wait: CarriedCall) -> None:
        """Make a carried call wait for its decision or answer again, with what arrived."""
        call_id = wait.plan.call.call_id
        if wait.approval is not None:
            self.approvals[call_id] = wait.approval
            if wait.decision is not None:
                self.decisions[call_id] = wait.decision
        if wait.interaction is not None:
            self.interactions[call_id] = wait.interaction
            if wait.answer is not None:
                self.answers[call_id] = wait.answer

    def waits_of(self, call_id: str) -> dict[str, Any]:
        """What a call waits for, with what arrived, as `CarriedCall` fields."""
        approval = self.approvals.get(call_id)
        interaction = self.interactions.get(call_id)
        return {
            "approval": approval,
            "decision": self.decisions.get(call_id) if approval else None,
            "interaction": interaction,
            "answer": self.answers.get(call_id) if interaction else None,
        }
