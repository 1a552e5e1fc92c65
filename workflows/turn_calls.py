"""A turn's tool calls, each answered exactly once (DESIGN.md invariant 1).

`TurnCalls` holds the calls of the current turn (planned, open, started,
answered) and answers them: a plan's `Failure` as it is, local calls as
their activities (`tool_activity`) at most `max_concurrent_tool_calls` at a
time, approval-gated calls after a decision (`DecisionBook`), interaction
calls with an answer, signal tools by `signal_tools.interpret`. `record`
appends a call's one output, with who gave it where a person's input did (an
answer, a denial, the message that superseded a wait, a cancel); `close`
gives a call the conversation's cancellation left open `cancelled` (never
started) or `interrupted`.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError, RetryState

from durable_tools.workflows.approval_clock import escalation_of, run_clock
from durable_tools.workflows.decision_book import DecisionBook
from durable_tools.workflows.grant_book import Grants
from durable_tools.workflows.handler_inputs import cancellation
from durable_tools.workflows.input_rounds import InputRounds
from durable_tools.workflows.run_transcript import RunTranscript
from durable_tools.workflows.signal_tools import SignalWaits, interpret
from durable_tools.workflows.sub_agents import SubAgents
from durable_tools.workflows.task_polls import TaskPolls
from durable_tools.workflows.tool_activity import activity_failure, run_tool_activity
from durable_tools.workflows.visibility import Visibility, calls_state
from durable_tools.workflows.waits import MOVED, Moved, Waits, seconds_text

with workflow.unsafe.imports_passed_through():
    from durable_tools import telemetry
    from durable_tools._wire import CarriedState, DeltaEntry, PlannedCall
    from durable_tools.approvals import decision_outcome
    from durable_tools.conversation import ConversationOptions
    from durable_tools.handler_input import clean_sender, clean_text
    from durable_tools.input_requests import InputRequired, InputResume
    from durable_tools.policy_verdict import PolicyVerdict, disagreement_text
    from durable_tools.results import Failure, Ok, ToolCall, cancelled, expired, failed, interrupted
    from durable_tools.signals import Finish, Handoff
    from durable_tools.tool_tasks import TaskState
    from durable_tools.transcript import ToolCallOutput, to_tool_call_output

__all__ = ["Outcome", "TurnCalls", "fold_outcomes"]

Outcome = Handoff | Finish | Moved | None
"""What answering one call tells the loop: switch agents, finish, or the wait moved."""


def fold_outcomes(outcomes: list[Outcome]) -> tuple[str | None, Finish | Moved | None]:
    """What a turn's outcomes tell the loop: the next agent, and finish or `MOVED`.

    The last `handoff` names the next agent (`None`: no handoff); the first
    `finish` ends the conversation unless a wait moved to the next run.
    """
    agent: str | None = None
    finish: Finish | None = None
    moved = False
    for outcome in outcomes:
        if isinstance(outcome, Handoff):
            agent = outcome.agent
        elif isinstance(outcome, Finish) and finish is None:
            finish = outcome
        moved = moved or isinstance(outcome, Moved)
    return agent, MOVED if moved else finish


class TurnCalls:
    """The current turn's calls and how each gets its one output.

    Args:
        options: The conversation's options.
        state: The state the run starts from (early decisions and answers,
            rejections, an early `resume`; a carried turn is restored by
            `continuation.restore_turn`).
        waits: The run's durable waits.
        view: The loop's state and events.
        transcript: The run's transcript, which each call's output joins.
        publish: Publishes what is pending (search attributes, details).
        run_tool: Runs a local call (the workflow's `_execute`).
        turn: The number of the current model turn.
    """

    def __init__(
        self,
        options: ConversationOptions,
        state: CarriedState,
        *,
        waits: Waits,
        view: Visibility,
        transcript: RunTranscript,
        publish: Callable[[], None],
        run_tool: Callable[[PlannedCall, str], Any],
        turn: Callable[[], int],
    ) -> None:
        self.options = options
        self.book = DecisionBook.from_state(options, state, view.event, self.is_call)
        self.signal_waits = SignalWaits(early_resume=state.early_resume)
        self.waits = waits
        self.view = view
        self.answered = {i.call_id for i in transcript.items if isinstance(i, ToolCallOutput)}
        self._publish = publish
        self._transcript = transcript
        self._run_tool = run_tool
        self._turn = turn
        self.plans: dict[str, PlannedCall] = {}  # the current turn's calls by id
        self.open: dict[str, ToolCall] = {}
        self.started: set[str] = set()
        self.produced: set[str] = set()
        self.attempts: dict[str, dict[str, Any]] = {}  # call id -> attempt, duration
        self.running = 0
        self.toolkit = ""
        self.superseded = False
        # Who sent the message that superseded the turn's waits (cleaned).
        self.superseded_by = ""
        # Set when the turn's waits hand over to the next run (a new version).
        self.moving = False
        self.finishing = False  # a `finish` call of this turn was interpreted
        self.inputs = InputRounds(self, view.event, self._set_state)
        # Called once a turn's waits are registered (`LivePolicy.registered`).
        self.on_registered: Callable[[], None] | None = None
        self.tasks = TaskPolls(self, self.inputs, view.event)
        # The workflow sets it (it holds the budget): runs agent tools' sub-agents.
        self.sub_agents: SubAgents | None = None

    def _set_state(self, state: str) -> None:
        self.view.state = state

    def transcript_items(self) -> list[Any]:
        """The run's transcript items (read only)."""
        return self._transcript.items

    def transcript_base(self) -> int:
        """The conversation-wide index of the run's first transcript item."""
        return self._transcript.base

    def prior_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per tool, calls and non-error outputs before the run's first item (`RunTranscript`)."""
        return dict(self._transcript.prior_calls), dict(self._transcript.prior_ok)

    def publish(self) -> None:
        """Publish what is pending (search attributes, current details)."""
        self._publish()

    def is_call(self, call_id: str) -> bool:
        """Whether `call_id` is an open or answered call of the conversation."""
        return call_id in self.answered or call_id in self.open

    def calls_state(self) -> str:
        """The `status` state while the turn's calls are open (`visibility.calls_state`)."""
        book, waits = self.book, self.signal_waits
        return calls_state(book.approvals, book.interactions, waits.paused, waits.sleepers)

    def move_now(self) -> bool:
        """A call's wait condition, first: move the turn's waits to a new run?

        Once no call of the turn runs (or waits for a slot) and a move is due,
        every wait of the turn returns `MOVED` in the same workflow task,
        with what arrived for it (a decision, an answer, a resume) carried:
        the new version handles them.
        """
        if not self.moving and self.running == 0 and not self.finishing:
            self.moving = self.waits.move_due()
        return self.moving

    async def answer_plans(
        self,
        plans: list[PlannedCall],
        toolkit: str,
        restored: set[str],
        superseded: bool,
        agents: Mapping[str, Any],
    ) -> list[Outcome]:
        """Answer each of a turn's calls exactly once, side by side; their outcomes in order.

        `restored`: ids of the calls that already wait (carried from the
        previous run, or still registered after a continue-as-new that did
        not fit): not registered anew. `superseded`: a message arrived
        before the calls were answered.
        """
        self.superseded = superseded
        self.view.state = "tools"
        self.toolkit = toolkit
        self.moving = self.finishing = False
        self.plans = {plan.call.call_id: plan for plan in plans}
        limit = asyncio.Semaphore(self.options.max_concurrent_tool_calls)
        for plan in plans:
            self.open[plan.call.call_id] = plan.call
        # Register every wait before anything runs, so a decision arriving in
        # the same workflow task finds its call pending.
        for plan in plans:
            if plan.call.call_id in restored:
                continue
            if plan.shadow is not None:
                self.shadow_event(plan)
            if plan.failure is None and plan.kind == "local" and plan.needs_approval:
                self.register_approval(plan)
            elif plan.failure is None and plan.kind == "interaction":
                self.register_interaction(plan)
        if self.on_registered is not None:
            self.on_registered()
        self.publish()
        outcomes = await asyncio.gather(
            *(
                self.answer(plan, toolkit, limit, agents, plan.call.call_id in restored)
                for plan in plans
            )
        )
        self.publish()
        return outcomes

    def shadow_event(self, plan: PlannedCall) -> None:
        """Publish `policy_disagreement`: the candidate policy would have decided otherwise."""
        shadow = plan.shadow
        if shadow is None:
            return
        self.view.event(
            "policy_disagreement",
            call_id=plan.call.call_id,
            tool=plan.call.name,
            turn=self._turn(),
            outcome=disagreement_text(shadow),
            policy=plan.policy.model_dump(mode="json") if plan.policy is not None else None,
            candidate=shadow.candidate.model_dump(mode="json") if shadow.candidate else None,
        )

    def register_approval(self, plan: PlannedCall) -> None:
        """Make the call wait for a decision; apply an early decision kept for it."""
        early = self.book.register_approval(plan)
        if early is not None:
            self.book.take_early_decision(early)

    def register_interaction(self, plan: PlannedCall) -> None:
        """Make the call wait for an answer; apply an early answer kept for it."""
        early = self.book.register_interaction(plan)
        if early is not None:
            self.book.answer(early)

    async def answer(
        self,
        plan: PlannedCall,
        toolkit: str,
        limit: asyncio.Semaphore,
        agents: Mapping[str, Any],
        resumed: bool = False,
    ) -> Outcome:
        """Give one call its output (or return `MOVED`); a cancellation closes it."""
        call = plan.call
        try:
            if plan.failure is not None:
                self.record(plan.failure, policy=plan.policy)
            elif plan.kind == "signal":
                return await interpret(self, plan, agents, resumed)
            elif plan.kind == "interaction":
                answer = await self.traced_answer(plan, resumed)
                if isinstance(answer, Moved):
                    return answer
                self.record(answer, sent_by=self.answered_by(answer))
            elif plan.kind != "local":
                reason = f"{call.name!r} is a {plan.kind} tool; it is not executed locally"
                self.record(failed(call, "non_local_tool", reason))
            elif resumed and call.call_id in self.tasks.progress:
                # Its task was polled in the previous run, whose wait moved here.
                self.started.add(call.call_id)
                result = await self.tasks.resume(plan, toolkit, self.execute, limit)
                if isinstance(result, Moved):
                    return result
                self.record(result)
            elif resumed and call.call_id in self.inputs.progress:
                # It asked for input in the previous run, whose wait moved here: it
                # started there (a cancellation now makes it `interrupted`).
                self.started.add(call.call_id)
                result = await self.inputs.resume(plan, toolkit, self.execute, limit)
                if isinstance(result, TaskState):
                    result = await self.tasks.follow(plan, toolkit, result, self.execute, limit)
                if isinstance(result, Moved):
                    return result
                self.record(result)
            else:
                refusal = await self.traced_decision(plan, resumed) if plan.needs_approval else None
                if isinstance(refusal, Moved):
                    return refusal
                if refusal is not None:
                    self.record(refusal, sent_by=self.refused_by(refusal))
                else:
                    async with limit:
                        result = await self._run_tool(plan, toolkit)
                    if isinstance(result, InputRequired):  # asked: no slot held meanwhile
                        result = await self.inputs.follow(
                            plan, toolkit, result, self.execute, limit
                        )
                    if isinstance(result, TaskState):  # a task: polled, no slot held meanwhile
                        result = await self.tasks.follow(plan, toolkit, result, self.execute, limit)
                    if isinstance(result, Moved):
                        return result  # its question or polls go to the next run
                    self.record(result)
        except asyncio.CancelledError:
            self.close(call)
            raise
        return None

    def answered_by(self, result: Ok | Failure) -> str:
        """Who gave an interaction call's output: the answerer, or the superseding sender."""
        answer = self.book.answers.get(result.call_id)
        if answer is not None:
            return clean_sender(answer.answered_by)
        superseded = isinstance(result, Failure) and result.kind == "cancelled"
        return self.superseded_by if superseded else ""

    def refused_by(self, refusal: Failure) -> str:
        """Who refused a gated call: the person who denied it, or the superseding sender."""
        decision = self.book.decisions.get(refusal.call_id)
        if decision is not None:
            return clean_sender(decision.decided_by)
        return self.superseded_by if refusal.kind == "cancelled" else ""

    def record(
        self, result: Ok | Failure, sent_by: str = "", policy: PolicyVerdict | None = None
    ) -> None:
        """Append the one output of a call; a second one is dropped.

        `sent_by`: who gave it, when a person's input did (`ToolCallOutput.sent_by`).
        `policy`: the verdict of the policy that denied it (for the event).
        """
        if result.call_id in self.answered:
            return
        self.answered.add(result.call_id)
        self.open.pop(result.call_id, None)
        produced = result.call_id in self.produced  # as its tool activity returned it
        self.produced.discard(result.call_id)
        source = DeltaEntry(call_id=result.call_id) if produced else None
        self._transcript.append(to_tool_call_output(result, sent_by=sent_by), source)
        outcome = "ok" if isinstance(result, Ok) else result.kind
        telemetry.record_tool_call(result.tool, outcome)
        facts = self.attempts.pop(result.call_id, {})
        self.view.event(
            "tool_call_finished",
            call_id=result.call_id,
            tool=result.tool,
            outcome=outcome,
            policy=policy.model_dump(mode="json") if policy is not None else None,
            **facts,
        )

    def close(self, call: ToolCall) -> None:
        """Answer a call the conversation's cancellation left open (naming who cancelled)."""
        sender, _ = cancellation()
        if call.call_id in self.started:
            self.record(interrupted(call), sent_by=sender)
        else:
            reason = "the conversation was cancelled before this call started"
            self.record(cancelled(call, reason), sent_by=sender)

    def close_open(self) -> None:
        """Answer every open call (the conversation was cancelled)."""
        for call in list(self.open.values()):
            self.close(call)

    async def execute(
        self, plan: PlannedCall, toolkit: str, resume: InputResume | None = None
    ) -> Ok | Failure | InputRequired | TaskState:
        """Run a local call as its activity; its result, or the `Failure` its error maps to.

        `InputRequired` when the call asks for input first (`InputRounds`
        asks, then calls this again with `resume`); `TaskState` when it runs
        as a task (`TaskPolls` polls it, calling this with `resume.task`).
        """
        call = plan.call
        self.started.add(call.call_id)
        self.running += 1
        if resume is None:
            self.view.event(
                "tool_call_scheduled", call_id=call.call_id, tool=call.name, turn=self._turn()
            )
        scheduled = workflow.now()
        grant = self.book.grants.used.get(call.call_id)
        if grant is not None:  # recorded on the call: its activity's summary names the grant
            shown = clean_text(f"{plan.summary} [{Grants.explain(grant)}]", 400)
            plan = plan.model_copy(update={"summary": shown})
        try:
            out = await run_tool_activity(
                plan, toolkit, inline=self.options.transcript_in_activity_input, resume=resume
            )
            if out.result is None:
                return (
                    out.input_required
                    or out.task
                    or failed(call, "execution_error", "the tool activity returned no result")
                )
            self.produced.add(call.call_id)
            self._note_attempts(call, out.attempt, scheduled)
            return out.result
        except ActivityError as exc:
            exhausted = exc.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED
            self._note_attempts(call, plan.max_attempts if exhausted else None, scheduled)
            return activity_failure(plan, exc)
        finally:
            self.running -= 1

    def _note_attempts(self, call: ToolCall, attempt: int | None, scheduled: datetime) -> None:
        """Keep the attempt and duration for the call's `tool_call_finished` (events only)."""
        seconds = (workflow.now() - scheduled).total_seconds()
        self.attempts[call.call_id] = {"attempt": attempt, "duration": round(seconds, 3)}

    # ------------------------------------------------------------ approvals

    async def traced_decision(self, plan: PlannedCall, resumed: bool) -> Failure | Moved | None:
        """`await_decision`, as `approval.*` events on the turn's span and the wait metric.

        `resumed`: the call waited in the previous run, which published its request.
        """
        call, asked = plan.call, workflow.now()
        grant = self.book.grants.used.get(call.call_id)
        if grant is not None:  # a grant of this conversation covers it: no wait
            self.view.event(
                "approval_decided",
                call_id=call.call_id,
                tool=call.name,
                outcome="granted",
                decided_by=grant.granted_by,
                reason=Grants.explain(grant),
            )
            return None
        waiting = self.book.approvals[call.call_id]
        notify = self.book.notifier.notify
        if resumed:
            asked = waiting.requested_at
        else:
            telemetry.approval_event("approval.requested", call.call_id, call.name)
            verdict = plan.policy.model_dump(mode="json") if plan.policy is not None else None
            self.view.event(
                "approval_requested", call_id=call.call_id, tool=call.name, policy=verdict
            )
            notify(
                plan,
                "approval_requested",
                requested_at=asked,
                approvers=waiting.approvers,
                deadline=waiting.deadline,
            )
        clock = None
        if escalation_of(plan):
            clock = asyncio.create_task(run_clock(plan, self.book, self.view.event, self.publish))
        try:
            refusal = await self.await_decision(plan)
        finally:
            if clock is not None:
                clock.cancel()
        if isinstance(refusal, Moved):
            return refusal
        decision = self.book.decisions.get(call.call_id)
        outcome = "approved" if refusal is None else refusal.kind
        notify(
            plan,
            "approval_expired" if outcome == "expired" else "approval_decided",
            requested_at=waiting.requested_at,
            outcome=outcome,
            decided_by=decision.decided_by if decision is not None else None,
        )
        self.view.event(
            "approval_decided" if decision is not None else "approval_expired",
            call_id=call.call_id,
            tool=call.name,
            outcome=outcome,
            decided_by=decision.decided_by if decision is not None else None,
        )
        telemetry.approval_event(
            "approval.decided" if decision is not None else f"approval.{outcome}",
            call.call_id,
            call.name,
            **{
                "durable_tools.approval.decision": outcome,
                telemetry.ATTR_APPROVAL_DECIDED_BY: decision.decided_by if decision else None,
            },
        )
        telemetry.record_approval_wait(call.name, outcome, (workflow.now() - asked).total_seconds())
        return refusal

    async def await_decision(self, plan: PlannedCall) -> Failure | Moved | None:
        """Wait for the call's decision: `None` runs it, else its `Failure`, or `MOVED`."""
        call, book = plan.call, self.book
        seconds = book.deadline(plan)
        waited = await self._await_person(plan, book.approvals, book.decisions, "approval")
        if isinstance(waited, Moved):
            return waited  # the pending approval (and any decision) goes to the next run
        if waited == "expired":
            return expired(
                call, f"no decision within {seconds_text(seconds)}; the tool did not run"
            )
        decision = book.decisions.get(call.call_id)
        if decision is None:
            return cancelled(call, "a new user message arrived before a decision; not run")
        return decision_outcome(call, decision)

    async def _await_person(
        self,
        plan: PlannedCall,
        pending: dict[str, Any],
        arrived: Mapping[str, object],
        what: str,
    ) -> Literal["expired", "ended"] | Moved:
        """Wait until a person's input `arrived`, a new message, the deadline, or a move.

        `pending` holds the call's request (its `deadline`), taken out when
        the wait ends, unless it moves to the next run (`MOVED`).
        """
        call_id = plan.call.call_id
        self.view.state = "waiting"
        try:
            await self.waits.wait(
                lambda: self.move_now() or call_id in arrived or self.superseded,
                pending[call_id].deadline,
                f"{what} deadline of {plan.summary}",
            )
        except builtins.TimeoutError:
            pending.pop(call_id, None)
            return "expired"
        finally:
            if not self.moving:
                pending.pop(call_id, None)
            self.view.state = self.calls_state()
            self.publish()
        return MOVED if self.moving else "ended"

    # --------------------------------------------------------- interactions

    async def traced_answer(self, plan: PlannedCall, resumed: bool) -> Ok | Failure | Moved:
        """`await_answer`, published as `question_asked` / `question_answered` events.

        `resumed`: the call waited in the previous run, which published the question.
        """
        call = plan.call
        waiting = self.book.interactions[call.call_id]
        notify = self.book.notifier.notify
        if not resumed:
            self.view.event("question_asked", call_id=call.call_id, tool=call.name)
            notify(
                plan, "question_asked", requested_at=waiting.requested_at, deadline=waiting.deadline
            )
        result = await self.await_answer(plan)
        if isinstance(result, Moved):
            return result
        outcome = "ok" if isinstance(result, Ok) else result.kind
        notify(
            plan,
            "question_expired" if outcome == "expired" else "question_answered",
            requested_at=waiting.requested_at,
            outcome=outcome,
            decided_by=self.answered_by(result) or None,
        )
        self.view.event(
            "question_answered",
            call_id=call.call_id,
            tool=call.name,
            outcome=outcome,
            sent_by=self.answered_by(result) or None,
        )
        return result

    async def await_answer(self, plan: PlannedCall) -> Ok | Failure | Moved:
        """Wait for the call's answer: its `Ok`, a `Failure`, or `MOVED`."""
        call, book = plan.call, self.book
        seconds = book.deadline(plan)
        waited = await self._await_person(plan, book.interactions, book.answers, "answer")
        if isinstance(waited, Moved):
            return waited  # the pending question (and any answer) goes to the next run
        if waited == "expired":
            return expired(call, f"no answer within {seconds_text(seconds)}")
        answer = book.answers.get(call.call_id)
        if answer is None:
            return cancelled(call, "a new user message arrived before an answer")
        return Ok(call_id=call.call_id, tool=call.name, value=answer.value)
