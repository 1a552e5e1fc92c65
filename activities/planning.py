"""Planning a model turn's tool calls on the worker.

Planning needs the toolkit's code (pydantic decoders, `needs_approval`
functions, signal-tool handlers), so it runs inside the model activity and its
result is recorded in workflow history: replay never re-runs application code,
and a toolkit changed between runs cannot make an old history diverge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from durable_tools import telemetry
from durable_tools._wire import MAX_LOCAL_CALLS_PER_TURN, PlannedCall
from durable_tools.activities.call_policies import CallPolicies
from durable_tools.approvals import call_digest
from durable_tools.arguments import (
    DEFAULT_MAX_ARGUMENT_BYTES,
    SUMMARY_LIMIT,
    ArgumentsError,
    summarize_call,
)
from durable_tools.executor import PreparedCall, prepare_call
from durable_tools.policy_verdict import Effect, PolicyDisagreement, PolicyVerdict, rule_label
from durable_tools.results import Failure, ToolCall, failed
from durable_tools.schema import SchemaViolation
from durable_tools.signals import SignalAction
from durable_tools.toolkit import Toolkit
from durable_tools.tools import ApprovalContext, InteractionTool, SignalTool
from durable_tools.transcript import TranscriptItem

__all__ = ["effect_of", "plan_calls", "shown_summary", "summarize_call"]

_ACTION = TypeAdapter[Any](SignalAction)


def plan_calls(
    toolkit: Toolkit,
    calls: Sequence[ToolCall],
    transcript: Sequence[TranscriptItem],
    *,
    message: TranscriptItem | None = None,
    max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
    redact: Callable[[str], str] | None = None,
    policies: CallPolicies | None = None,
    validated: dict[str, PreparedCall] | None = None,
) -> list[PlannedCall]:
    """Plan each call of a turn: kind, early failure, approval, options.

    Never raises for model input: unknown tools, invalid arguments and
    exceptions in `needs_approval` or signal handlers become failures.

    Args:
        toolkit: The toolkit the model saw.
        calls: The turn's calls.
        transcript: The transcript the model saw (for `needs_approval`).
        message: The turn's message, appended to `transcript` for
            `needs_approval` (default none).
        max_argument_bytes: Size limit of argument text (default 1 MiB).
        redact: Applied to each call's summary (`shown_summary`), which
            Temporal's Web UI shows as the tool activity's summary and
            approvers read (default: none).
        policies: The approval policies of this turn (default none: each
            tool's own `needs_approval`). A local tool's call gets the
            first verdict (`PlannedCall.policy`): `run`, `approve` (its
            approvers and quorum) or `deny` (a `Failure` of kind `denied`).
        validated: Filled, by call id, with each local call's tool and
            validated input (`prepare_call`) that no application code saw
            (its tool's `needs_approval` is a bool), so its tool activity on
            this worker need not validate it again (default: not kept).

    Returns:
        One `PlannedCall` per call, in order. Calls of tools declared
        `local=True` are planned `local` (a Temporal local activity), the
        first `MAX_LOCAL_CALLS_PER_TURN` of the turn only: the rest run as
        ordinary activities, so the markers of one workflow task stay small.
    """
    made: list[tuple[Any, ...]] = []

    def history() -> tuple[Any, ...]:
        # Built once, and only for a `needs_approval` function: a copy of the
        # whole transcript on every turn made long conversations' turns grow.
        if not made:
            made.append((*transcript, message) if message is not None else tuple(transcript))
        return made[0]

    plans = [
        _plan(toolkit, call, history, max_argument_bytes, redact, policies, validated)
        for call in calls
    ]
    local = [i for i, plan in enumerate(plans) if plan.local]
    for n, i in enumerate(local):
        # A local activity cannot heartbeat: the loss of its worker is
        # noticed by its workflow task's timeout instead.
        keep = n < MAX_LOCAL_CALLS_PER_TURN
        update = {"heartbeat_timeout": None} if keep else {"local": False}
        plans[i] = plans[i].model_copy(update=update)
    return plans


_REDACTED_SPAN = 4 * SUMMARY_LIMIT
"""Characters of a call's summary redacted before it is cut to `SUMMARY_LIMIT`."""


def shown_summary(call: ToolCall, redact: Callable[[str], str] | None = None) -> str:
    """`summarize_call(call)` with `redact` applied, at most `SUMMARY_LIMIT` characters.

    The summary is redacted before it is cut, so a secret that starts within
    the first 120 characters is matched whole, not shown in part.

    Args:
        call: The call.
        redact: The worker's redactor (default: none, the summary as made).

    Returns:
        E.g. `login(user='ana', password=[redacted]…` (the same text as
        `summarize_call(call)` when there is nothing to redact: a plan then
        records no summary of its own, see `_wire.ModelTurn`).
    """
    if redact is None:
        return summarize_call(call)
    text = redact(summarize_call(call, _REDACTED_SPAN))
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1] + "…"


def _plan(
    toolkit: Toolkit,
    call: ToolCall,
    history: Callable[[], tuple[Any, ...]],
    max_argument_bytes: int,
    redact: Callable[[str], str] | None,
    policies: CallPolicies | None,
    validated: dict[str, PreparedCall] | None = None,
) -> PlannedCall:
    base: dict[str, Any] = {
        "call": call,
        "arguments_hash": call_digest(call.name, call.call_id, call.arguments),
        "summary": shown_summary(call, redact),
    }
    found = toolkit.tools.get(call.name)
    if isinstance(found, SignalTool | InteractionTool):
        try:
            parsed = found.decode(call.arguments, max_bytes=max_argument_bytes)
        except (ArgumentsError, SchemaViolation) as exc:
            reason = f"invalid arguments for {call.name}: {exc}"
            return PlannedCall(
                **base, kind=found.kind, failure=failed(call, "input_validation_error", reason)
            )
        if isinstance(found, InteractionTool):
            answer = found.answer.json_schema if found.answer is not None else None
            return PlannedCall(**base, kind="interaction", answer_schema=answer)
        if found.handler is None:
            reason = f"signal tool {call.name!r} has no handler on this worker"
            return PlannedCall(
                **base, kind="signal", failure=failed(call, "execution_error", reason)
            )
        try:
            try:
                produced = found.handler(parsed)
            except ValidationError as exc:  # the handler validated the arguments further
                reason = f"invalid arguments for {call.name}: {_one_line(exc)}"
                return PlannedCall(
                    **base, kind="signal", failure=failed(call, "input_validation_error", reason)
                )
            action = _ACTION.validate_python(produced)
        except Exception as exc:
            reason = f"{call.name} could not be interpreted: {type(exc).__name__}: {exc}"
            return PlannedCall(
                **base, kind="signal", failure=failed(call, "execution_error", reason)
            )
        return PlannedCall(**base, kind="signal", action=action)

    prepared = prepare_call(toolkit, call, max_argument_bytes=max_argument_bytes)
    if isinstance(prepared, Failure):
        kind = "unknown" if found is None else found.kind
        return PlannedCall(**base, kind=kind, failure=prepared)
    tool = prepared.tool
    # An approval policy decides first; the tool's own `needs_approval` only
    # when none does (so a policy also spares a `needs_approval` function).
    verdict, candidate = policies.verdicts(call, tool) if policies is not None else (None, None)
    own: list[bool] = []

    def own_gated() -> bool:
        # The tool's own `needs_approval`, asked once (it may raise).
        if not own:
            transcript = () if isinstance(tool.needs_approval, bool) else history()
            own.append(
                tool.requires_approval(
                    prepared.input,
                    ApprovalContext(call_id=call.call_id, tool=call.name, transcript=transcript),
                )
            )
        return own[0]

    shadow = None
    if policies is not None and policies.shadowed:
        shadow = _disagreement(verdict, candidate, tool.approvers, own_gated)
        if shadow is not None:
            base["shadow"] = shadow
            telemetry.record_policy_disagreement(
                call.name, rule_label(verdict), rule_label(candidate)
            )
    if verdict is not None:
        if verdict.outcome == "deny":
            return PlannedCall(**base, kind="local", failure=_denial(call, verdict), policy=verdict)
        gated, approvers = verdict.outcome == "approve", verdict.approvers
    else:
        approvers = list(tool.approvers)
        try:
            gated = own_gated()
        except Exception as exc:
            reason = f"needs_approval raised {type(exc).__name__}: {exc}"
            failure = failed(call, "execution_error", reason)
            return PlannedCall(**base, kind="local", failure=failure)
    # The defaults follow the effect: an approved call runs at most once unless
    # the tool is idempotent or chose its own retries (Tool.retry_policy_for).
    retry = tool.retry_policy_for(gated=gated)
    at_most_once = tool.at_most_once_for(gated=gated)
    if validated is not None and isinstance(tool.needs_approval, bool):
        validated[call.call_id] = prepared
    return PlannedCall(
        **base,
        kind="local",
        needs_approval=gated,
        approval_deadline=tool.approval_deadline,
        approvers=approvers if gated else [],
        policy=verdict,
        timeout=tool.timeout,
        heartbeat_timeout=tool.heartbeat_timeout,
        max_attempts=1 if at_most_once else retry.max_attempts,
        at_most_once=at_most_once,
        initial_interval=retry.initial_interval,
        backoff_coefficient=retry.backoff_coefficient,
        maximum_interval=retry.maximum_interval,
        non_retryable_error_types=list(retry.non_retryable_error_types),
        local=tool.local and not at_most_once,  # see plan_calls
    )


def effect_of(verdict: PolicyVerdict) -> Effect:
    """What a verdict makes of a call, comparable with another's."""
    if verdict.outcome != "approve":
        return Effect(outcome=verdict.outcome)
    return Effect(outcome="approve", approvers=sorted(verdict.approvers), quorum=verdict.quorum)


def _disagreement(
    active: PolicyVerdict | None,
    candidate: PolicyVerdict | None,
    tool_approvers: Sequence[str],
    own_gated: Callable[[], bool],
) -> PolicyDisagreement | None:
    """The disagreement of the candidate's verdict with the active one's, or `None`.

    A side that no policy decided is the tool's own `needs_approval`; when
    that raises, the call fails whatever the candidate says: nothing to compare.
    """

    def effect(verdict: PolicyVerdict | None) -> Effect:
        if verdict is not None:
            return effect_of(verdict)
        if own_gated():
            return Effect(outcome="approve", approvers=sorted(tool_approvers))
        return Effect(outcome="run")

    try:
        mine, theirs = effect(active), effect(candidate)
    except Exception:
        return None
    if mine == theirs:
        return None
    return PolicyDisagreement(candidate=candidate, active=mine, shadow=theirs)


def _denial(call: ToolCall, verdict: PolicyVerdict) -> Failure:
    """The `Failure` the model reads for a call its policy denies."""
    reason = f"denied by policy {verdict.policy!r} (rule {verdict.rule or 'default'})"
    if verdict.reason:
        reason += f": {verdict.reason}"
    return failed(call, "denied", reason + "; the tool did not run")


def _one_line(exc: ValidationError) -> str:
    """A pydantic ValidationError as one line: `loc: message` per error."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['msg']}"
        for error in exc.errors()
    )
