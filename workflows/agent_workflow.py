"""`AgentWorkflow`: the durable agent loop.

Each turn: reconcile, call the model (activity `model.turn`), then answer every
tool call of the turn exactly once:

* local tools run as activities `tool.<name>` with the tool's own timeouts and
  retry policy, at most `max_concurrent_tool_calls` at a time;
* approval-gated calls wait durably (default 7 days) for a decision, which
  arrives as the `decide` signal (stored by the server even with no worker
  running) or the validated `decide_now` update;
* interaction tools wait for an `answer` signal / `answer_now` update;
* signal tools are carried out by the loop (sleep, pause, handoff, finish);
* calls answered before running (unknown tool, invalid arguments, provider
  tools) get their Failure from the plan.

A model turn that fails for good (a non-retryable error, or retries of the
bounded `ModelRetry` policy ran out) does not end the conversation: it waits
in state `model_failed` (the `status` and `pending` queries, the
`model_failed` pending kind, the current details) for the `retry` signal /
`retry_now` update, a new message (`send`), or cancellation.

Workflow code is deterministic: no I/O, clocks or randomness outside
Temporal's APIs. Everything that needs application code runs in activities.
"""

from __future__ import annotations

import asyncio
import builtins
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from durable_tools.workflows.budget_check import BudgetCheck
from durable_tools.workflows.continuation import (
    NO_DESCRIPTOR_CARRY_PATCH,
    continue_as_new,
    continue_as_new_due,
    restore_turn,
    snapshot_turn,
)
from durable_tools.workflows.conversation_handlers import ConversationHandlers
from durable_tools.workflows.handler_inputs import cancellation
from durable_tools.workflows.input_approvals import Sampler
from durable_tools.workflows.live_policy import LivePolicy
from durable_tools.workflows.model_turns import ModelTurns, add_usage
from durable_tools.workflows.run_transcript import RunTranscript
from durable_tools.workflows.sub_agents import SubAgents
from durable_tools.workflows.turn_calls import TurnCalls, fold_outcomes
from durable_tools.workflows.visibility import Visibility
from durable_tools.workflows.waits import Moved, Waits

with workflow.unsafe.imports_passed_through():
    from durable_tools import telemetry
    from durable_tools._wire import (
        CarriedState,
        CarriedTurn,
        ConversationInput,
        DeltaEntry,
        ModelTurn,
        PlannedCall,
    )
    from durable_tools.carry import MAX_EARLIER_RUNS
    from durable_tools.conversation import ConversationResult, SendMessage
    from durable_tools.events import MAX_EVENT_TEXT
    from durable_tools.input_requests import InputRequired
    from durable_tools.live_runs import LIVE_RUNS
    from durable_tools.results import Failure, Ok
    from durable_tools.signals import Finish
    from durable_tools.tool_tasks import TaskState
    from durable_tools.transcript import Usage

__all__ = ["AgentWorkflow", "StrictAgentWorkflow"]


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class AgentWorkflow(ConversationHandlers):
    """One agent conversation. See the module docstring for the loop.

    On versioned workers (Worker Deployments; `run_worker(deployment=...)`
    sets `PINNED` as the worker's default behavior, since declaring it here
    would fail every workflow task on unversioned workers) each run is pinned
    to the version it started on, so its history is only ever replayed by the code
    that wrote it; when a new version becomes current, the conversation
    continues as new with `AUTO_UPGRADE` at its next turn boundary or durable
    wait (idle, an approval, a question, a sleep, a pause, `model_failed`;
    `waits.FOLLOW_VERSIONS_PATCH`), carrying what waits, and the new run
    starts on the new version (docs/operations.md, "Upgrades").

    It runs outside Temporal's sandbox (`sandboxed=False`): its modules are
    passed through anyway (`worker/plugin.py`, `sandbox_runner`), so the
    sandbox checked nothing of it at run time and cost a fifth of the
    worker's CPU per tool call in serialization-context round trips (issue
    26). `StrictAgentWorkflow`, the same loop in the sandbox with its modules
    re-imported per run, is what the test suite replays recorded histories
    with, so the sandbox's checks (no `datetime.now()`, no `random`, no I/O)
    still apply to every path those histories take; a worker runs it when
    `DURABLE_TOOLS_STRICT_SANDBOX=1`.

    Its signals, updates and queries are `ConversationHandlers`
    (`conversation_handlers`). The concerns live beside it in `workflows/`:
    `decision_book` (approvals
    and answers), `turn_calls` and `tool_activity` (the turn's calls, tool
    failures), `signal_tools`, `model_turns`, `waits`, `continuation`
    (continue-as-new), `run_transcript`, `visibility` (state, search
    attributes, current details, events), `handler_inputs`.
    """

    @workflow.init
    def __init__(self, input: ConversationInput) -> None:
        state = input.state or CarriedState(
            agent=input.agent, inbox=[SendMessage(text=m) for m in input.messages]
        )
        self._input = input
        self._options = options = input.options
        self._agent = state.agent
        # The items from conversation-wide index `_base` on; older ones are in
        # the earlier runs `_earlier` (durable_tools.carry). Names kept for
        # the tests that build runs by hand; none is reassigned in a run.
        self._log = log = RunTranscript(state)
        self._transcript, self._base, self._earlier = log.items, log.base, log.earlier
        self._prefix_digests, self._carried_last_text = log.memo, log.carried_last_text
        # What the previous run was waiting on when it continued as new at a
        # wait (FOLLOW_VERSIONS_PATCH): answered first in this run.
        self._carried_turn: CarriedTurn | None = state.turn
        self._idle_until = state.idle_until
        self._inbox: list[SendMessage] = list(state.inbox)
        self._turns, self._runs, self._turns_this_run = state.turns, state.runs, 0
        self._usage: dict[str, Usage] = dict(state.usage)
        self._descriptors, self._digest = list(state.descriptors), state.digest
        # Set while the run is about to continue as new: handlers that wait
        # for the loop (`await_turn`) return, so the run never waits on them.
        self._continuing = False
        # `run_agent` sets it before calling __init__: the loop runs inside
        # another workflow (no continue-as-new, no event stream of its own).
        self.embedded: bool = getattr(self, "embedded", False)
        self.namespace: str = getattr(self, "namespace", "")  # `run_agent`'s, when embedded
        info = workflow.info() if workflow.in_workflow() else None  # tests build runs by hand
        self._run_key = (info.workflow_id, info.run_id) if info is not None else None
        if info is not None and not self.embedded:
            # This worker's activities read the run in process, not by query
            # (`live_*` below, durable_tools.live_runs): a cache entry, never
            # read by the loop, so replay is unaffected.
            LIVE_RUNS.register(info.workflow_id, info.run_id, self)
        self._view = view = Visibility(self, options, state.stream, self.embedded)
        self._waits = waits = Waits(options.version_check_interval, self.embedded)
        self._model = ModelTurns(options, state, view=view, waits=waits, publish=self._publish)
        self._budget = BudgetCheck(options, state, view=view, waits=waits, publish=self._publish)
        self._calls = calls = TurnCalls(
            options,
            state,
            waits=waits,
            view=view,
            transcript=log,
            publish=self._publish,
            run_tool=self._execute,
            turn=lambda: self._turns,
        )
        self._book, self._signal_waits = calls.book, calls.signal_waits
        self._policy = LivePolicy(
            state.policy,
            calls=calls,
            view=view,
            agent=lambda: self._input.agents[self._agent],
            publish=self._publish,
        )
        calls.inputs.sampler = Sampler(
            options,
            lambda: (self._agent, self._input.agents[self._agent]),
            lambda model, usage: add_usage(self._usage, model, usage),
            lambda: self._turns,
        )
        calls.sub_agents = SubAgents(
            options,
            self._budget,
            agent=lambda: self._agent,
            add_usage=lambda model, usage: add_usage(self._usage, model, usage),
            turn=lambda: self._turns,
            scope=self.namespace,
        )
        if state.turn is not None:
            restore_turn(state.turn, self._calls)

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        """Run the conversation until `finish`, the idle timeout or the turn limit."""
        # How the run ended, for this worker's caches (durable_tools.live_runs):
        # None while it has not. The SDK evicts a run by cancelling its tasks,
        # as if replaying: a cancellation seen then may be an eviction, and
        # is not reported (the run's collection reports it, as evicted).
        ended: str | None = None
        try:
            self._book.notifier.restart()  # deliveries the previous run left in flight
            with telemetry.conversation_context():
                result = await self._loop()
            ended = "ended"
            return result
        except workflow.ContinueAsNewError:
            ended = "continued"
            raise
        except (asyncio.CancelledError, Exception) as exc:
            evicting = isinstance(exc, asyncio.CancelledError) and workflow.unsafe.is_replaying()
            ended = None if evicting else "ended"  # failed or cancelled: it is over
            await self._cancelled(exc)
            raise
        finally:
            if ended is not None and self._run_key is not None and not self.embedded:
                LIVE_RUNS.ended(*self._run_key, continued=ended == "continued")

    async def _cancelled(self, exc: BaseException) -> None:
        """When `exc` is the conversation's cancellation: close it and publish its end."""
        if isinstance(exc, (asyncio.CancelledError, ActivityError)):
            # A cancel during the model turn arrives as the activity's error.
            if not is_cancelled_exception(exc):
                return
            self._calls.close_open()
            self._view.state = "cancelled"
            self._publish()
            sender, reason = cancellation()
            self._view.event(
                "conversation_finished",
                outcome="cancelled",
                sent_by=sender or None,
                reason=reason or None,
            )

    async def _loop(self) -> ConversationResult:
        if self._carried_turn is not None:
            # The previous run continued as new while these calls waited.
            carried, self._carried_turn = self._carried_turn, None
            plans = [c.plan for c in carried.calls]
            finish = await self._answer_turn(plans, carried.toolkit, carried)
            if finish is not None:
                return self._result("finished", finish.output)
        while True:
            if not self._inbox and not self._needs_model():
                if self._options.finish_on_reply and self._turns > 0:  # a sub-agent's reply
                    return self._result("finished", self._last_text())
                self._view.state = "idle"
                self._publish()
                now = workflow.now()
                until = self._idle_until or now + timedelta(seconds=self._options.idle_timeout)
                self._idle_until = until
                try:
                    await self._waits.wait(
                        lambda: self._waits.move_due() or bool(self._inbox),
                        until,
                        "idle: waiting for the next user message",
                    )
                except builtins.TimeoutError:
                    if not self._inbox:
                        return self._result("idle_timeout", self._last_text())
                    # A message arrived with the timer: it is answered, not dropped.
                if self._waits.move_due():  # a new worker version: the next run takes the message
                    await self._continue_as_new()
                    continue
            self._idle_until = None
            if self._should_continue_as_new():
                await self._continue_as_new()
            self._take_inbox()
            if self._turns >= self._options.max_model_turns:
                return self._result("turn_limit", self._last_text())
            if self._model.carried_failure is None and not await self._budget.before_call(
                self._agent, self._turns + 1
            ):  # a new worker version while the budget stops the call: the next run checks
                await self._continue_as_new()
                continue
            self._take_inbox()  # messages that arrived while a budget stopped the call
            agent = self._input.agents[self._agent]
            with telemetry.turn_span(agent.name, agent.model, self._turns + 1):
                if self._model.carried_failure is None:
                    self._view.event(
                        "turn_started", turn=self._turns + 1, agent=agent.name, model=agent.model
                    )
                turn = await self._model_turn()
                if isinstance(turn, Moved):
                    await self._continue_as_new()
                    continue
                if turn.messages_supersede is not None:  # the agent's own, over the options'
                    self._book.messages_supersede = turn.messages_supersede
                if turn.summary is not None:  # the context policy's, for later turns too
                    self._transcript.append(turn.summary)
                    model = turn.summary.model or turn.model or agent.model
                    add_usage(self._usage, model, turn.summary.usage)
                self._log.append(turn.message, DeltaEntry(turn=self._turns))
                self._view.event(
                    "turn_finished",
                    turn=self._turns,
                    usage=turn.message.usage,
                    calls=len(turn.message.tool_calls),
                    text=turn.message.text[:MAX_EVENT_TEXT] or None,
                )
                if turn.plans:
                    toolkit = turn.toolkit or self._input.agents[self._agent].toolkit
                    finish = await self._answer_turn(list(turn.plans), toolkit, None)
                    if finish is not None:
                        return self._result("finished", finish.output)

    async def _answer_turn(
        self, plans: list[PlannedCall], toolkit: str, carried: CarriedTurn | None
    ) -> Finish | None:
        """Answer a turn's calls; where they move to a new run at a wait, continue as new."""
        outcome = await self._answer_plans(plans, toolkit, carried)
        while isinstance(outcome, Moved):
            turn = snapshot_turn(self._calls)
            await self._continue_as_new(turn)
            # The carried state did not fit: the calls wait on in this run.
            outcome = await self._answer_plans([c.plan for c in turn.calls], turn.toolkit, turn)
        return outcome

    async def _answer_plans(
        self, plans: list[PlannedCall], toolkit: str, carried: CarriedTurn | None
    ) -> Finish | Moved | None:
        """Answer each of a turn's calls exactly once (`TurnCalls`); `MOVED` if waits moved.

        `carried`: the calls that already wait (restored by `__init__` in a
        run that a move started, still registered in a run whose
        continue-as-new did not fit): not registered anew.
        """
        # A message that arrived while the model was thinking supersedes this
        # turn's waits exactly as one arriving while they wait does (`send`).
        superseded = bool(self._inbox) or (carried is not None and carried.superseded)
        self._calls.superseded_by = self._inbox[0].sent_by if self._inbox else ""
        restored = {c.plan.call.call_id for c in carried.calls} if carried else set[str]()
        agents = self._input.agents
        outcomes = await self._calls.answer_plans(plans, toolkit, restored, superseded, agents)
        agent, outcome = fold_outcomes(outcomes)
        if agent is not None:
            self._agent = agent
        return outcome

    async def _execute(
        self, plan: PlannedCall, toolkit: str
    ) -> Ok | Failure | InputRequired | TaskState:
        """Run a local call as its activity `tool.<name>` (`TurnCalls.execute`)."""
        return await self._calls.execute(plan, toolkit)

    async def _continue_as_new(self, turn: CarriedTurn | None = None) -> None:
        """Continue as new (never returns), or return when the carried state is too large.

        `turn`: the turn's calls that were waiting when a new worker version
        (or Temporal's suggestion) moved them to the next run (rebuilt once
        every handler finished, so a decision that arrived meanwhile goes
        with its call).
        """
        # `await_turn` waits for the loop to settle: hand it over to the next
        # run (its caller follows the chain) instead of waiting on it, which
        # would wait on this very loop.
        self._continuing = True
        await continue_as_new(
            self._view,
            self._book.verifications,
            lambda bounded: self._carry(
                bounded=bounded, turn=snapshot_turn(self._calls) if turn is not None else None
            ),
            may_bound=not self._options.transcript_in_activity_input,
        )
        # Stay in this run from now on (the carried state only grows).
        self._waits.carry_too_large = True
        self._continuing = self._calls.moving = False

    def _take_inbox(self) -> None:
        self._log.take_messages(self._inbox, self._view.event)

    def _needs_model(self) -> bool:
        return self._log.needs_model()

    def _should_continue_as_new(self) -> bool:
        # Embedded in another workflow (`run_agent`), continuing as new would
        # restart *that* workflow with this loop's input.
        every = self._options.continue_as_new_after_turns
        return not (self._waits.carry_too_large or self.embedded) and continue_as_new_due(
            self._turns_this_run, every
        )

    def _carry(self, *, bounded: bool, turn: CarriedTurn | None = None) -> ConversationInput:
        """The next run's input: the newest items that fit, or (not `bounded`) all of them.

        `turn`: the calls that move to the next run while they wait. What
        else waits durably goes too: a model failure (with a `retry` that
        arrived), an idle wait's end.
        """
        state = CarriedState(
            inbox=self._inbox,
            agent=self._agent,
            turns=self._turns,
            descriptors=[] if workflow.patched(NO_DESCRIPTOR_CARRY_PATCH) else self._descriptors,
            digest=self._digest,
            runs=self._runs + 1,
            usage=self._usage,
            early_resume=self._signal_waits.early_resume,
            stream=self._view.stream.get_state() if self._view.stream is not None else None,
            turn=turn,
            idle_until=self._idle_until if self._view.state == "idle" and not self._inbox else None,
            **self._log.carried(),
            **self._book.carried(),
            **self._model.carried(),
            **self._budget.carried(),
            policy=self._policy.installed,
        )
        if bounded:
            state = self._bounded(state, workflow.info().run_id)
        return self._input.model_copy(update={"messages": [], "state": state, "agent": self._agent})

    def _bounded(self, state: CarriedState, run_id: str) -> CarriedState:
        """`state` with only the transcript's tail (`RunTranscript.bounded`)."""
        carry_bytes = self._options.carry_transcript_bytes
        return self._log.bounded(
            state, carry_bytes=carry_bytes, run_id=run_id, max_runs=MAX_EARLIER_RUNS
        )

    def _result(self, status: Any, output: Any) -> ConversationResult:
        # Messages that arrived after the model's last turn (e.g. while it was
        # calling `finish`) are returned with the result, never dropped silently.
        self._view.state = "finished"
        self._publish()
        self._view.event("conversation_finished", outcome=str(status))
        if self._view.stream is not None:
            self._view.stream.detach_pollers()
        return ConversationResult(
            status=status,
            output=output,
            turns=self._turns,
            transcript_items=self._log.length(),
            usage=self._usage,
            cost_usd=self._budget.state.spent.cost_usd,
            unanswered_messages=list(self._inbox),
        )

    def _publish(self) -> None:
        book = self._book
        waits, budget = self._signal_waits, self._budget
        self._view.publish(
            book.approvals, book.interactions, waits.paused, self._model.failed, budget.exceeded
        )

    async def _model_turn(self) -> ModelTurn | Moved:
        """Run the model turn until it succeeds (`ModelTurns.next_turn`), and count it.

        Returns `MOVED` when the run continues as new while it waits after a
        failure (a new worker version: the next run waits on, or retries).
        """
        turn = await self._model.next_turn(
            self._request_model_turn,
            lambda: self._input.agents[self._agent],
            self._turns + 1,
            lambda: bool(self._inbox),
            self._take_inbox,
        )
        if isinstance(turn, Moved):
            return turn
        self._turns += 1
        self._turns_this_run += 1
        model = turn.model or self._input.agents[self._agent].model
        add_usage(self._usage, model, turn.message.usage)
        self._budget.record(self._agent, turn)
        if turn.descriptors is not None:
            self._descriptors = turn.descriptors
            self._digest = turn.digest
        return turn

    async def _request_model_turn(self) -> ModelTurn:
        return await self._model.request(
            self._agent,
            self._input.agents[self._agent],
            number=self._turns + 1,
            upto=self._log.length(),
            known_digest=self._digest,
            transcript=self._transcript,
            delta=self._log.delta,
            policy=self._policy.for_turn(),
        )


@workflow.defn(name="AgentWorkflow", sandboxed=True)
class StrictAgentWorkflow(AgentWorkflow):
    """`AgentWorkflow` in Temporal's sandbox, under its run-time checks (same name, same loop).

    For tests and for workers started with `DURABLE_TOOLS_STRICT_SANDBOX=1`
    (with `sandbox_runner(strict=True)`, which re-imports the loop's modules
    per run so the checks reach them). See `AgentWorkflow`.
    """

    @workflow.run
    async def run(self, input: ConversationInput) -> ConversationResult:
        """`AgentWorkflow.run`."""
        return await super().run(input)
