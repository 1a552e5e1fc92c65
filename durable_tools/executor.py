"""Executing tool calls: preparation, one attempt of a run, and the events.

`prepare_call` and `execute_prepared` are the single-call building blocks
shared by `Toolkit.run` (plain asyncio) and the durable loop's tool activity,
so a call is validated and its output encoded the same way everywhere.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES, ArgumentsError
from durable_tools.results import (
    Failure,
    Ok,
    ToolCall,
    execution_error,
    failed,
    timed_out,
)
from durable_tools.schema import SchemaViolation
from durable_tools.tools import Emit, Tool, ToolContext, ToolFailure

if TYPE_CHECKING:
    from durable_tools.toolkit import Toolkit

__all__ = [
    "ApprovalRequested",
    "Output",
    "PreparedCall",
    "Progress",
    "ToolEvent",
    "execute_prepared",
    "prepare_call",
]

_MAX_LISTED_NAMES = 50


@dataclass(frozen=True)
class Progress:
    """A progress event a run emitted while it works.

    Attributes:
        call_id: The call the event belongs to.
        tool: The tool name.
        event: The JSON-compatible value passed to `emit`.
    """

    call_id: str
    tool: str
    event: Any


@dataclass(frozen=True)
class Output:
    """The one result of a call.

    Attributes:
        result: `Ok` or `Failure`.
    """

    result: Ok | Failure


@dataclass(frozen=True)
class ApprovalRequested:
    """A call that needs a decision before it may run; it was not run.

    Attributes:
        call: The call waiting for approval.
        arguments_hash: The digest a decision must carry (see `call_digest`).
    """

    call: ToolCall
    arguments_hash: str


ToolEvent = Progress | Output | ApprovalRequested
"""What `Toolkit.run` yields."""


@dataclass(frozen=True)
class PreparedCall:
    """A call whose tool was found and whose arguments were validated.

    Attributes:
        call: The call.
        tool: The local tool that will run it.
        input: The decoded input passed to the run.
    """

    call: ToolCall
    tool: Tool
    input: Any


def prepare_call(
    toolkit: Toolkit, call: ToolCall, *, max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES
) -> PreparedCall | Failure:
    """Find a call's tool and validate its arguments. Never raises for model input.

    Args:
        toolkit: Where to find the tool.
        call: The call.
        max_argument_bytes: Size limit of the argument text (default 1 MiB).

    Returns:
        A `PreparedCall`, or a `Failure` of kind `unknown_tool` (the reason
        lists available names), `non_local_tool`, or `input_validation_error`
        (the reason gives JSON paths and messages).
    """
    found = toolkit.tools.get(call.name)
    if found is None:
        names = sorted(toolkit.tools)
        listed = ", ".join(names[:_MAX_LISTED_NAMES]) or "(none)"
        extra = len(names) - _MAX_LISTED_NAMES
        more = f" and {extra} more" if extra > 0 else ""
        return failed(
            call, "unknown_tool", f"no tool named {call.name!r}; available tools: {listed}{more}"
        )
    if not isinstance(found, Tool):
        return failed(
            call,
            "non_local_tool",
            f"{call.name!r} is a {found.kind} tool; it is not executed as a local tool call",
        )
    try:
        parsed = found.decode(call.arguments, max_bytes=max_argument_bytes)
    except (ArgumentsError, SchemaViolation) as exc:
        return failed(call, "input_validation_error", f"invalid arguments for {call.name}: {exc}")
    except Exception as exc:
        # A validator that itself fails (a custom pydantic validator raising
        # TypeError, an unresolvable `$ref`) must not crash the caller either.
        return failed(
            call,
            "input_validation_error",
            f"could not validate arguments for {call.name}: {type(exc).__name__}: {exc}",
        )
    return PreparedCall(call=call, tool=found, input=parsed)


def encode_result(prepared: PreparedCall, value: Any) -> Ok | Failure:
    """Encode a run's output with the tool's success schema.

    Returns:
        `Ok` with the encoded value, or Failure `output_validation_error`.
    """
    try:
        encoded = prepared.tool.encode_output(value)
    except Exception as exc:  # SchemaViolation, or a serializer that fails oddly
        detail = str(exc) if isinstance(exc, SchemaViolation) else f"{type(exc).__name__}: {exc}"
        return failed(
            prepared.call,
            "output_validation_error",
            f"the tool returned an invalid output: {detail}",
        )
    return Ok(call_id=prepared.call.call_id, tool=prepared.call.name, value=encoded)


async def execute_prepared(
    prepared: PreparedCall, *, context: ToolContext, emit: Emit, enforce_timeout: bool = True
) -> Ok | Failure:
    """Run one attempt of a prepared call and encode its output.

    Args:
        prepared: From `prepare_call`.
        context: The call's `ToolContext`.
        emit: Progress callback handed to the run.
        enforce_timeout: Apply `tool.timeout` here (the durable loop leaves it
            to Temporal's start-to-close timeout instead).

    Returns:
        `Ok`, or a `Failure`: `timed_out` (only when `tool.timeout` elapsed;
        a `TimeoutError` the run raises itself is an `execution_error`),
        `execution_error` (the exception type and message), the kind of a
        raised `ToolFailure`, or `output_validation_error`.

    Raises:
        asyncio.CancelledError: The surrounding task was cancelled.
        Exception: Whatever the run raised, when `tool.failure_mode == "raise"`.
    """
    tool, call = prepared.tool, prepared.call
    limit = tool.timeout if enforce_timeout else None
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            value = await tool.run(prepared.input, emit, context)
    except ToolFailure as exc:
        return failed(call, exc.kind, exc.reason)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # a real cancellation of the surrounding task
        # The run raised CancelledError on its own (e.g. from a library). Let through,
        # it would end the call without a result, and with failure_mode="raise" a
        # caller would mistake it for its own cancellation; so it is always a Failure.
        return execution_error(call, "CancelledError: the tool raised CancelledError")
    except Exception as exc:
        if isinstance(exc, TimeoutError) and deadline.expired():
            return timed_out(call, limit)
        return _raised(prepared, exc)
    return encode_result(prepared, value)


def _raised(prepared: PreparedCall, exc: Exception) -> Failure:
    if prepared.tool.failure_mode == "raise":
        raise exc
    return execution_error(prepared.call, f"{type(exc).__name__}: {exc}")
