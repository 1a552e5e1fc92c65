"""Sampling requests and approver-only links of a call that asked for input (MCP MRTR).

`InputRounds` hands two kinds of input request here:

* **sampling** (`sampling/createMessage` inside an input-required result):
  approved first when the server's configuration says `sampling =
  "approve"` (a `PendingApproval` with `input_request.kind == "sampling"`,
  decided like a tool call's approval: the tool's approvers, signatures,
  deadline), then answered by the conversation's model through the
  `model.sample-v1` activity (`Sampler`), with the agent's settings. Its
  recorded `SampledReply` is what a replay reads; its usage joins the
  conversation's totals.
* **URL elicitation** with `url_elicitation = "approver"`: the person's
  consent is an approval (`input_request.kind == "url"`, the link and its
  host shown): approve once done at the link, deny to decline.

The digest a decision must carry binds it to the call and to this very
request (`question_digest` over the question and, for sampling, the
request's messages and settings). Events name the call, the tool and the
outcome only: a sampling request's messages and a link (which may carry a
one-time token) stay in `pending`, never in events or logs.

One output per call: an approval past its deadline ends the call
`expired`, a denied one `denied`, a superseded one `interrupted` (the
server ran until it asked), a sampling activity that fails for good
`sampling_failed`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.exceptions import ActivityError

from durable_tools.workflows.model_failure import model_retry_policy
from durable_tools.workflows.notifications import MCP_QUESTION_WEBHOOKS_PATCH
from durable_tools.workflows.waits import MOVED, Moved, Waits, seconds_text

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import PlannedCall
    from durable_tools.approvals import Decision
    from durable_tools.arguments import SUMMARY_LIMIT
    from durable_tools.conversation import AgentConfig, ConversationOptions
    from durable_tools.handler_input import clean_text
    from durable_tools.input_requests import (
        SAMPLE_ACTIVITY,
        InputQuestion,
        SampledReply,
        SampleRequest,
        SamplingAsk,
        question_digest,
    )
    from durable_tools.results import Failure, denied, expired, failed, interrupted
    from durable_tools.transcript import Usage
    from durable_tools.workflows.decision_book import DecisionBook

__all__ = ["InputApprovals", "Sampler"]


class _Calls(Protocol):
    """What `InputApprovals` needs of the turn's calls (`TurnCalls`)."""

    book: DecisionBook
    waits: Waits
    superseded: bool
    superseded_by: str
    moving: bool

    def publish(self) -> None: ...

    def calls_state(self) -> str: ...

    def move_now(self) -> bool: ...


class Sampler:
    """Runs `model.sample-v1` for the conversation's current agent.

    Args:
        options: The conversation's options (`model_timeout`, `model_retry`,
            `transcript_in_activity_input`).
        agent: The current agent's name and configuration.
        add_usage: Adds a completion's usage to the conversation's totals
            (model name, usage).
        turn: The current turn's number.
    """

    def __init__(
        self,
        options: ConversationOptions,
        agent: Callable[[], tuple[str, AgentConfig]],
        add_usage: Callable[[str, Usage | None], None],
        turn: Callable[[], int],
    ) -> None:
        self._options = options
        self._agent = agent
        self._add_usage = add_usage
        self._turn = turn

    async def sample(
        self, plan: PlannedCall, server: str, ask: SamplingAsk
    ) -> SampledReply | Failure:
        """The model's completion of `ask`, or the call's `Failure` when it fails for good."""
        name, agent = self._agent()
        info = workflow.info()
        inline = self._options.transcript_in_activity_input
        retry = agent.model_retry or self._options.model_retry
        request = SampleRequest(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            # By name (the worker keeps it or reads it by query), whole only
            # where the run cannot be queried.
            agent_name="" if inline else name,
            agent=agent.model_dump(mode="json") if inline else None,
            turn=self._turn(),
            call_id=plan.call.call_id,
            server=server,
            ask=ask,
        )
        summary = f"{server} samples {agent.model} for {plan.call.call_id}"
        try:
            reply = await workflow.execute_activity(
                SAMPLE_ACTIVITY,
                request,
                result_type=SampledReply,
                start_to_close_timeout=timedelta(seconds=self._options.model_timeout),
                schedule_to_close_timeout=timedelta(
                    seconds=max(retry.timeout, self._options.model_timeout)
                ),
                retry_policy=model_retry_policy(retry),
                summary=clean_text(summary, SUMMARY_LIMIT),
            )
        except ActivityError as exc:
            cause = exc.cause or exc
            return failed(
                plan.call,
                "sampling_failed",
                f"the conversation's model could not answer MCP server {server!r}'s sampling "
                f"request: {clean_text(str(cause), 500)}; the call was not completed",
            )
        self._add_usage(reply.model or agent.model, reply.usage)
        return reply


class InputApprovals:
    """Approvals of what a running call's MCP server asked (sampling, approver-only links).

    Args:
        calls: The turn's calls (their book, waits, supersession and moves).
        event: Publishes a `ConversationEvent` (`kind`, then its fields).
        set_state: Sets the loop's visible state.
    """

    def __init__(
        self, calls: _Calls, event: Callable[..., None], set_state: Callable[[str], None]
    ) -> None:
        self._calls = calls
        self._event = event
        self._set_state = set_state

    async def approve(
        self, plan: PlannedCall, question: InputQuestion, shown: Any, restored: bool
    ) -> Decision | Failure | Moved:
        """Wait for an approval of `question`: the decision, the call's `Failure`, or `MOVED`.

        Args:
            plan: The call's plan.
            question: What is asked (kind `sampling` or `url`).
            shown: What else the person sees and the digest binds (a
                sampling request's messages and settings; `None` for a link).
            restored: The approval was registered in the previous run (its
                pending entry and any decision came with the call).

        Returns:
            The approving `Decision`; Failure `denied`, `expired` or
            `interrupted`; or `MOVED` when the wait moves to the next run.
        """
        calls, call = self._calls, plan.call
        book, call_id = calls.book, call.call_id
        seconds = book.deadline(plan)
        pending = book.approvals.get(call_id) if restored else None
        if pending is None:
            what = "sample the model" if question.kind == "sampling" else f"open {question.host}"
            summary = clean_text(
                f"{question.server} asks to {what} ({plan.summary})", SUMMARY_LIMIT
            )
            digest = question_digest(plan.arguments_hash, question, shown)
            pending = book.register_input_approval(plan, digest, summary, question)
            self._event(
                "approval_requested", call_id=call_id, tool=call.name, outcome=question.kind
            )
            book.notifier.notify(
                plan,
                "approval_requested",
                requested_at=pending.requested_at,
                approvers=pending.approvers,
                deadline=pending.deadline,
                patch=MCP_QUESTION_WEBHOOKS_PATCH,
            )
        self._set_state("waiting")
        calls.publish()
        timed_out = False
        try:
            await calls.waits.wait(
                lambda: calls.move_now() or call_id in book.decisions or calls.superseded,
                pending.deadline,
                f"approval deadline of {question.server}'s {question.kind} request",
            )
        except TimeoutError:
            timed_out = True
        finally:
            if not calls.moving:  # else the approval (and any decision) goes to the next run
                book.approvals.pop(call_id, None)
            self._set_state(calls.calls_state())
            calls.publish()
        if calls.moving and not timed_out:
            return MOVED
        decision = None if timed_out else book.decisions.pop(call_id, None)
        what = (
            "its sampling request" if question.kind == "sampling" else "the link it asked to open"
        )
        if timed_out:
            result: Decision | Failure = expired(
                call,
                f"no decision on MCP server {question.server!r}'s {what} within "
                f"{seconds_text(seconds)}; the server ran until it asked, and the call was "
                "not completed",
            )
        elif decision is None:
            result = interrupted(
                call,
                f"a new user message arrived before MCP server {question.server!r}'s {what} was "
                "decided; the server ran until it asked, and the call was not completed",
            )
        elif not decision.approved:
            reason = f"a person denied MCP server {question.server!r}'s {what}"
            if decision.reason:
                reason += f": {clean_text(decision.reason, 500)}"
            result = denied(call, reason + "; the call was not completed")
        else:
            result = decision
        outcome = "approved" if isinstance(result, Decision) else result.kind
        decided_by = clean_text(decision.decided_by, 200) if decision is not None else None
        self._event(
            "approval_decided" if decision is not None else "approval_expired",
            call_id=call_id,
            tool=call.name,
            outcome=outcome,
            decided_by=decided_by,
        )
        book.notifier.notify(
            plan,
            "approval_expired" if outcome == "expired" else "approval_decided",
            requested_at=pending.requested_at,
            outcome=outcome,
            decided_by=decided_by,
            patch=MCP_QUESTION_WEBHOOKS_PATCH,
        )
        return result
