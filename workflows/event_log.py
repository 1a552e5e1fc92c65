"""The conversation's event stream, its items kept as their serialized payloads.

Temporal's `WorkflowStream` (`temporalio.contrib.workflow_streams`) keeps
each item of its log as a `Payload` message for the life of the run (until
`truncate`, which the loop calls at continue-as-new). A `Payload` built in
Python holds its own protobuf arena and, for the `encoding` metadata every
event carries, a map: measured 1.66 KB of memory per event of 124 bytes,
against about 0.25 KB for the same bytes. A conversation of five tool turns
publishes about 25 events; with them kept as bytes, 2,000 such
conversations at once on one worker (1,000 cached) peaked at 395 MB where
they had peaked at 423 MB (issue 26, item 4; docs/operations.md, the fourth
whole run under "Worker CPU per tool call").

`EventStream` is a `WorkflowStream` whose log holds `StoredPayload`s: the
payload's wire bytes, which is all the stream does with an item (its size
for a poll's page, its bytes for a poll, a query and the state carried at
continue-as-new). Events the loop publishes are encoded straight to those
bytes (`event_payload`), and items published by signal (activities' events)
or carried from the previous run are kept the same way once the stream
decoded them. Nothing here reaches history: the log is memory, rebuilt by
replay.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, Final, cast

from pydantic import TypeAdapter, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import (
    PublishEntry,
    PublishInput,
    WorkflowStream,
    WorkflowStreamItem,
    WorkflowStreamState,
)

__all__ = ["EventStream", "StoredPayload", "event_payload"]

_JSON_PLAIN_METADATA: Final[bytes] = Payload(
    metadata={"encoding": b"json/plain"}
).SerializeToString()
"""A `Payload`'s `metadata` field (number 1) holding `encoding: json/plain`, encoded."""

_DATA_TAG: Final[bytes] = b"\x12"
"""The key of a `Payload`'s `data` field: number 2, length-delimited."""


class StoredPayload:
    """A `Payload` kept as its wire bytes: what the stream's log needs of one.

    `WorkflowStream` asks an item's payload for `ByteSize()` (a poll page's
    size bound) and `SerializeToString()` (polls, queries, the state carried
    at continue-as-new); nothing else.
    """

    __slots__ = ("wire",)

    def __init__(self, wire: bytes) -> None:
        """Keep `wire`: a serialized `temporal.api.common.v1.Payload`."""
        self.wire = wire

    def ByteSize(self) -> int:  # noqa: N802 (protobuf's name)
        """The serialized size in bytes, as `Payload.ByteSize`."""
        return len(self.wire)

    def SerializeToString(self, **_: Any) -> bytes:  # noqa: N802 (protobuf's name)
        """The wire bytes, as `Payload.SerializeToString`."""
        return self.wire

    def to_payload(self) -> Payload:
        """The `Payload` message these bytes encode (a new one each call)."""
        return Payload.FromString(self.wire)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def event_payload(data: bytes) -> StoredPayload:
    """`Payload(metadata={"encoding": b"json/plain"}, data=data)`, encoded without building it.

    Args:
        data: The JSON document (UTF-8), as the pydantic converter writes it.

    Returns:
        Its `StoredPayload`: parsing its bytes gives that `Payload`.
    """
    if not data:  # proto3 leaves an empty field out
        return StoredPayload(_JSON_PLAIN_METADATA)
    return StoredPayload(_JSON_PLAIN_METADATA + _DATA_TAG + _varint(len(data)) + data)


def _stored(item: WorkflowStreamItem[Any]) -> WorkflowStreamItem[Payload]:
    data = item.data
    if not isinstance(data, StoredPayload):
        data = StoredPayload(cast("Payload", data).SerializeToString())
    return WorkflowStreamItem(topic=item.topic, data=cast("Payload", data))


class EventStream(WorkflowStream):
    """A `WorkflowStream` whose log keeps each item as a `StoredPayload` (see the module).

    Built, as its base, directly from the workflow's `__init__` (here, by
    `Visibility.__init__`, which the workflow's `__init__` calls): the base
    checks only that its caller is an `__init__`.
    """

    def __init__(self, prior_state: WorkflowStreamState | None = None) -> None:
        """Register the stream's handlers and keep the carried items compact."""
        super().__init__(prior_state)
        self._log = [_stored(item) for item in self._log]

    def publish_stored(self, topic: str, payload: StoredPayload) -> None:
        """Append `payload` on `topic` as it is: no converter, no `Payload` built."""
        self._log.append(WorkflowStreamItem(topic=topic, data=cast("Payload", payload)))

    def _publish_to_topic(self, topic: str, value: Any) -> None:
        """Append `value` (a `StoredPayload` as is; anything else as the base converts it)."""
        if isinstance(value, StoredPayload):
            self.publish_stored(topic, value)
            return
        start = len(self._log)
        super()._publish_to_topic(topic, value)
        self._log[start:] = [_stored(item) for item in self._log[start:]]

    def _on_publish(self, *args: Any) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        """The base's signal handler (deduplicated batches), for any input; items kept compact.

        Anyone who may signal the conversation may publish, so the input is
        checked here (the SDK is given no type to decode it to): a batch
        that is not a `PublishInput` is dropped, and so is an item whose
        data is not a base64 `Payload`; the batch's other items are kept.
        A signal in the run's first activation is handled before
        `__init__` registered this handler, so the SDK decodes it for the
        workflow's dynamic signal handler and calls this one with the
        signal's name and raw values (measured, temporalio 1.35: the
        base's handler then raised `TypeError` and failed the workflow
        task); both shapes are read.
        """
        checked = _publish_batch(args)
        if checked is None:
            workflow.logger.warning("dropped a stream publish signal: its input is not a batch")
            return
        batch, wires = checked
        start = len(self._log)
        super()._on_publish(batch)  # appends the whole batch, or nothing (a duplicate)
        self._log[start:] = [
            WorkflowStreamItem(topic=item.topic, data=cast("Payload", StoredPayload(wire)))
            for item, wire in zip(self._log[start:], wires, strict=False)  # none: a duplicate
        ]


_PUBLISH_INPUT: Final = TypeAdapter(PublishInput)


def _publish_batch(args: Sequence[Any]) -> tuple[PublishInput, list[bytes]] | None:
    """The signal's `PublishInput` with only its decodable items, and their wire bytes.

    Returns:
        The batch and, item by item, the `Payload` bytes its data encodes;
        None when the input is no batch.
    """
    if len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], Sequence):
        raws = cast("Sequence[Any]", args[1])  # the dynamic handler's arguments (see above)
        if len(raws) != 1 or not isinstance(raws[0], RawValue):
            return None
        try:
            value = workflow.payload_converter().from_payload(raws[0].payload)
        except Exception:  # noqa: BLE001 (any payload anyone sent)
            return None
    elif len(args) == 1:
        value = args[0]
    else:
        return None
    try:
        batch = _PUBLISH_INPUT.validate_python(value)
    except ValidationError:
        return None
    decoded = [(item, _wire(item)) for item in batch.items]
    batch.items = [item for item, wire in decoded if wire is not None]
    return batch, [wire for _, wire in decoded if wire is not None]


def _wire(entry: PublishEntry) -> bytes | None:
    """The `Payload` bytes `entry.data` encodes in base64, or None when it does not."""
    try:
        wire = base64.b64decode(entry.data, validate=True)
    except ValueError:  # binascii.Error: not base64
        return None
    try:
        Payload.FromString(wire)
    except Exception:  # noqa: BLE001 (protobuf's DecodeError: not a Payload)
        return None
    return wire
