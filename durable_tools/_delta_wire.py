"""Private wire types of the transcript delta a model request carries (re-exported by `_wire`).

Apart from `_wire.py` by concern: what the workflow tells the model activity
of the items appended since its previous model turn, mostly by reference.
Recorded in workflow history: fields may be added, never renamed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer

from durable_tools._tool_wire import without_nones
from durable_tools.transcript import TranscriptItem

__all__ = ["DeltaEntry", "TranscriptDelta"]


class DeltaEntry(BaseModel):
    """One item of a `TranscriptDelta`: the item itself, or where the worker finds it.

    Exactly one field is set (the others are left out when recorded).

    Attributes:
        item: The item, for what no activity returned (user messages,
            outputs the workflow made: denials, expiries, signal tools).
        turn: The assistant message the model activity returned for this
            model turn (from 1).
        call_id: The output of this call, as its tool activity returned it.
    """

    item: TranscriptItem | None = None
    turn: int | None = None
    call_id: str | None = None

    @model_serializer(mode="wrap")
    def _set_field_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The two `None`s decode back from their absence.
        return without_nones(handler(self), ("item", "turn", "call_id"))


class TranscriptDelta(BaseModel):
    """The items appended since the previous model turn of the run, mostly by reference.

    A worker that holds the run's items `[0, start)` with digest
    `start_digest` (`durable_tools.transcript_digest`) and remembers what
    its own activities returned rebuilds items `[start, start + len(entries))`
    without a query; it uses them only when the whole prefix then has
    `digest`, and reads with the `transcript_slice` query otherwise.

    Attributes:
        start: Index of the first item of the delta.
        start_digest: Digest of items `[0, start)`.
        entries: One entry per item.
        digest: Digest of items `[0, start + len(entries))`.
    """

    start: int
    start_digest: str
    entries: list[DeltaEntry]
    digest: str
