"""The inputs of `AgentWorkflow`'s dynamic handlers, decoded without ever failing a task.

Handlers that take input are dynamic: the SDK hands over raw payloads, which
never fail to decode, and `durable_tools.handler_input.decode_input` decodes
them here, so no input (none, several, any encoding, any shape) fails a
workflow task (DESIGN.md invariant 7).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from durable_tools.approvals import Decision
    from durable_tools.budgets import BudgetRaise
    from durable_tools.conversation import CANCELLED_BY, Answer, Resume, SendMessage
    from durable_tools.events import MAX_EVENT_TEXT
    from durable_tools.grants import GrantRevocation
    from durable_tools.handler_input import Undecodable, clean_sender, clean_text, decode_input
    from durable_tools.policy_document import PolicyChange

__all__ = [
    "MAX_NAME_CHARS",
    "SIGNAL_INPUTS",
    "SignalInput",
    "UPDATE_INPUTS",
    "after_turns",
    "cancellation",
    "decoded_signal",
    "decoded_update",
    "received_message",
    "requested_by",
    "unknown_query",
    "text_argument",
]

MAX_NAME_CHARS = 100
"""Characters of a client-sent name (handler, call id) kept in a message, log line or summary."""

SignalInput = (
    Decision | Answer | SendMessage | Resume | BudgetRaise | PolicyChange | GrantRevocation
)
"""What a routed signal's input decodes to."""

SIGNAL_INPUTS: dict[str, tuple[type[SignalInput], Any]] = {
    "decide": (Decision, None),
    "answer": (Answer, None),
    "send": (SendMessage, None),
    "resume": (Resume, Resume()),
    "raise_budget": (BudgetRaise, None),
    "set_policy": (PolicyChange, None),
    "revoke_grant": (GrantRevocation, None),
}
"""The signals the dynamic signal handler routes: each one's input model and default."""

UPDATE_INPUTS: dict[str, tuple[type[Decision | Answer | Resume], Any, str]] = {
    "decide_now": (Decision, None, "DecisionRejected"),
    "answer_now": (Answer, None, "DecisionRejected"),
    "resume_now": (Resume, Resume(), "ResumeRejected"),
}
"""The updates the dynamic update handler routes: each one's input model, its
default (for no input) and the error type its rejections carry."""


def decoded_signal(
    name: str, args: Sequence[RawValue], reject: Callable[[str, str, str, str], None]
) -> SignalInput | None:
    """The input of signal `name`, or `None` when there is none to act on.

    A signal of a name not in `SIGNAL_INPUTS` is logged and ignored; an
    input that cannot be decoded into the signal's model is logged and
    recorded by `reject(call_id, reason, sent_by, signal)`.
    """
    if name not in SIGNAL_INPUTS:
        workflow.logger.warning(
            "ignoring signal %r: no such signal", clean_text(name, MAX_NAME_CHARS)
        )
        return None
    model, default = SIGNAL_INPUTS[name]
    decoded = decode_input(args, model, workflow.payload_converter(), default=default)
    if isinstance(decoded, Undecodable):
        reason = f"undecodable {name} signal: {decoded.reason}"
        reject(decoded.call_id, reason, decoded.sent_by, name)
        workflow.logger.warning("rejected a %s signal: %s", name, decoded.reason)
        return None
    return decoded


def unknown_query(name: str) -> ApplicationError:
    """The error a query of a name `AgentWorkflow` does not have fails with (not the workflow)."""
    return ApplicationError(
        f"no query named {clean_text(name, MAX_NAME_CHARS)!r}; known queries: "
        "agent_config, followed, history, pending, policy_version, status, tool_call, "
        "transcript_slice",
        type="UnknownQuery",
    )


def decoded_update(name: str, args: Sequence[RawValue]) -> Decision | Answer | Resume:
    """The update's input, or `ApplicationError` saying why not.

    Raises:
        ApplicationError: Type `UnknownUpdate` for a name not in
            `UPDATE_INPUTS`; for an input that does not decode, the update's
            rejection type (`DecisionRejected`, `ResumeRejected`).
    """
    if name not in UPDATE_INPUTS:
        known = ", ".join(sorted(UPDATE_INPUTS))
        raise ApplicationError(
            f"no update named {clean_text(name, MAX_NAME_CHARS)!r}; known updates: {known}",
            type="UnknownUpdate",
            non_retryable=True,
        )
    model, default, rejected = UPDATE_INPUTS[name]
    decoded = decode_input(args, model, workflow.payload_converter(), default=default)
    if isinstance(decoded, Undecodable):
        raise ApplicationError(
            f"undecodable {name} update: {decoded.reason}", type=rejected, non_retryable=True
        )
    return decoded


def after_turns(args: Sequence[Any]) -> int:
    """`after_turns` of an `await_turn` input, 0 for anything else."""
    first: Any = args[0] if args else None
    fields = cast(dict[str, Any], first) if isinstance(first, dict) else {}
    value = fields.get("after_turns")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def received_message(message: SendMessage) -> SendMessage:
    """A decoded `send` input as the workflow keeps it: its sender cleaned (`clean_sender`)."""
    sender = clean_sender(message.sent_by)
    return message if sender == message.sent_by else message.model_copy(update={"sent_by": sender})


def requested_by(args: Sequence[Any]) -> str:
    """`requested_by` of a `retry` / `retry_now` input (a `RetryRequest`), cleaned; else `""`."""
    first: Any = args[0] if args else None
    fields = cast(dict[str, Any], first) if isinstance(first, dict) else {}
    return clean_sender(fields.get("requested_by"))


def cancellation() -> tuple[str, str]:
    """Who cancelled the conversation, and the cancel request's reason, both cleaned.

    From the reason Temporal recorded with the cancel request
    (`workflow.cancellation_reason()`, the same on every replay): the sender
    when it reads `cancelled by NAME` (`Conversations.cancel(...,
    cancelled_by=...)`), else `""`; `("", "")` when the request gave no
    reason (older clients, `temporal workflow cancel`) or the workflow was
    not cancelled.
    """
    # Outside a workflow (the loop's pieces tested alone) nothing was recorded.
    reason = (workflow.cancellation_reason() or "") if workflow.in_workflow() else ""
    sender = clean_sender(reason[len(CANCELLED_BY) :]) if reason.startswith(CANCELLED_BY) else ""
    return sender, clean_text(reason, MAX_EVENT_TEXT)


def text_argument(args: Sequence[RawValue]) -> str:
    """The one string argument of a query, `""` for anything else (never raises)."""
    if len(args) != 1:
        return ""
    try:
        value: Any = workflow.payload_converter().from_payload(args[0].payload, str)
    except Exception:
        return ""
    return value if isinstance(value, str) else ""
