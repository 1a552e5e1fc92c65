"""The activity `policy.reevaluate-v1`: waiting calls decided again under a new policy version.

A live change (`set_policy`, docs/policies.md "Live change") reaches the
calls that wait for approval through this activity: it plans each call
again (`planning.plan_calls`) with the installed version in the agent's
policy's place (loaded by version, `policy_versions.py`), the same facts
the call's first planning saw (history counts and caller sent by the
workflow, the transcript up to the calls' turn read again as a model turn
reads it: a tool's own `needs_approval` sees what it saw then), and
returns what the version
makes of it. The result is recorded in history: a replay applies the same
answer whatever policy the replaying worker has.
"""

from __future__ import annotations

from collections import Counter

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_tools._policy_wire import (
    REEVALUATE_ACTIVITY,
    Reevaluated,
    Reevaluation,
    ReevaluationResult,
)
from durable_tools._wire import ModelTurnRequest, PlannedCall
from durable_tools.activities.model_activity import ModelActivity
from durable_tools.activities.planning import plan_calls
from durable_tools.activities.policy_versions import UnloadedPolicy
from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES

__all__ = ["PolicyActivity"]


class PolicyActivity(ModelActivity):
    """The `policy.reevaluate-v1` activity of `AgentActivities`."""

    @activity.defn(name=REEVALUATE_ACTIVITY)
    async def policy_reevaluate(self, request: Reevaluation) -> ReevaluationResult:
        """What the installed policy version makes of each waiting call.

        Args:
            request: The calls, the version and the facts rules see.

        Returns:
            One `Reevaluated` per call, in order. A call the version does
            not decide falls back to its tool's own `needs_approval`, as
            when it was planned.

        Raises:
            ApplicationError: The agent is not one this worker serves
                (non-retryable), or the version could not be loaded or
                verified (`PolicyNotLoaded`; retried only when a query
                failed): the workflow records it, and the calls wait as
                before.
        """
        agent = self._resolve(request.agent)
        toolkit = self._toolkit(request.toolkit or agent.toolkit)
        turn = ModelTurnRequest(
            workflow_id=request.workflow_id,
            run_id=request.run_id,
            turn=0,
            upto=request.upto,
            team=request.team,
        )
        # The transcript up to the calls' turn, as when they were planned: the
        # turn's message apart, appended for `needs_approval` (plan_calls).
        transcript = await self._transcript(turn) if request.upto else []
        message = transcript.pop() if transcript else None
        installed = await self.installed_policy(
            request.workflow_id, request.run_id, request.policy_ref, request.policy
        )
        if isinstance(installed, UnloadedPolicy):
            # Gating them "for anyone" would loosen who may approve: they wait as before.
            raise ApplicationError(
                installed.error, type="PolicyNotLoaded", non_retryable=not installed.transient
            )
        answers: list[Reevaluated] = []
        for call, position in zip(request.calls, request.positions, strict=True):
            calls = Counter(request.earlier)
            calls.update(request.turn[:position])
            policies = self._call_policies(
                agent,
                turn,
                transcript,
                history=(dict(calls), request.ran),
                caller=request.caller,
                installed=installed,
            )
            [plan] = plan_calls(
                toolkit,
                [call],
                transcript,
                message=message,
                max_argument_bytes=self.max_payload_bytes or DEFAULT_MAX_ARGUMENT_BYTES,
                policies=policies,
            )
            answers.append(_answer(plan))
        return ReevaluationResult(calls=answers)


def _answer(plan: PlannedCall) -> Reevaluated:
    """What a new plan of a waiting call says: run, wait (for whom), or deny."""
    call_id, verdict = plan.call.call_id, plan.policy
    if plan.failure is not None:
        return Reevaluated(
            call_id=call_id, outcome="deny", policy=verdict, reason=plan.failure.reason
        )
    if not plan.needs_approval:
        return Reevaluated(call_id=call_id, outcome="run", policy=verdict)
    quorum = verdict.quorum if verdict is not None else 1
    return Reevaluated(
        call_id=call_id,
        outcome="approve",
        approvers=list(plan.approvers),
        quorum=quorum,
        policy=verdict,
    )
