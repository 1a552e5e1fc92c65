"""The tool activity `tool.<name>` (see `agent_activities.py`).

It resolves the call (in the input, planned on this worker, or read by the
`tool_call` query), runs it and bounds its result.

The same activity runs calls of tools declared `local=True` as Temporal local
activities (`activity.info().is_local`). A local activity runs while its
workflow's task is open, so it must never query or signal its own workflow
(the query would wait for that very task, until the activity's timeout): its
call is always in its input, it publishes no events (they go by signal), and
it does not heartbeat (a local activity cannot).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Final

from pydantic_core import to_json
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_tools import telemetry
from durable_tools._wire import CallReference, DeltaEntry, ToolActivityInput, ToolActivityResult
from durable_tools.activities.activity_base import (
    FALLBACK_QUERIES,
    TOOL_ACTIVITY_PREFIX,
    TOOL_CALL_QUERY,
    ActivitiesBase,
    PlannedHere,
    heartbeating,
)
from durable_tools.activities.activity_events import ActivityEvents
from durable_tools.activities.tool_run import AttemptTimedOut, run_attempt
from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES
from durable_tools.events import MAX_EVENT_TEXT, PROGRESS_INTERVAL, STARTED_DELAY
from durable_tools.executor import PreparedCall, encode_result, prepare_call
from durable_tools.input_requests import NeedsInput
from durable_tools.results import Failure, Ok, ToolCall, failed
from durable_tools.tool_tasks import NeedsTask
from durable_tools.toolkit import Toolkit
from durable_tools.tools import ToolContext, ToolFailure
from durable_tools.transcript import to_tool_call_output

_TOOL_CALL_ANSWER: Any = ToolCall | None


_TRANSIENT_QUERY_STATUS: Final = frozenset(
    {
        RPCStatusCode.CANCELLED,  # the bridge's "Timeout expired"
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.RESOURCE_EXHAUSTED,
    }
)
_QUERY_TRIES: Final = 6
"""Tries of the `tool_call` query before its error fails the attempt (backoff 0.2 s, doubling)."""


async def _read_open_call(workflow_id: str, call_id: str) -> ToolCall | None:
    """The workflow's open call `call_id`, by the `tool_call` query, retried while transient.

    The query runs before the tool does, so a query that timed out (a busy
    worker replaying a long history to answer it) or found the server
    unavailable is tried again here rather than failing the attempt: for a
    call that runs at most once (an approved call), a failed attempt is the
    call's end, though the tool never started.

    Raises:
        RPCError: A non-transient status, or a transient one `_QUERY_TRIES` times.
        WorkflowQueryFailedError: The workflow failed the query.
    """
    handle = activity.client().get_workflow_handle(workflow_id)
    delay, tries = 0.2, 1
    while True:
        try:
            async with FALLBACK_QUERIES.slot(TOOL_CALL_QUERY):
                found: ToolCall | None = await handle.query(
                    TOOL_CALL_QUERY, call_id, result_type=_TOOL_CALL_ANSWER
                )
            return found
        except RPCError as exc:
            if exc.status not in _TRANSIENT_QUERY_STATUS or tries >= _QUERY_TRIES:
                raise
        if activity.info().heartbeat_timeout:
            # Alive while it waits, with the details this attempt started with
            # (a tool's last progress stays what a later attempt reads).
            activity.heartbeat(*activity.info().heartbeat_details)
        await asyncio.sleep(delay)
        delay, tries = delay * 2, tries + 1


class ToolActivity(ActivitiesBase):
    """The `tool.<name>` activity of `AgentActivities`."""

    def _known_call(self, request: ToolActivityInput) -> ToolCall | None:
        """The call to run when this worker has it at hand: in the request, or planned here.

        Arguments this worker planned are used only when they have the
        reference's digest (the `arguments_hash` the workflow recorded: the
        plan may come from an attempt whose result was not recorded).

        Returns:
            The call, or None when it must be read from the workflow (`_read_call`).

        Raises:
            ApplicationError: Non-retryable, when the request names neither a
                call nor a reference, or names a reference in a local activity
                (which cannot query its own workflow).
        """
        if request.call is not None:
            return request.call
        if activity.info().is_local:
            raise ApplicationError(
                "a local tool activity's input must hold its call: it cannot query its "
                "own workflow while that workflow's task is open",
                type="ConfigurationError",
                non_retryable=True,
            )
        reference = request.reference
        if reference is None:
            raise ApplicationError(
                "the tool activity's input names no call",
                type="ConfigurationError",
                non_retryable=True,
            )
        planned = self._planned.get(request.workflow_id, reference.call_id)
        if planned is not None and _matches(planned, reference):
            return planned.call
        return None

    def _validated(self, workflow_id: str, call: ToolCall, toolkit: Toolkit) -> PreparedCall | None:
        """What planning validated for `call` on this worker, once (`PlannedHere.validated`).

        Only for the very call planned here (the same object, so its digest
        matched) and the same tool object; cleared when read, so a retry
        validates again.
        """
        planned = self._planned.get(workflow_id, call.call_id)
        if planned is None or planned.call is not call or planned.validated is None:
            return None
        self._planned.put(workflow_id, call.call_id, planned._replace(validated=None))
        prepared = planned.validated
        return prepared if prepared.tool is toolkit.tools.get(call.name) else None

    async def _read_call(self, workflow_id: str, reference: CallReference) -> ToolCall:
        """The workflow's open call `reference`, where `_known_call` had none.

        Read from the run this worker holds, else with the `tool_call` query.

        Raises:
            ApplicationError: Non-retryable, when the conversation has no
                such open call of that name.
        """
        run_id = activity.info().workflow_run_id
        live = self.live_run(workflow_id, run_id)
        found = live.live_open_call(reference.call_id) if live is not None else None
        if found is not None:
            self.reads.local += 1
        else:
            self.reads.queries += 1
            found = await _read_open_call(workflow_id, reference.call_id)
        # The workflow's own open call is the record (histories planned before
        # `call_digest` hold another hash): its id and name must match.
        if found is None or (found.call_id, found.name) != (reference.call_id, reference.name):
            raise ApplicationError(
                f"the conversation has no open call {reference.call_id[:200]!r} "
                f"of {reference.name[:200]!r}",
                type="ConfigurationError",
                non_retryable=True,
            )
        return found

    @activity.defn(dynamic=True)
    async def tool_call(self, args: Sequence[RawValue]) -> ToolActivityResult:
        """Run one tool call (activity type `tool.<name>`).

        Exceptions raised by the run propagate so Temporal retries them with
        the tool's retry policy; the workflow turns exhausted retries into a
        Failure. Input validation failures, `ToolFailure`s and oversized
        results are returned as Failures and never retried.
        """
        info = activity.info()
        if not info.activity_type.startswith(TOOL_ACTIVITY_PREFIX):
            raise ApplicationError(
                f"unknown activity type {info.activity_type!r}",
                type="ConfigurationError",
                non_retryable=True,
            )
        self.let_go()
        request = activity.payload_converter().from_payload(args[0].payload, ToolActivityInput)
        # Reading the call may wait on the `tool_call` query (a worker that
        # replays to answer it): heartbeat meanwhile, with the details this
        # attempt started with, or a slow query outlives the heartbeat timeout
        # and the attempt (the call's only one, when approved) is cancelled.
        call = self._known_call(request)  # mostly: no wait, so no heartbeat timer either
        if call is None:
            assert request.reference is not None  # `_known_call` raised otherwise
            async with heartbeating(list(info.heartbeat_details)):
                call = await self._read_call(request.workflow_id, request.reference)
        if request.call is None:
            request = request.model_copy(update={"call": call})
        started = time.monotonic()
        policy = info.retry_policy
        identity: dict[str, Any] = {
            "call_id": call.call_id,
            "tool": call.name,
            "attempt": info.attempt,
        }
        # A quick first attempt publishes nothing (see activity_events.py); a
        # local activity nothing at all: a signal to its own workflow would
        # wait for the workflow task it runs in.
        hold = 0.0 if info.attempt > 1 else STARTED_DELAY
        with telemetry.tool_span(
            call.name, call.call_id, info.attempt, request.workflow_id
        ) as span:
            async with ActivityEvents(
                hold=hold, interval=PROGRESS_INTERVAL, enabled=not info.is_local
            ) as events:
                events.publish(
                    "tool_attempt_started",
                    **identity,
                    max_attempts=policy.maximum_attempts if policy is not None else None,
                )
                try:
                    out = await self._tool_call(request, info.attempt, events, identity)
                except Exception as exc:
                    error = exc.type if isinstance(exc, ApplicationError) and exc.type else None
                    telemetry.finish_tool_span(
                        span,
                        call.name,
                        "attempt_failed",
                        time.monotonic() - started,
                        error or type(exc).__name__,
                    )
                    reason = f"{error}: {exc}" if error else f"{type(exc).__name__}: {exc}"
                    events.drop()
                    events.publish(
                        "tool_attempt_failed",
                        **identity,
                        max_attempts=policy.maximum_attempts if policy is not None else None,
                        reason=reason[:MAX_EVENT_TEXT],
                    )
                    await events.flush(wait=False)  # the retry does not wait for it
                    raise
                events.drop()  # the call's output, published by the workflow, says more
            result = out.result
            if result is None:  # the call asks for input: the loop asks, then retries
                telemetry.finish_tool_span(
                    span, call.name, "input_required", time.monotonic() - started, None
                )
                return out
            # The output the workflow appends: the next model turn on this
            # worker reads it from here (`TranscriptDelta`), not by query.
            self.produced.remember(
                request.workflow_id, DeltaEntry(call_id=call.call_id), to_tool_call_output(result)
            )
            outcome = "ok" if isinstance(result, Ok) else result.kind
            telemetry.finish_tool_span(
                span,
                call.name,
                outcome,
                time.monotonic() - started,
                None if isinstance(result, Ok) else result.kind,
            )
            # Answered: a retry of this activity carries no new attempt (Temporal
            # records this result), so the plan it read is not needed again.
            self._planned.pop(request.workflow_id, call.call_id)
            return out

    async def _tool_call(
        self,
        request: ToolActivityInput,
        attempt: int,
        events: ActivityEvents,
        identity: dict[str, Any],
    ) -> ToolActivityResult:
        call = request.call
        assert call is not None  # resolved by `tool_call`
        toolkit = self._toolkit(request.toolkit)
        prepared = self._validated(request.workflow_id, call, toolkit) or prepare_call(
            toolkit, call, max_argument_bytes=self.max_payload_bytes or DEFAULT_MAX_ARGUMENT_BYTES
        )
        if isinstance(prepared, Failure):
            return ToolActivityResult(
                result=prepared.model_copy(update={"reason": self.redact(prepared.reason)})
            )
        context = ToolContext(
            call_id=call.call_id,
            tool=call.name,
            idempotency_key=request.idempotency_key,
            attempt=attempt,
            deps=self.deps,
            resume=request.resume,
        )
        tool, parsed = prepared.tool, prepared.input
        try:
            value = await run_attempt(
                lambda emit: tool.run(parsed, emit, context),
                context=context,
                events=events,
                identity=identity,
                threads=self.tool_threads,
            )
        except AttemptTimedOut as exc:
            # Retried like Temporal's own start-to-close timeout, which has
            # usually been recorded already (then this failure is dropped).
            raise ApplicationError(str(exc), type="StartToCloseTimeout") from None
        except NeedsInput as exc:
            # Control flow as data: the loop records the requests and asks.
            return ToolActivityResult(input_required=exc.required, attempt=attempt)
        except NeedsTask as exc:
            # The call runs as a task: the loop polls it with timers and short activities.
            return ToolActivityResult(task=exc.state, attempt=attempt)
        except ToolFailure as exc:
            reason = self.redact(exc.reason)
            if exc.retryable:
                raise ApplicationError(reason, type=exc.kind) from None
            return ToolActivityResult(result=failed(call, exc.kind, reason))
        except Exception as exc:
            # Retried per the tool's policy under the exception's type name; the
            # text Temporal records (and the model may see) is scrubbed, and
            # `from None` keeps the raw message out of the failure's cause.
            activity.logger.warning("tool %s raised", call.name, exc_info=True)
            raise ApplicationError(self.redact(str(exc)), type=type(exc).__name__) from None
        result = encode_result(prepared, value)
        size = len(to_json(result))
        # A local activity's result is a marker in its workflow task's
        # completion, one gRPC message for every local call of the turn: its
        # own bound (`LOCAL_RESULT_BYTES`) holds with external storage too.
        if activity.info().is_local:
            limit = request.max_result_bytes
            why = "a local tool's result is recorded in the workflow's task"
        elif self.max_payload_bytes:
            limit, why = self.max_payload_bytes, "the worker's maximum payload size"
        else:
            limit, why = request.max_result_bytes, "Temporal's payload limit is 2 MiB"
        if size > limit:
            result = failed(
                call,
                "output_too_large",
                f"the result is {size} bytes, over the limit of {limit} bytes ({why}); "
                "ask for less data, e.g. a page or a summary",
            )
        return ToolActivityResult(result=result, attempt=attempt)


def _matches(planned: PlannedHere, reference: CallReference) -> bool:
    """Whether a planned call (and its `call_digest`) is the referenced call."""
    call = planned.call
    return (
        call.call_id == reference.call_id
        and call.name == reference.name
        and planned.digest == reference.digest
    )
