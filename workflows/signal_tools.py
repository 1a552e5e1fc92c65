"""Signal tools, carried out by the loop: sleep, pause, handoff, finish, reply, agent tools.

A signal tool's run returns an action (`durable_tools.signals`) instead of a
value; `interpret` carries it out in the workflow: a durable timer for
`Sleep`, a durable wait for `resume` for `Pause`, the next agent for
`Handoff`, the end of the conversation for `Finish`, a sub-agent for
`RunAgent` (`sub_agents`). `SignalWaits` holds
what the turn's signal tools wait on (the pause, its `resume`, the sleeps),
which the `status` and `pending` queries read and continue-as-new carries.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from durable_tools.workflows.sub_agents import SubAgents
from durable_tools.workflows.visibility import SENDER_EVENTS_PATCH, Visibility
from durable_tools.workflows.waits import MOVED, Moved, Waits, seconds_text

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import CarriedCall, PlannedCall
    from durable_tools.conversation import Resume
    from durable_tools.events import MAX_EVENT_TEXT
    from durable_tools.handler_input import clean_sender
    from durable_tools.results import Failure, Ok, ToolCall, failed
    from durable_tools.signals import Finish, Handoff, Pause, Reply, RunAgent, Sleep

__all__ = ["SignalToolCalls", "SignalWaits", "handoff_result", "interpret"]


@dataclass
class SignalWaits:
    """What the turn's signal tools wait on: the pause, its `resume`, the sleeps."""

    paused: str | None = None
    """The pause's reason while a `pause` call waits."""
    resume: Resume | None = None
    """The `resume` that arrived for the current pause."""
    early_resume: Resume | None = None
    """A `resume` that arrived while nothing was paused: it applies to the next pause."""
    pause_until: datetime | None = None
    """When the current pause ends by itself (`Pause.seconds`), if it does."""
    pause_call: str | None = None
    """The id of the `pause` call that waits."""
    sleeps: dict[str, datetime] = field(default_factory=dict[str, datetime])
    """When each sleeping call's sleep ends, by call id."""
    sleepers: int = 0
    """Calls of this turn in a `sleep`."""

    def take_resume(self, resume: Resume) -> None:
        """The `resume` signal: for the current pause, else kept for the next one."""
        if self.paused is not None:
            self.resume = resume
        else:
            self.early_resume = resume

    def check_resume(self, state: str) -> None:
        """The `resume_now` validator: a resume applies now only while a `pause` call waits.

        Raises:
            ApplicationError: Type `ResumeRejected`, naming the state, otherwise.
        """
        if self.paused is None:
            raise ApplicationError(
                f"the conversation is not paused (state {state!r})",
                type="ResumeRejected",
                non_retryable=True,
            )

    def restore(self, wait: CarriedCall) -> None:
        """Make a carried call's sleep or pause wait again until its recorded end."""
        if wait.wake_at is not None:
            self.sleeps[wait.plan.call.call_id] = wait.wake_at
        if wait.pause_until is not None:
            self.pause_until = wait.pause_until


class SignalToolCalls(Protocol):
    """What `interpret` needs of the turn's calls (`TurnCalls`)."""

    signal_waits: SignalWaits
    waits: Waits
    view: Visibility
    superseded: bool
    superseded_by: str
    moving: bool
    finishing: bool
    running: int
    started: set[str]
    sub_agents: SubAgents | None

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


def handoff_result(call: ToolCall, action: Handoff, agents: Mapping[str, Any]) -> Ok | Failure:
    """The output of a `handoff` call: `Ok`, or a `Failure` naming the agents there are."""
    if action.agent not in agents:
        known = ", ".join(sorted(agents))
        reason = f"no agent named {action.agent!r}; known agents: {known}"
        return failed(call, "input_validation_error", reason)
    return Ok(call_id=call.call_id, tool=call.name, value=f"handed off to {action.agent}")


async def interpret(
    calls: SignalToolCalls, plan: PlannedCall, agents: Mapping[str, Any], resumed: bool = False
) -> Handoff | Finish | Moved | None:
    """Carry out a signal tool's action and record the call's output.

    Args:
        calls: The turn's calls (records the output, waits, publishes).
        plan: The signal tool's call, with its `action`.
        agents: The agents a `handoff` may name.
        resumed: The call waited in the previous run (its pause is registered).

    Returns:
        The `Handoff` or `Finish` the loop carries out, `MOVED` when the wait
        moved to the next run, else `None`.
    """
    call, action, waits, view = plan.call, plan.action, calls.signal_waits, calls.view
    if isinstance(action, Sleep):
        wake_at = waits.sleeps.setdefault(
            call.call_id, workflow.now() + timedelta(seconds=action.seconds)
        )
        waits.sleepers += 1
        view.state = "sleeping"
        try:
            await calls.waits.wait(
                lambda: calls.move_now() or calls.superseded,
                wake_at,
                f"sleep {seconds_text(action.seconds)}",
            )
            woke, by = "woken early by a new user message", calls.superseded_by
            if calls.moving:
                return MOVED  # the sleep's end goes to the next run
        except builtins.TimeoutError:
            woke, by = f"slept {seconds_text(action.seconds)}", ""
        finally:
            waits.sleepers -= 1
            view.state = calls.calls_state()
        waits.sleeps.pop(call.call_id, None)
        calls.record(Ok(call_id=call.call_id, tool=call.name, value=woke), sent_by=by)
    elif isinstance(action, Pause):
        if not resumed:
            waits.paused = action.reason or "paused"
            # A `resume` that arrived before this pause registered applies to it.
            waits.resume, waits.early_resume = waits.early_resume, None
            if action.seconds is not None:
                waits.pause_until = workflow.now() + timedelta(seconds=action.seconds)
        waits.pause_call = call.call_id
        view.state = "paused"
        calls.publish()
        if not resumed:
            view.event("conversation_paused", call_id=call.call_id, reason=waits.paused)
        timed_out = False
        try:
            await calls.waits.wait(
                lambda: calls.move_now() or waits.resume is not None or calls.superseded,
                waits.pause_until,
                f"pause of {plan.summary}",
            )
        except builtins.TimeoutError:
            timed_out = True
        finally:
            if not (calls.moving and not timed_out):
                waits.paused = waits.pause_until = waits.pause_call = None
            view.state = calls.calls_state()
            calls.publish()
        by = ""
        if timed_out:
            seconds = action.seconds or 0
            value = f"nobody resumed the conversation within {seconds_text(seconds)}"
        elif calls.moving:
            return MOVED  # the pause (and any resume) goes to the next run
        elif waits.resume is not None:
            value, by = waits.resume.message, clean_sender(waits.resume.resumed_by)
            if workflow.patched(SENDER_EVENTS_PATCH):
                view.event(
                    "conversation_resumed",
                    call_id=call.call_id,
                    sent_by=by or None,
                    text=value[:MAX_EVENT_TEXT] or None,
                )
        else:
            value, by = "resumed by a new user message", calls.superseded_by
        calls.record(Ok(call_id=call.call_id, tool=call.name, value=value), sent_by=by)
    elif isinstance(action, Handoff):
        result = handoff_result(call, action, agents)
        calls.record(result)
        return action if isinstance(result, Ok) else None
    elif isinstance(action, Finish):
        calls.finishing = True  # the conversation ends with this turn: no move
        calls.record(Ok(call_id=call.call_id, tool=call.name, value="finished"))
        return action
    elif isinstance(action, Reply):
        calls.record(Ok(call_id=call.call_id, tool=call.name, value=action.value))
    elif isinstance(action, RunAgent):
        if calls.sub_agents is None:
            reason = "agent tools need a conversation workflow to run their sub-agents"
            calls.record(failed(call, "execution_error", reason))
            return None
        return await calls.sub_agents.run(calls, plan, action, agents)
    else:
        calls.record(failed(call, "execution_error", "signal tool produced no action"))
    return None
