"""External storage references a client sends cannot wedge a conversation.

Temporal's SDK fetches every external storage reference in a workflow
activation (`temporalio.converter.ExternalStorage`) before workflow code runs.
A reference that cannot be fetched (an unknown driver, a malformed or forged
claim, a missing object, or any reference on a worker without external
storage: the SDK's `[TMPRL1105]`) fails the workflow task, and Temporal retries
it forever. Any client may put such a payload in a signal or an update, so one
bad `decide` would wedge the conversation (DESIGN.md, invariant 7).

`GuardedDataConverter`, which `DurableToolsPlugin` installs, replaces each
reference it cannot fetch *while decoding an activation* by a payload of
encoding `UNREADABLE_ENCODING` carrying the reason. Workflow code then sees an
undecodable input: a signal or update becomes a recorded rejection; a result
or the workflow's own input fails to decode in workflow code, which fails the
workflow task just as the SDK would (retried, so an object that comes back is
read). Everywhere else (`DataConverter.decode`: clients, queries, activity
inputs) it raises as the SDK does.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter

__all__ = ["UNREADABLE_ENCODING", "GuardedDataConverter", "guarded"]

UNREADABLE_ENCODING: Final[bytes] = b"durable-tools/unreadable-external-payload"
"""Encoding of the payload that stands for a reference that could not be fetched."""

_MAX_REASON_BYTES = 500

_strict: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "durable_tools_strict_decode", default=False
)

_Step = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


@dataclass(frozen=True)
class GuardedDataConverter(DataConverter):
    """A `DataConverter` whose activation decoding never fails on a reference.

    See the module docstring. `decode` (what clients and activities use)
    raises as `DataConverter.decode` does.
    """

    async def decode(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        """Decode like `DataConverter.decode`: a reference that cannot be fetched raises."""
        token = _strict.set(True)
        try:
            return await super().decode(payloads, type_hints)
        finally:
            _strict.reset(token)

    async def _decode_reference_payload_sequence(
        self, payloads: Sequence[Payload]
    ) -> list[Payload]:
        return await _guard(super()._decode_reference_payload_sequence, payloads)

    async def _external_retrieve_payload_sequence(
        self, payloads: Sequence[Payload]
    ) -> list[Payload]:
        return await _guard(super()._external_retrieve_payload_sequence, payloads)


async def _guard(step: _Step, payloads: Sequence[Payload]) -> list[Payload]:
    try:
        return await step(payloads)
    except Exception:
        if _strict.get():
            raise
    # One at a time: only the payloads that fail are replaced.
    out: list[Payload] = []
    for payload in payloads:
        try:
            out.extend(await step([payload]))
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}".encode(errors="replace")
            out.append(
                Payload(metadata={"encoding": UNREADABLE_ENCODING}, data=reason[:_MAX_REASON_BYTES])
            )
    return out


def guarded(converter: DataConverter) -> DataConverter:
    """`converter` as a `GuardedDataConverter`, its parts kept.

    A subclass of `DataConverter` other than this one is returned as it is
    (its own overrides are not ours to drop).
    """
    if type(converter) is not DataConverter:
        return converter
    return GuardedDataConverter(
        payload_converter_class=converter.payload_converter_class,
        payload_codec=converter.payload_codec,
        failure_converter_class=converter.failure_converter_class,
        external_storage=converter.external_storage,
    )
