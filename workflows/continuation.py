"""Continue-as-new: what a run carries to the next one, and what waits across it.

A run continues as new every so many turns, when Temporal suggests it, or
(FOLLOW_VERSIONS_PATCH) when a new worker version is current while it waits.
It carries a `CarriedState`: the transcript's tail that fits
`carry_transcript_bytes` (`RunTranscript.bounded`, BOUNDED_CARRY_PATCH; the earlier
runs keep the rest, `durable_tools.carry`), the inbox, the counters, and the
turn's calls that still wait (`snapshot_turn`, a `CarriedTurn`), which the
next run makes wait again before any handler runs (`restore_turn`). A carry
over Temporal's 2 MiB input limit is not sent (`continue_as_new_if_fits`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from temporalio import workflow

from durable_tools.workflows.turn_calls import TurnCalls
from durable_tools.workflows.visibility import Visibility

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import CarriedCall, CarriedTurn, ConversationInput
    from durable_tools.events import RETAINED_EVENTS

__all__ = [
    "BOUNDED_CARRY_PATCH",
    "MAX_CARRY_BYTES",
    "NO_DESCRIPTOR_CARRY_PATCH",
    "continue_as_new",
    "continue_as_new_due",
    "continue_as_new_if_fits",
    "restore_turn",
    "snapshot_turn",
]

BOUNDED_CARRY_PATCH = "bounded-carry"
"""Patch id: histories recorded before it carried the whole transcript across continue-as-new.

Without the marker a run carries its whole transcript and stays in the run
once that is over `MAX_CARRY_BYTES`; with it, a bounded tail
(`durable_tools.carry`).
"""

NO_DESCRIPTOR_CARRY_PATCH = "no-descriptor-carry"
"""Patch id: histories recorded before it carried the descriptors across continue-as-new.

Nothing reads `CarriedState.descriptors` (the model activity compares the
descriptors' digest, which is carried): with the marker the carry leaves
them out (each tool's schema, once per continue-as-new, twice in history).
"""

MAX_CARRY_BYTES = 2_000_000
"""Largest carried input sent: Temporal rejects a continue-as-new input over 2 MiB
(the workflow task fails and is retried forever); a larger carried state stays
in the current run (only the whole transcript of histories before
BOUNDED_CARRY_PATCH, or state other than the transcript, e.g. a thousand
early decisions, gets there)."""


def continue_as_new_due(turns_this_run: int, every: int | None) -> bool:
    """Whether a run continues as new before its next model turn.

    After a model turn of this run, when Temporal suggests it (history
    size), a new worker version is current, or `every` turns ran
    (`ConversationOptions.continue_as_new_after_turns`).
    """
    if turns_this_run == 0:
        return False
    info = workflow.info()
    return (
        info.is_continue_as_new_suggested()
        or info.is_target_worker_deployment_version_changed()
        or (every is not None and turns_this_run >= every)
    )


async def continue_as_new(
    view: Visibility,
    verifications: Collection[asyncio.Task[None]],
    carry: Callable[[bool], ConversationInput],
    *,
    may_bound: bool,
) -> int:
    """Continue as new once every handler finished (never returns), or return the carry's size.

    The event stream's long polls are released first (they follow the new
    run) and the stream keeps its latest events only. The caller hands
    `await_turn` over before (its caller follows the chain), so the run
    never waits on a handler that waits on it.

    Args:
        view: The loop's event stream.
        verifications: Decisions whose signatures are being checked.
        carry: The next run's input, bounded (`RunTranscript.bounded`) or whole.
        may_bound: Whether a bounded carry is possible (not with
            `transcript_in_activity_input`); the history decides
            (BOUNDED_CARRY_PATCH).

    Returns:
        The carried state's size, over `MAX_CARRY_BYTES`: the run stays.
    """
    stream = view.stream
    if stream is not None:
        stream.detach_pollers()
    await workflow.wait_condition(lambda: workflow.all_handlers_finished() and not verifications)
    if stream is not None:
        stream.truncate(view.stream_end() - RETAINED_EVENTS)
    bounded = may_bound and workflow.patched(BOUNDED_CARRY_PATCH)
    # A new current version: the next run starts on it.
    upgrade = workflow.info().is_target_worker_deployment_version_changed()
    size = continue_as_new_if_fits(carry(bounded), upgrade)
    if stream is not None:
        stream._detaching = False  # pyright: ignore[reportPrivateUsage]
    workflow.logger.warning(
        "not continuing as new: the carried state is %d bytes, over %d", size, MAX_CARRY_BYTES
    )
    return size


def continue_as_new_if_fits(carry: ConversationInput, upgrade: bool) -> int:
    """Continue as new with `carry` (never returns), or return its size when it is too large.

    `upgrade`: a new worker version is current; the next run starts on it.
    """
    size = workflow.payload_converter().to_payloads([carry])[0].ByteSize()
    if size <= MAX_CARRY_BYTES:
        workflow.continue_as_new(
            carry,
            initial_versioning_behavior=(
                workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE if upgrade else None
            ),
        )
    return size


def snapshot_turn(calls: TurnCalls) -> CarriedTurn:
    """The current turn's calls without an output, with what they wait for."""
    waits = calls.signal_waits
    carried: list[CarriedCall] = []
    for call_id, plan in calls.plans.items():
        if call_id in calls.answered:
            continue
        carried.append(
            CarriedCall(
                plan=plan,
                **calls.book.waits_of(call_id),
                wake_at=waits.sleeps.get(call_id),
                pause_until=waits.pause_until if call_id == waits.pause_call else None,
                input_progress=calls.inputs.progress.get(call_id),
                task_progress=calls.tasks.progress.get(call_id),
            )
        )
    return CarriedTurn(
        toolkit=calls.toolkit,
        calls=carried,
        superseded=calls.superseded,
        paused=waits.paused,
        resume=waits.resume,
    )


def restore_turn(carried: CarriedTurn, calls: TurnCalls) -> None:
    """Make the carried turn's calls wait again as they did in the previous run.

    Called by the workflow's `__init__`, before any handler of the run's
    first activation runs: a decision, an answer or a `resume` that arrived
    after the previous run moved and before this run's first workflow task
    finds its call waiting (registered by the loop, they were rejected as
    unknown calls, and the resume kept for a later pause).
    """
    waits = calls.signal_waits
    calls.toolkit = carried.toolkit
    calls.superseded = carried.superseded
    waits.paused, waits.resume = carried.paused, carried.resume
    for wait in carried.calls:
        calls.plans[wait.plan.call.call_id] = wait.plan
        calls.open[wait.plan.call.call_id] = wait.plan.call
        calls.book.restore(wait)
        waits.restore(wait)
        if wait.input_progress is not None:
            calls.inputs.restore(wait.plan.call.call_id, wait.input_progress)
        if wait.task_progress is not None:
            calls.tasks.restore(wait.plan.call.call_id, wait.task_progress)
