"""A local tool call as its activity `tool.<name>`, and how its failure reaches the model.

`run_tool_activity` schedules the call's activity with the options its plan
carries (timeouts, retry policy), as a Temporal local activity when the plan
says `local` (`Tool.local`); `activity_failure` maps an activity that failed
for good (timed out, lost, cancelled, raised, retries exhausted), local or
not, to the `Failure` the model reads (DESIGN.md invariant 2). Pure but for
the `workflow.execute_activity` and `workflow.execute_local_activity` calls.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    TimeoutError,
    TimeoutType,
)

from durable_tools.workflows.model_failure import NEVER_RETRIED

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import (
        LOCAL_RESULT_BYTES,
        TOOL_ACTIVITY_PREFIX,
        CallReference,
        PlannedCall,
        ToolActivityInput,
        ToolActivityResult,
    )
    from durable_tools.input_requests import InputResume
    from durable_tools.results import Failure, execution_error, failed, interrupted, timed_out

__all__ = ["activity_failure", "run_tool_activity", "tool_retry_policy"]

_NO_TIMEOUT = timedelta(days=1)
"""Start-to-close timeout of a tool without one of its own."""


def tool_retry_policy(plan: PlannedCall) -> RetryPolicy:
    """The retry policy of `plan`'s tool activity (the tool's, as planned)."""
    return RetryPolicy(
        maximum_attempts=plan.max_attempts,
        initial_interval=timedelta(seconds=plan.initial_interval),
        backoff_coefficient=plan.backoff_coefficient,
        maximum_interval=timedelta(seconds=plan.maximum_interval),
        non_retryable_error_types=[*plan.non_retryable_error_types, *NEVER_RETRIED],
    )


async def run_tool_activity(
    plan: PlannedCall, toolkit: str, *, inline: bool, resume: InputResume | None = None
) -> ToolActivityResult:
    """Run `plan`'s call as the activity `tool.<name>`, summarized `name(arg=…)`.

    The activity's summary (user metadata, shown by Temporal's Web UI and
    `temporal workflow show`) is `plan.summary`: at most 120 characters,
    scrubbed by the worker's redactor when the call was planned.

    A plan with `local` set runs as a Temporal local activity of the same
    name, with the same start-to-close timeout and retry policy (no
    heartbeat timeout: a local activity cannot heartbeat), the call in its
    input (a local activity runs while its workflow task is open, so it
    cannot query this workflow for the call), its result bounded by
    `LOCAL_RESULT_BYTES`. Its result is recorded as one marker event.

    Args:
        plan: The planned local call.
        toolkit: The toolkit the worker runs it from.
        inline: The arguments go in the input (`transcript_in_activity_input`);
            else the activity reads them by reference (the `tool_call` query).
            Local plans always carry them.
        resume: The answers to what the call's previous activity asked, and
            the server's exact `requestState` (`InputRounds`): the retry.

    Raises:
        ActivityError: The activity failed for good (`activity_failure` maps it).
    """
    call, info = plan.call, workflow.info()
    # A local activity's input is not recorded (its marker holds the result
    # only), so the call costs no history there.
    inline = inline or plan.local
    request = ToolActivityInput(
        toolkit=toolkit,
        # The arguments are recorded once, in the model turn's
        # result: the activity finds them by reference (the
        # `tool_call` query) unless the loop cannot be queried.
        call=call if inline else None,
        reference=None
        if inline
        else CallReference(call_id=call.call_id, name=call.name, digest=plan.arguments_hash),
        workflow_id=info.workflow_id,
        idempotency_key=f"{info.workflow_id}/{call.call_id}",
        resume=resume,
    )
    start_to_close = timedelta(seconds=plan.timeout) if plan.timeout else _NO_TIMEOUT
    if plan.local:
        try:
            return await workflow.execute_local_activity(
                TOOL_ACTIVITY_PREFIX + call.name,
                request.model_copy(update={"max_result_bytes": LOCAL_RESULT_BYTES}),
                result_type=ToolActivityResult,
                start_to_close_timeout=start_to_close,
                retry_policy=tool_retry_policy(plan),
                summary=plan.summary,
            )
        except ActivityError:
            raise
        except FailureError as exc:
            # Replayed from its marker, a local activity that timed out
            # raises the bare `TimeoutError` (measured, temporalio 1.35);
            # live, an `ActivityError` with it as the cause. Both must give
            # the model the same `Failure`, or the replay diverges.
            raise _activity_error(plan, exc) from exc
    return await workflow.execute_activity(
        TOOL_ACTIVITY_PREFIX + call.name,
        request,
        result_type=ToolActivityResult,
        start_to_close_timeout=start_to_close,
        heartbeat_timeout=timedelta(seconds=plan.heartbeat_timeout)
        if plan.heartbeat_timeout
        else None,
        retry_policy=tool_retry_policy(plan),
        # What Temporal's Web UI and `temporal workflow show` print for the
        # step: `name(arg=…)`, at most 120 characters, redacted when planned.
        # Replay ignores user metadata: histories recorded without it replay.
        summary=plan.summary,
    )


def _activity_error(plan: PlannedCall, cause: FailureError) -> ActivityError:
    """`cause` as the `ActivityError` of `plan`'s local activity (`cause` is its cause)."""
    error = ActivityError(
        "local activity failed",
        scheduled_event_id=0,
        started_event_id=0,
        identity="",
        activity_type=TOOL_ACTIVITY_PREFIX + plan.call.name,
        activity_id="",
        retry_state=None,
    )
    error.__cause__ = cause
    return error


def activity_failure(plan: PlannedCall, exc: ActivityError) -> Failure:
    """The `Failure` the model reads for a tool activity that failed for good.

    Args:
        plan: The call's plan (its timeouts, attempts, idempotency).
        exc: What `workflow.execute_activity` raised, or
            `workflow.execute_local_activity` for a local plan (the same
            causes: a local activity's worker lost mid-call is retried with
            its workflow task, never a heartbeat timeout).

    Returns:
        `interrupted` when the call may have run (a lost worker of a tool that
        is not idempotent, a cancelled activity), `timed_out` for a timeout,
        `execution_error` with the error type and attempts for what it raised.
    """
    call, cause = plan.call, exc.cause
    if isinstance(cause, TimeoutError) and plan.at_most_once:
        return interrupted(
            call,
            "the worker running this call was lost; the call may have reached its "
            "server, and it is not retried because the tool is not idempotent",
        )
    if isinstance(cause, TimeoutError):
        if cause.type == TimeoutType.HEARTBEAT:
            # The tool activity heartbeats by itself while the tool runs.
            return failed(
                call,
                "timed_out",
                f"the worker running the tool sent no heartbeat for "
                f"{plan.heartbeat_timeout or 0:g} s (it was lost, or the tool blocked its "
                "event loop); it may have taken effect",
            )
        return timed_out(call, plan.timeout)
    if isinstance(cause, CancelledError):
        return interrupted(call, "the tool activity was cancelled; it may have taken effect")
    if isinstance(cause, ApplicationError):
        attempts = f" after {plan.max_attempts} attempts" if plan.max_attempts > 1 else ""
        kind = cause.type or "Error"
        return execution_error(call, f"{kind}: {cause.message}{attempts}")
    return execution_error(call, str(cause or exc))
