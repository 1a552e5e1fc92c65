"""Private wire types of the `tool.<name>` activities: their input, their result, their limits.

Part of `durable_tools._wire` (which re-exports every name here), apart
because the tool activity's side (`activities/tool_activity.py`,
`workflows/tool_activity.py`) needs nothing of the model turn's or the
carried state's types. Recorded in workflow history like the rest: fields
may be added, never renamed, as long as recorded histories still decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from durable_tools.input_requests import InputRequired, InputResume
from durable_tools.results import ToolCall, ToolResult
from durable_tools.tool_tasks import TaskState

__all__ = [
    "LOCAL_RESULT_BYTES",
    "MAX_LOCAL_CALLS_PER_TURN",
    "PAYLOAD_BUDGET_BYTES",
    "RECORD_CONFIG",
    "TOOL_ACTIVITY_PREFIX",
    "CallReference",
    "ToolActivityInput",
    "ToolActivityResult",
]

RECORD_CONFIG: Final = ConfigDict(cache_strings="keys")
"""Configuration of the records decoded at every turn (activity inputs and
results, the workflow's input): pydantic keeps the keys of their JSON in its
string cache, not the values.

The cache (pydantic-core's, process-wide: 16,384 strings of up to 64
characters, never emptied) otherwise fills with the run ids, workflow ids,
idempotency keys and digests of the conversations a worker served; the ones
decoded during a burst outlive it and hold their allocator pages (measured
with `bench/scale.py`, `SCALE_WORKER_CENSUS`: docs/operations.md, "Memory
after a burst"). The mode of the outermost type decides for the whole
payload, nested models included.
"""


def without_nones(dumped: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """`dumped` without those of `names` whose value is `None` (each decodes back to `None`).

    For a record's `model_serializer`: a field left out when `None` must
    default to `None` in every version that reads the record.
    """
    for name in names:
        if name in dumped and dumped[name] is None:
            del dumped[name]
    return dumped


TOOL_ACTIVITY_PREFIX: Final[str] = "tool."
"""Tool activities are named `tool.<tool name>`."""

PAYLOAD_BUDGET_BYTES: Final[int] = 1_500_000
"""Bytes of JSON a tool result, or a model turn's arguments, may take in one
payload: well below Temporal's 2 MiB payload limit, which leaves room for
the rest of the event."""

LOCAL_RESULT_BYTES: Final[int] = 64 * 1024
"""Bytes of JSON a local tool's result may take (`Tool.local`: a Temporal
local activity). Local activity results are recorded as markers in the
workflow task's completion, one gRPC message that Temporal refuses over
4 MB; with `MAX_LOCAL_CALLS_PER_TURN` a turn's markers stay under 2 MiB."""

MAX_LOCAL_CALLS_PER_TURN: Final[int] = 32
"""Calls of one model turn that run as local activities; the turn's further
calls of local tools run as ordinary activities (see `LOCAL_RESULT_BYTES`)."""


class CallReference(BaseModel):
    """A tool call named without its arguments (`ToolActivityInput.reference`).

    Attributes:
        call_id: The call's id.
        name: The tool name.
        digest: `durable_tools.approvals.call_digest(name, call_id, arguments)`,
            the planned call's `arguments_hash`: arguments found elsewhere are
            used only when they have this digest.
    """

    call_id: str
    name: str
    digest: str


class ToolActivityInput(BaseModel):
    """Input of a tool activity (activity type `tool.<name>`).

    Attributes:
        toolkit: Registered toolkit name.
        call: The call.
        workflow_id: The conversation's workflow id.
        idempotency_key: `"{workflow_id}/{call_id}"`, stable across retries,
            worker restarts and continue-as-new.
        max_result_bytes: Results larger than this (JSON bytes) become Failure
            `output_too_large` instead of an oversized payload.
        reference: The call without its arguments, set instead of `call`: the
            arguments are recorded once, in the model turn's result, and the
            activity takes them from what its worker planned or from the
            `tool_call` query, checked against `reference.digest`.
        resume: Answers to what the call's previous activity asked, with its
            exact `requestState` (`ToolContext.resume`). Left out otherwise.

    Exactly one of `call` and `reference` is set (the other is left out
    when recorded). The call's `tool(arg=…)`
    summary is the activity's summary (user metadata), not part of its input
    (inputs recorded for a while held a copy as `summary`: ignored when read).
    """

    model_config = RECORD_CONFIG

    toolkit: str
    call: ToolCall | None = None
    workflow_id: str
    idempotency_key: str
    max_result_bytes: int = PAYLOAD_BUDGET_BYTES
    reference: CallReference | None = None
    resume: InputResume | None = None

    @model_serializer(mode="wrap")
    def _without_resume(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The one of `call` and `reference` not set; `resume` mostly.
        return without_nones(handler(self), ("call", "reference", "resume"))


class ToolActivityResult(BaseModel):
    """Result of a tool activity: exactly one tool result, or what the call asks.

    Attributes:
        result: `Ok` or `Failure`; `None` exactly when `input_required` is set.
        attempt: The activity attempt that produced it (1-based; 1 in
            histories recorded before the field existed).
        input_required: What the call asks first (an MCP input-required
            result); the loop asks, then retries. Left out otherwise.
        task: The task the call runs as (MCP Tasks): the loop polls it.
            Left out otherwise.
    """

    model_config = RECORD_CONFIG

    result: ToolResult | None = None
    attempt: int = 1
    input_required: InputRequired | None = None
    task: TaskState | None = None

    @model_serializer(mode="wrap")
    def _without_input(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_nones(handler(self), ("input_required", "task"))
