"""Tool calls and tool results: the values that cross every boundary.

A model asks for a `ToolCall`; every call gets exactly one `ToolResult`, which is
`Ok` or `Failure`. Failures carry a `kind` the loop and the model can act on.
Results that no tool produced are *synthesized* with the helpers below, so that
a reader can tell apart a call that never started (`cancelled`) from one whose
outcome is unknown (`interrupted`: it may have run).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FAILURE_KINDS",
    "Failure",
    "Ok",
    "ToolCall",
    "ToolResult",
    "cancelled",
    "denied",
    "execution_error",
    "expired",
    "failed",
    "interrupted",
    "timed_out",
]

FAILURE_KINDS: Final[frozenset[str]] = frozenset(
    {
        "unknown_tool",
        "non_local_tool",
        "input_validation_error",
        "output_validation_error",
        "execution_error",
        "timed_out",
        "denied",
        "cancelled",
        "interrupted",
        "expired",
        "output_too_large",
    }
)
"""The failure kinds durable-tools itself produces; `failed` accepts others."""


class ToolCall(BaseModel):
    """One tool call requested by a model.

    Attributes:
        call_id: The provider's id for the call (`call_…`, `toolu_…`); unique in
            a conversation.
        name: The tool name the model asked for. It may name no tool at all.
        arguments: The arguments as the raw JSON text the model produced. It is
            kept raw so that a malformed argument string reaches the executor,
            which answers it with an `input_validation_error` Failure.
    """

    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str
    arguments: str = "{}"


class Ok(BaseModel):
    """A tool call that succeeded.

    Attributes:
        call_id: The id of the call this answers.
        tool: The tool name.
        value: The JSON-compatible output (already encoded with the tool's
            success schema, if it has one).
    """

    model_config = ConfigDict(frozen=True)

    status: Literal["ok"] = "ok"
    call_id: str
    tool: str
    value: Any = None


class Failure(BaseModel):
    """A tool call that did not succeed, in a form the model can act on.

    Attributes:
        call_id: The id of the call this answers.
        tool: The tool name (as the model sent it, even if unknown).
        kind: Why: one of `FAILURE_KINDS` or an application-defined kind.
        reason: A human- and model-readable explanation, e.g. the JSON path and
            message of a schema violation.
    """

    model_config = ConfigDict(frozen=True)

    status: Literal["failure"] = "failure"
    call_id: str
    tool: str
    kind: str
    reason: str


ToolResult = Annotated[Ok | Failure, Field(discriminator="status")]
"""`Ok | Failure`, discriminated by `status` so it round-trips through JSON."""


def failed(call: ToolCall, kind: str, reason: str) -> Failure:
    """Build a `Failure` of any kind (including application-defined kinds).

    Args:
        call: The call being answered.
        kind: The failure kind, e.g. `"rate_limited"`.
        reason: What happened, phrased so the model can act on it.

    Returns:
        A `Failure` bound to `call.call_id` and `call.name`.
    """
    return Failure(call_id=call.call_id, tool=call.name, kind=kind, reason=reason)


def denied(call: ToolCall, reason: str = "a person denied this tool call") -> Failure:
    """A person (or policy) said no; the tool never ran.

    Args:
        call: The call being answered.
        reason: Why, phrased for the model (e.g. the decider's comment).

    Returns:
        A `Failure` of kind `denied`.
    """
    return failed(call, "denied", reason)


def cancelled(call: ToolCall, reason: str = "cancelled before it started") -> Failure:
    """The call never started and never will; it had no effect.

    Args:
        call: The call being answered.
        reason: Why it was cancelled.

    Returns:
        A `Failure` of kind `cancelled`.
    """
    return failed(call, "cancelled", reason)


def interrupted(
    call: ToolCall, reason: str = "interrupted while running; it may have taken effect"
) -> Failure:
    """The call started but its outcome is unknown: it may have run.

    Tell the model so it can check before retrying a non-idempotent action.

    Args:
        call: The call being answered.
        reason: What is known about the interruption.

    Returns:
        A `Failure` of kind `interrupted`.
    """
    return failed(call, "interrupted", reason)


def expired(call: ToolCall, reason: str = "the approval deadline passed") -> Failure:
    """Nobody decided on the approval before its deadline; the tool never ran.

    Args:
        call: The call being answered.
        reason: Which deadline passed.

    Returns:
        A `Failure` of kind `expired`.
    """
    return failed(call, "expired", reason)


def execution_error(call: ToolCall, reason: str) -> Failure:
    """The tool raised (after any retries).

    Args:
        call: The call being answered.
        reason: The exception type and message, e.g. `"KeyError: 'id'"`.

    Returns:
        A `Failure` of kind `execution_error`.
    """
    return failed(call, "execution_error", reason)


def timed_out(call: ToolCall, seconds: float | None = None) -> Failure:
    """The tool did not finish within its timeout.

    Args:
        call: The call being answered.
        seconds: The timeout that elapsed, if known (seconds).

    Returns:
        A `Failure` of kind `timed_out`.
    """
    what = f" within {seconds:g} s" if seconds is not None else ""
    return failed(call, "timed_out", f"the tool did not finish{what}")
