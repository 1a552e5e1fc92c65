"""Agents as tools: a call of an agent tool runs its sub-agent as a child conversation.

An agent tool (`durable_tools.agent_tools.agent_tool`) is a signal tool whose
plan carries a `RunAgent` action. `SubAgents.run` answers such a call exactly
once (DESIGN.md invariant 1):

0. **Depth.** A conversation that is itself a sub-agent
   `MAX_SUB_AGENT_DEPTH` levels deep (`ConversationOptions.sub_agent_depth`)
   answers the call `sub_agent_failed`: a model cannot nest agents without end.
1. **Budget.** The conversation's spend is checked as before a model call
   (`BudgetCheck.before_sub_agent`); when it does not fit, the call waits in
   state `budget_exceeded` until `raise_budget`, a new user message (the call
   is then `cancelled`), a move to a new worker version (the call moves to
   the next run, which checks again) or cancellation.
2. **Start.** A child `AgentWorkflow` (by name, as `embedded.
   start_child_conversation` starts one) with a workflow id made from the
   parent's workflow id, the turn and the call id (`sub_agent_workflow_id`),
   so a replayed or restarted parent matches the recorded start and never
   starts a second child. It belongs to the parent's team (the
   `DurableToolsTeam` search attribute), so the same people see and decide
   its approvals. Its options are the parent's, with the rest of the
   conversation's budget (`BudgetCheck.remaining`) and `finish_on_reply`
   (the sub-agent's text reply is its final output). The parent close
   policy is `REQUEST_CANCEL`: a parent that closes cancels the child.
3. **While it runs** the call counts as running (`TurnCalls.running`), so
   the turn's waits do not move to a new run meanwhile (a continue-as-new
   would close the child's parent run); `pending().sub_agents` and the
   `sub_agent_started` event name the child's workflow id, where its
   approvals and questions wait.
4. **Its end.** `finished`: the output is the call's `Ok`. Any other end
   (`turn_limit`, `idle_timeout`, the child failed, was cancelled,
   terminated or timed out) is a `Failure` of kind `sub_agent_failed` whose
   reason says how, for the model to act on. The child's usage and cost
   (`ConversationResult.usage`, `cost_usd`, recorded in the parent's
   history as the child's result) join the parent's; a child with no
   result (failed, cancelled, terminated, timed out) is read by the
   activity `sub_agent.spend-v1` (its `status` query), recorded too, so a
   sub-agent that spent and was terminated is not free (runs recorded
   before the `sub-agent-failed-spend` patch did not read it). The parent cancelled:
   the child is cancelled (the SDK waits for its cancellation to complete)
   and the call's one output is `interrupted` (it started: the sub-agent
   may have taken effect), naming the child; cancelled before its child
   was started (e.g. in the budget wait), it is `cancelled`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ChildWorkflowError, WorkflowAlreadyStartedError

from durable_tools.workflows.budget_check import BudgetCheck
from durable_tools.workflows.handler_inputs import cancellation
from durable_tools.workflows.visibility import Visibility
from durable_tools.workflows.waits import MOVED, Moved

with workflow.unsafe.imports_passed_through():
    from durable_tools._sub_agent_wire import (
        SPEND_READ_TIMEOUT,
        SUB_AGENT_SPEND_ACTIVITY,
        SUB_AGENT_SPEND_PATCH,
        SubAgentSpend,
        SubAgentSpendRead,
    )
    from durable_tools._wire import PlannedCall, conversation_input
    from durable_tools.agent_tools import (
        MAX_SUB_AGENT_DEPTH,
        SUB_AGENT_FAILED,
        sub_agent_result,
        sub_agent_workflow_id,
    )
    from durable_tools.conversation import (
        AgentConfig,
        ConversationOptions,
        ConversationResult,
        RunningSubAgent,
    )
    from durable_tools.events import MAX_EVENT_TEXT
    from durable_tools.handler_input import clean_text
    from durable_tools.results import Failure, Ok, cancelled, failed, interrupted
    from durable_tools.signals import RunAgent
    from durable_tools.teams import TEAM
    from durable_tools.transcript import Usage

__all__ = ["SubAgentCalls", "SubAgents"]


def _child_error(agent: str, workflow_id: str, exc: ChildWorkflowError) -> str:
    cause = exc.cause
    what = type(cause).__name__ if cause is not None else "ChildWorkflowError"
    message = str(cause) if cause is not None else str(exc)
    text = clean_text(f"{what}: {message}" if message else what, 400)
    return f"sub-agent {agent!r} (workflow {workflow_id}) did not finish: {text}"


class SubAgentCalls(Protocol):
    """What `SubAgents.run` needs of the turn's calls (`TurnCalls`)."""

    view: Visibility
    superseded: bool
    superseded_by: str
    moving: bool
    running: int
    started: set[str]

    def move_now(self) -> bool:
        """Whether the turn's waits move to a new run now."""
        ...

    def calls_state(self) -> str:
        """The `status` state while the turn's calls are open."""
        ...

    def publish(self) -> None:
        """Publish what is pending."""
        ...

    def record(self, result: Ok | Failure, sent_by: str = "") -> None:
        """Append a call's one output (`sent_by`: who gave it, if a person did)."""
        ...


class SubAgents:
    """The sub-agents the turn's agent-tool calls run (see the module docstring).

    Args:
        options: The parent conversation's options (the child's start from them).
        budget: The parent's budgets and spend.
        agent: The name of the current (calling) agent.
        add_usage: Adds a model's usage to the parent's totals per model.
        turn: The number of the current model turn.
        scope: The namespace of a loop embedded in another workflow
            (`run_agent`), part of its children's workflow ids; `""` for a
            conversation workflow.
    """

    def __init__(
        self,
        options: ConversationOptions,
        budget: BudgetCheck,
        *,
        agent: Callable[[], str],
        add_usage: Callable[[str, Usage], None],
        turn: Callable[[], int],
        scope: str = "",
    ) -> None:
        self._options, self._budget, self._scope = options, budget, scope
        self._agent, self._add_usage, self._turn = agent, add_usage, turn
        self.running: dict[str, RunningSubAgent] = {}
        """The calls whose child runs now, by call id (`PendingState.sub_agents`)."""

    async def run(
        self,
        calls: SubAgentCalls,
        plan: PlannedCall,
        action: RunAgent,
        agents: Mapping[str, Any],
    ) -> Moved | None:
        """Answer one agent-tool call: budget check, child conversation, its output.

        Args:
            calls: The turn's calls (records the output, waits, publishes).
            plan: The call's plan.
            action: Its `RunAgent`.
            agents: The conversation's agent configurations by name (a
                sub-agent named there starts with that configuration, any
                other with only its name: a declared agent).

        Returns:
            `MOVED` when the call moved to the next run before its child
            started, else `None` (the output is recorded).

        Raises:
            asyncio.CancelledError: The conversation was cancelled (the call's
                output, `interrupted` once its child's start was issued, else
                `cancelled`, is recorded first).
        """
        call, turn = plan.call, self._turn()
        depth = self._options.sub_agent_depth
        if depth >= MAX_SUB_AGENT_DEPTH:
            reason = (
                f"this conversation is a sub-agent {depth} levels deep, the most there may be "
                f"({MAX_SUB_AGENT_DEPTH}); do the task without another agent"
            )
            calls.record(failed(call, SUB_AGENT_FAILED, reason))
            return None
        try:
            fits = await self._budget.before_sub_agent(
                self._agent(), turn, call.call_id, lambda: calls.move_now() or calls.superseded
            )
        finally:
            calls.view.state = calls.calls_state()
        if calls.moving:
            return MOVED  # not started: the next run checks the budget again
        if not fits:
            reason = "a new user message arrived before the sub-agent started"
            calls.record(cancelled(call, reason), sent_by=calls.superseded_by)
            return None
        known = agents.get(action.agent)
        config = known if isinstance(known, AgentConfig) else AgentConfig(name=action.agent)
        parent = workflow.info().workflow_id
        child_id = sub_agent_workflow_id(
            f"{parent}/{self._scope}" if self._scope else parent, turn, call.call_id
        )
        options = self._options.model_copy(
            update={
                "budget": self._budget.remaining(),
                "finish_on_reply": True,
                "sub_agent_depth": depth + 1,
            }
        )
        calls.running += 1
        try:
            return await self._run_child(calls, plan, action, config, child_id, options)
        except asyncio.CancelledError:
            # Invariant 1: `cancelled` only when nothing ran. Once its start was
            # issued the sub-agent may have run tools: `interrupted`, saying where.
            sender, _ = cancellation()
            if call.call_id in calls.started:
                reason = (
                    f"the conversation was cancelled while sub-agent {action.agent!r} ran "
                    f"(workflow {child_id}); it was cancelled too, and may have taken effect: "
                    "its transcript says what it did"
                )
                calls.record(interrupted(call, reason), sent_by=sender)
            else:
                reason = "the conversation was cancelled before the sub-agent started"
                calls.record(cancelled(call, reason), sent_by=sender)
            raise
        finally:
            calls.running -= 1
            if self.running.pop(call.call_id, None) is not None:
                calls.publish()

    async def _run_child(
        self,
        calls: SubAgentCalls,
        plan: PlannedCall,
        action: RunAgent,
        config: AgentConfig,
        child_id: str,
        options: ConversationOptions,
    ) -> None:
        call = plan.call
        # The child belongs to the parent's team: the same people see and decide it.
        team = workflow.info().typed_search_attributes.get(TEAM)
        owners = TypedSearchAttributes([SearchAttributePair(TEAM, team)]) if team else None
        calls.started.add(call.call_id)  # once issued, the child may run
        try:
            handle = await workflow.start_child_workflow(
                "AgentWorkflow",
                conversation_input(config, message=action.message, options=options),
                id=child_id,
                result_type=ConversationResult,
                static_summary=f"sub-agent {action.agent} for {plan.summary}"[:400],
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                search_attributes=owners,
            )
        except WorkflowAlreadyStartedError:
            reason = f"a workflow with the sub-agent's id {child_id} already runs; not started"
            calls.record(failed(call, SUB_AGENT_FAILED, reason))
            return
        self.running[call.call_id] = RunningSubAgent(
            call_id=call.call_id,
            tool=call.name,
            agent=action.agent,
            workflow_id=child_id,
            started_at=workflow.now(),
        )
        calls.view.event(
            "sub_agent_started",
            call_id=call.call_id,
            tool=call.name,
            agent=action.agent,
            turn=self._turn(),
            workflow_id=child_id,
        )
        calls.publish()
        try:
            result = await handle
        except ChildWorkflowError as exc:
            if workflow.cancellation_reason() is not None:
                # This conversation is being cancelled: the SDK cancelled the
                # child and waited for it; `run` answers the call `interrupted`.
                raise asyncio.CancelledError from None
            reason = _child_error(action.agent, child_id, exc)
            if workflow.patched(SUB_AGENT_SPEND_PATCH):
                spend = await self._read_spend(child_id)
                if spend is None:
                    reason += "; what it spent could not be read and is not counted"
                else:
                    self._count(spend.usage, spend.cost_usd)
            outcome: Ok | Failure = failed(call, SUB_AGENT_FAILED, reason)
        else:
            self._count(result.usage, result.cost_usd)
            outcome = sub_agent_result(call, action.agent, child_id, result)
        kind = "ok" if isinstance(outcome, Ok) else outcome.kind
        calls.view.event(
            "sub_agent_finished",
            call_id=call.call_id,
            tool=call.name,
            agent=action.agent,
            outcome=kind,
            workflow_id=child_id,
            reason=outcome.reason[:MAX_EVENT_TEXT] if isinstance(outcome, Failure) else None,
        )
        calls.record(outcome)

    def _count(self, usage: Mapping[str, Usage], cost_usd: float) -> None:
        """Add a child's spend to the parent's totals per model and its budget."""
        total: Usage | None = None
        for model, used in usage.items():
            self._add_usage(model, used)
            total = used if total is None else total + used
        self._budget.record_sub_agent(total, cost_usd)

    async def _read_spend(self, child_id: str) -> SubAgentSpend | None:
        """What a child that ended without a result spent (`sub_agent.spend-v1`); `None`: unread.

        Three attempts, 1 s apart at first, each bounded by the query's own
        timeout and a margin: the child's worker replays the closed run.
        """
        try:
            return await workflow.execute_activity(
                SUB_AGENT_SPEND_ACTIVITY,
                SubAgentSpendRead(workflow_id=child_id),
                result_type=SubAgentSpend,
                start_to_close_timeout=timedelta(seconds=SPEND_READ_TIMEOUT),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"spend of {child_id}"[:200],
            )
        except ActivityError:
            return None
