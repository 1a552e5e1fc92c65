"""A call that runs as an MCP task: durable polls, its questions, its cancellation.

When a tool activity returns `TaskState` (an MCP server answered the call
with a task handle, the Tasks extension), `TaskPolls.follow` polls the task
until it ends: a workflow timer for the server's `pollIntervalMs` (bounded
by `POLL_MIN_SECONDS` and `POLL_MAX_SECONDS`), then a short activity of the
call's own tool that sends `tasks/get` (`TaskAction`). No activity runs
between polls, so a task that runs for hours holds no worker slot, and a
worker lost meanwhile changes nothing: the next poll runs on another.

* **Completed**: the poll's activity reconciles the task's `CallToolResult`
  like any call's (`is_error`, output schema, size) and returns the call's
  one result.
* **Input required**: each new request (by key: one the server lists again
  is not asked again) is asked as in `InputRounds` (a question of the call,
  or the approval of a sampling request), then answered with `tasks/update`
  in the activity that polls next.
* **Failed** or cancelled by the server, a bogus answer (`invalid_task`), a
  server that stays unreachable: a `Failure` the model reads.
* **TTL**: past `ttlMs` from when the loop first saw the task (its own
  clock, not the server's), the call ends `expired`.
* **Cancellation**: the conversation cancelled, a question of the task
  expired, superseded or refused, or the TTL passed: `tasks/cancel` is sent
  once (`TaskAction(action="cancel")`). A server that stays unreachable
  through a poll's attempts ends the call with that `Failure` (a cancel
  would not reach it either).

A task's polls wait like any wait of the turn: when the waits move to a new
worker version or Temporal suggests continuing as new, `TaskProgress` (the
task, its questions and answers) is carried with the call
(`CarriedCall.task_progress`) and the next run polls on (`resume`).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol

from temporalio import workflow

from durable_tools.workflows.input_rounds import InputRounds
from durable_tools.workflows.waits import MOVED, Moved, Waits

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import PlannedCall
    from durable_tools.input_requests import (
        InputAnswer,
        InputProgress,
        InputQuestion,
        InputRequired,
        InputResume,
        TaskAction,
    )
    from durable_tools.results import Failure, Ok, expired, failed
    from durable_tools.tool_tasks import TASK_NOT_FOUND, TaskProgress, TaskState

__all__ = ["TaskPolls"]

Execute = Callable[
    [PlannedCall, str, InputResume | None], Awaitable[Ok | Failure | InputRequired | TaskState]
]
"""Runs one activity of a call (`TurnCalls.execute`)."""

_STEP_ATTEMPTS = 3
"""Attempts of one poll, update or cancel activity (each may be sent again)."""


class _Calls(Protocol):
    """What `TaskPolls` needs of the turn's calls (`TurnCalls`)."""

    waits: Waits
    moving: bool

    def move_now(self) -> bool: ...


class TaskPolls:
    """Polls of the turn's calls that run as MCP tasks.

    Args:
        calls: The turn's calls (their waits and moves).
        inputs: Asks a task's input requests (`InputRounds.answer_request`).
        event: Publishes a `ConversationEvent` (`kind`, then its fields).

    Attributes:
        progress: Where each call running as a task stands, by call id (what
            `continuation.snapshot_turn` carries when its wait moves).
    """

    def __init__(self, calls: _Calls, inputs: InputRounds, event: Callable[..., None]) -> None:
        self._calls = calls
        self._inputs = inputs
        self._event = event
        self.progress: dict[str, TaskProgress] = {}
        self._cancel_sent: set[str] = set()

    async def follow(
        self,
        plan: PlannedCall,
        toolkit: str,
        state: TaskState,
        execute: Execute,
        limit: asyncio.Semaphore,
    ) -> Ok | Failure | Moved:
        """Poll the call's task until it ends; the call's one result, or `MOVED`.

        Args:
            plan: The call's plan.
            toolkit: The toolkit its activities run in.
            state: The task, as the call's activity returned it.
            execute: Runs one activity of the call.
            limit: The turn's bound on running tool activities (held only
                while an activity runs).
        """
        self._event(
            "tool_progress",
            call_id=plan.call.call_id,
            tool=plan.call.name,
            text=f"runs as task {state.task_id} of MCP server {state.server!r}",
        )
        progress = TaskProgress(task=state, started_at=workflow.now())
        return await self._polls(plan, toolkit, progress, execute, limit)

    def restore(self, call_id: str, progress: TaskProgress) -> None:
        """Take a call's progress carried from the previous run (`continuation.restore_turn`)."""
        self.progress[call_id] = progress

    async def resume(
        self, plan: PlannedCall, toolkit: str, execute: Execute, limit: asyncio.Semaphore
    ) -> Ok | Failure | Moved:
        """Go on with a call whose polls moved from the previous run (`restore`), as `follow`."""
        progress = self.progress[plan.call.call_id]
        return await self._polls(plan, toolkit, progress, execute, limit, restored=True)

    async def _polls(
        self,
        plan: PlannedCall,
        toolkit: str,
        progress: TaskProgress,
        execute: Execute,
        limit: asyncio.Semaphore,
        *,
        restored: bool = False,
    ) -> Ok | Failure | Moved:
        call_id = plan.call.call_id
        self.progress[call_id] = progress
        try:
            while True:
                step = await self._next_step(plan, restored)
                restored = False
                if isinstance(step, Moved):
                    return step  # `progress` goes to the next run
                if isinstance(step, Failure):
                    await self._cancel(plan, toolkit, execute)
                    return self._end(call_id, step)
                progress = self.progress[call_id]
                async with limit:
                    out = await execute(self._step_plan(plan, step), toolkit, step)
                progress = self.progress[call_id] = progress.model_copy(
                    update={"polls": progress.polls + 1}
                )
                if isinstance(out, TaskState) and out.status != "cancelled":
                    if out.progress and out.progress != progress.task.progress:
                        self._event(
                            "tool_progress", call_id=call_id, tool=plan.call.name, text=out.progress
                        )
                    self.progress[call_id] = progress.model_copy(update={"task": out})
                    continue
                return self._end(call_id, self._outcome(plan, out))
        except asyncio.CancelledError:
            await self._cancel(plan, toolkit, execute)
            self.progress.pop(call_id, None)
            raise

    async def _next_step(self, plan: PlannedCall, restored: bool) -> InputResume | Failure | Moved:
        """Ask what the task asks, or wait for the next poll; what the next activity sends."""
        call_id = plan.call.call_id
        progress = self.progress[call_id]
        task = progress.task
        action = TaskAction(action="get", task_id=task.task_id)
        asked = task.input_required
        new = [r for r in asked.requests if r.key not in progress.answered] if asked else []
        # Roots requests come answered from the server's configuration.
        roots = (
            {k: a for k, a in asked.answered.items() if k not in progress.answered} if asked else {}
        )
        if progress.asking is None and asked is not None and new:
            round_ = progress.rounds + 1
            asking = InputProgress(
                asked=asked.model_copy(update={"requests": new}), round=round_, answers=roots
            )
            progress = progress.model_copy(update={"asking": asking, "rounds": round_})
            self.progress[call_id] = progress
        if progress.asking is not None:
            answers = await self._ask(plan, restored)
            if not isinstance(answers, dict):
                return answers
            progress = self.progress[call_id]
            keys = [*progress.answered, *answers]
            self.progress[call_id] = progress.model_copy(update={"asking": None, "answered": keys})
            return InputResume(
                responses=answers,
                round=progress.rounds,
                task=action.model_copy(update={"action": "update"}),
            )
        ends = self._ttl_end(progress)
        due = workflow.now() + timedelta(seconds=task.poll_seconds)
        calls = self._calls
        if ends is None or due < ends:
            try:
                await calls.waits.wait(calls.move_now, due, f"next poll of {plan.summary}")
            except builtins.TimeoutError:
                pass
            if calls.moving:
                return MOVED
        if ends is not None and workflow.now() >= ends:
            return self._expired(plan, progress)
        if roots:  # only roots requests: answered with this poll, no one asked
            progress = self.progress[call_id]
            keys = [*progress.answered, *roots]
            self.progress[call_id] = progress.model_copy(update={"answered": keys})
            return InputResume(
                responses=roots,
                round=progress.rounds,
                task=action.model_copy(update={"action": "update"}),
            )
        return InputResume(responses={}, task=action)

    async def _ask(
        self, plan: PlannedCall, restored: bool
    ) -> dict[str, InputAnswer] | Failure | Moved:
        """Ask the round's requests in turn (as `InputRounds` does); their answers by key."""
        call_id = plan.call.call_id
        while True:
            progress = self.progress[call_id]
            asking = progress.asking
            assert asking is not None
            requests = asking.asked.requests
            if asking.index >= len(requests):
                return asking.answers
            request = requests[asking.index]
            question = InputQuestion(
                server=asking.asked.server,
                kind=request.kind,
                message=request.message,
                url=request.url,
                host=request.host,
                key=request.key,
                round=asking.round,
                index=asking.index + 1,
                count=len(requests),
            )
            answer = await self._inputs.answer_request(plan, question, request, restored)
            restored = False
            if not isinstance(answer, InputAnswer):
                return answer
            progress = self.progress[call_id]
            asking = progress.asking
            assert asking is not None
            asking = asking.model_copy(
                update={
                    "answers": {**asking.answers, request.key: answer},
                    "index": asking.index + 1,
                }
            )
            self.progress[call_id] = progress.model_copy(update={"asking": asking})

    def _outcome(
        self, plan: PlannedCall, out: Ok | Failure | InputRequired | TaskState
    ) -> Ok | Failure:
        """The call's result from a step's last activity (the task ended, or polling did)."""
        call = plan.call
        progress = self.progress[call.call_id]
        if isinstance(out, Ok):
            return out
        if isinstance(out, Failure) and out.kind == TASK_NOT_FOUND:
            ends = self._ttl_end(progress)
            if ends is not None and workflow.now() >= ends:
                return self._expired(plan, progress)
            return out
        if isinstance(out, Failure):
            # The task failed, or its server stayed unreachable (a cancel would not reach it).
            return out
        return failed(
            call,
            "invalid_task",
            f"MCP server {progress.task.server!r} answered a poll of its task with "
            "something other than the task",
        )

    def _expired(self, plan: PlannedCall, progress: TaskProgress) -> Failure:
        ttl = progress.task.ttl_seconds or 0.0
        return expired(
            plan.call,
            f"MCP server {progress.task.server!r}'s task {progress.task.task_id} outlived its "
            f"time to live ({ttl:g} s) without a result; it may have run in part",
        )

    @staticmethod
    def _ttl_end(progress: TaskProgress) -> datetime | None:
        ttl = progress.task.ttl_seconds
        return None if ttl is None else progress.started_at + timedelta(seconds=ttl)

    async def _cancel(self, plan: PlannedCall, toolkit: str, execute: Execute) -> None:
        """Send `tasks/cancel` for the call's task, once; what it answers changes nothing."""
        call_id = plan.call.call_id
        progress = self.progress.get(call_id)
        if progress is None or call_id in self._cancel_sent:
            return
        self._cancel_sent.add(call_id)
        step = InputResume(
            responses={}, task=TaskAction(action="cancel", task_id=progress.task.task_id)
        )
        self._event(
            "tool_progress",
            call_id=call_id,
            tool=plan.call.name,
            text=f"cancelling task {progress.task.task_id} of MCP server {progress.task.server!r}",
        )
        await execute(self._step_plan(plan, step), toolkit, step)

    def _end(self, call_id: str, result: Ok | Failure) -> Ok | Failure:
        self.progress.pop(call_id, None)
        return result

    @staticmethod
    def _step_plan(plan: PlannedCall, step: InputResume) -> PlannedCall:
        """The plan of one task step: retried (every step may be sent again), summarized as such."""
        task = step.task
        assert task is not None
        what = {"get": "poll", "update": "answer", "cancel": "cancel"}[task.action]
        return plan.model_copy(
            update={
                "max_attempts": _STEP_ATTEMPTS,
                "initial_interval": 1.0,
                "at_most_once": False,
                "summary": f"{what} task of {plan.summary}"[:120],
            }
        )
