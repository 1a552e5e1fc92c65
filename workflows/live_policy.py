"""A live policy change: the `set_policy` signal, and calls waiting for approval decided again.

`LivePolicy` holds the policy version installed in the conversation (carried
across continue-as-new) and applies a `PolicyChange`: it checks the change
from the payload alone (shape, bounds, the claimed version against the
document's digest; `durable_tools.policy_document`, no CEL), records who made
it (`policy_installed`) and, when calls wait for approval, asks the worker
what the new version makes of them (the `policy.reevaluate-v1` activity,
whose answer is recorded) and applies the answer: a call the version runs is
released, one it gates gets the new approvers and quorum, one it denies is
answered `denied`; each is published as `policy_reevaluated`. Later model
turns carry the version (`ModelTurnRequest.policy_ref`), so the worker plans
their calls with it.

Activities get the version only (`PolicyRef`: name and digest), never the
document: history holds it once, in the signal (and in a continue-as-new's
carried state). A worker that has not compiled the version reads it from
the run, in process (`live_policy`) or with the `policy_version` query
(`document`), and checks its digest (`activities/policy_versions.py`).

The workflow never evaluates a rule: replay reads the recorded answer.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from durable_tools.workflows.turn_calls import TurnCalls
from durable_tools.workflows.visibility import Visibility

with workflow.unsafe.imports_passed_through():
    from durable_tools._policy_wire import (
        REEVALUATE_ACTIVITY,
        Reevaluated,
        Reevaluation,
        ReevaluationResult,
    )
    from durable_tools.approvals import Decision
    from durable_tools.conversation import AgentConfig, PendingApproval
    from durable_tools.handler_input import clean_sender, clean_text
    from durable_tools.policy_document import (
        InstalledPolicy,
        PolicyChange,
        PolicyDocument,
        PolicyRef,
        change_problem,
    )
    from durable_tools.policy_verdict import Effect, effect_text
    from durable_tools.teams import TEAM
    from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage

__all__ = ["SET_POLICY_SIGNAL", "LivePolicy"]

SET_POLICY_SIGNAL = "set_policy"
"""The signal that installs a policy version (input: `PolicyChange`)."""

_REEVALUATION_TIMEOUT = timedelta(seconds=60)

_KEPT_VERSIONS = 4
"""Versions whose documents the run answers by version: the installed one and
the latest ones before it (a model turn requested under a version replaced
while it ran may still load it)."""


class LivePolicy:
    """The conversation's installed policy version and its changes.

    Args:
        installed: The version carried from the previous run (`None`: none).
        calls: The turn's calls (their plans, the book of approvals).
        view: Events and state.
        agent: The current agent's configuration (for the worker).
        publish: Publishes what is pending.
    """

    def __init__(
        self,
        installed: InstalledPolicy | None,
        *,
        calls: TurnCalls,
        view: Visibility,
        agent: Callable[[], AgentConfig],
        publish: Callable[[], None],
    ) -> None:
        self.installed = installed
        # By version, oldest first; read from activities' threads (`document`):
        # entries are only added and dropped, never changed.
        self._documents: dict[str, PolicyDocument] = {}
        if installed is not None:
            self._documents[installed.version] = installed.document
        self._calls = calls
        self._view = view
        self._agent = agent
        self._publish = publish
        # Each change's number: a re-evaluation applies only if no later change came.
        self._generation = 0
        # The change number the latest model turn was requested under.
        self._requested = 0
        calls.on_registered = self.registered

    def for_turn(self) -> PolicyRef | None:
        """The version a model turn requested now plans its calls with (`None`: none)."""
        self._requested = self._generation
        return self.installed.ref() if self.installed is not None else None

    def document(self, version: str) -> PolicyDocument | None:
        """The document of `version`, if this run installed it lately (`None`: not held).

        The `policy_version` query's answer, and the in-process read's
        (`live_policy`): never raises, from any thread. The version is the
        workflow's own digest of the document, so the answer is the
        document of that digest; the worker checks it again.
        """
        return self._documents.get(version)

    def registered(self) -> None:
        """A turn's waits are registered: decide them again if a change came while it was planned.

        A change that arrives while the model turn runs reaches the turn's
        calls once they wait, as it reaches calls that already waited.
        """
        if self._requested != self._generation and self._waiting():
            self._requested = self._generation
            self._start(self._generation)

    def _start(self, generation: int) -> None:
        task = asyncio.create_task(self._reevaluate(generation))
        # Continue-as-new waits for it as for a decision's signature check.
        book = self._calls.book
        book.verifications.add(task)
        task.add_done_callback(book.verifications.discard)

    def change(self, change: PolicyChange) -> None:
        """Apply a decoded `set_policy` input: install it, or record why not.

        Never raises: a change that fails its checks is recorded in
        `pending().rejected` (signal `set_policy`) and changes nothing.
        """
        book = self._calls.book
        sender = clean_sender(change.installed_by)
        problem, version = change_problem(change)
        if problem is not None:
            book.reject("", f"policy change refused: {problem}", sender, SET_POLICY_SIGNAL)
            workflow.logger.warning("refused a set_policy signal: %s", problem)
            return
        document = change.document
        self.installed = InstalledPolicy(
            document=document, version=version, installed_by=sender, installed_at=workflow.now()
        )
        self._documents.pop(version, None)
        self._documents[version] = document
        while len(self._documents) > _KEPT_VERSIONS:
            del self._documents[next(iter(self._documents))]
        self._generation += 1
        why = f"; {clean_text(change.reason, 200)}" if change.reason else ""
        self._view.event(
            "policy_installed",
            sent_by=sender or None,
            reason=f"policy {clean_text(document.name, 100)} {version}{why}",
        )
        if self._waiting():
            self._start(self._generation)

    def _waiting(self) -> list[str]:
        """Ids of the turn's calls that wait for their own approval, with no decision yet."""
        book, plans = self._calls.book, self._calls.plans
        return [
            call_id
            for call_id, pending in book.approvals.items()
            if call_id in plans and call_id not in book.decisions and pending.input_request is None
        ]

    def _request(self, installed: InstalledPolicy, waiting: list[str]) -> Reevaluation:
        """The activity's input: the waiting calls and the facts their first planning saw."""
        plans = self._calls.plans
        order = list(plans)
        waiting_set = set(waiting)
        # What earlier runs held and this one no longer carries counts too.
        prior_calls, prior_ok = self._calls.prior_counts()
        earlier: Counter[str] = Counter(prior_calls)
        ran: Counter[str] = Counter(prior_ok)
        caller, upto = "", 0
        for index, item in enumerate(self._calls.transcript_items()):
            if isinstance(item, AssistantMessage):
                if any(c.call_id in waiting_set for c in item.tool_calls):
                    # The waiting calls' turn: what follows came after it. The
                    # tools' own `needs_approval` reads the transcript up to it.
                    upto = self._calls.transcript_base() + index + 1
                    break
                earlier.update(c.name for c in item.tool_calls)
            elif isinstance(item, ToolCallOutput) and not item.is_error:
                ran[item.tool] += 1
            elif isinstance(item, UserMessage):
                caller = item.sent_by
        info = workflow.info()
        return Reevaluation(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            agent=self._agent(),
            toolkit=self._calls.toolkit,
            team=info.typed_search_attributes.get(TEAM),
            caller=caller,
            policy_ref=installed.ref(),
            calls=[plans[c].call for c in waiting],
            earlier=dict(earlier),
            ran=dict(ran),
            turn=[plans[c].call.name for c in order],
            positions=[order.index(c) for c in waiting],
            upto=upto,
        )

    async def _reevaluate(self, generation: int) -> None:
        """Ask the worker what the installed version makes of the waiting calls; apply it."""
        installed, waiting = self.installed, self._waiting()
        if installed is None or not waiting:
            return
        try:
            result = await workflow.execute_activity(
                REEVALUATE_ACTIVITY,
                self._request(installed, waiting),
                result_type=ReevaluationResult,
                start_to_close_timeout=_REEVALUATION_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=10),
                summary=f"policy {installed.version[:19]}: {len(waiting)} waiting calls",
            )
        except ActivityError as exc:
            cause = exc.cause if exc.cause is not None else exc
            reason = (
                f"waiting calls were not decided again under policy {installed.version[:19]}: "
                f"{clean_text(str(cause), 300)}; they wait as before"
            )
            self._calls.book.reject("", reason, installed.installed_by, SET_POLICY_SIGNAL)
            return
        if generation != self._generation:
            return  # a later change came meanwhile: its own re-evaluation applies
        for answer in result.calls:
            self._apply(installed, answer)
        self._publish()

    def _apply(self, installed: InstalledPolicy, answer: Reevaluated) -> None:
        """Release, re-gate or deny one waiting call as the new version says."""
        calls, book = self._calls, self._calls.book
        call_id = answer.call_id
        pending = book.approvals.get(call_id)
        plan = calls.plans.get(call_id)
        if pending is None or plan is None or call_id in book.decisions:
            return  # decided meanwhile
        before = effect_text(_effect(pending))
        by = f"policy {installed.document.name} {installed.version[:19]}"
        if installed.installed_by:
            by += f" (installed by {installed.installed_by})"
        after = answer.outcome
        if answer.outcome == "approve":
            update = {
                "approvers": answer.approvers,
                "quorum": answer.quorum,
                "policy": answer.policy,
                "signed": bool(answer.approvers) or book.options.require_signed_decisions,
            }
            pending = pending.model_copy(update=update)
            book.approvals[call_id] = pending
            calls.plans[call_id] = plan.model_copy(
                update={"approvers": answer.approvers, "policy": answer.policy}
            )
            after = effect_text(_effect(pending))
            if len(pending.approved_by) >= pending.quorum:  # already enough approvals
                book.decisions[call_id] = self._decision(pending, by, True, "quorum reached")
        elif answer.outcome == "run":
            book.decisions[call_id] = self._decision(pending, by, True, "released")
        else:
            verdict = answer.policy
            reason = (verdict.reason or f"rule {verdict.rule or 'default'}") if verdict else ""
            book.decisions[call_id] = self._decision(pending, by, False, reason or answer.reason)
        self._view.event(
            "policy_reevaluated",
            call_id=call_id,
            tool=pending.tool,
            outcome=f"{before} -> {after}",
            policy=answer.policy.model_dump(mode="json") if answer.policy is not None else None,
            sent_by=installed.installed_by or None,
        )

    @staticmethod
    def _decision(pending: PendingApproval, by: str, approved: bool, reason: str) -> Decision:
        """The decision a policy change gives a waiting call (bound to its digest)."""
        return Decision(
            call_id=pending.call_id,
            approved=approved,
            arguments_hash=pending.arguments_hash,
            decided_by=by,
            reason=clean_text(reason, 1000),
        )


def _effect(pending: PendingApproval) -> Effect:
    return Effect(outcome="approve", approvers=sorted(pending.approvers), quorum=pending.quorum)
