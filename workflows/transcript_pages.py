"""The transcript a run holds, as its queries and the model turn's delta read it (pure).

A run holds the conversation's items from index `base` on (older ones are in
earlier runs, `durable_tools.carry`). `transcript_slice` and `transcript_page`
answer the `transcript_slice` query (a list for older callers, a
`TranscriptPage` for callers that name the digest they hold);
`transcript_delta` is what a model turn's request carries of the items since
the previous turn. Digests and sizes come from `PrefixDigests`, memoized per
item, so each costs what it returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from durable_tools.conversation import (
        DeltaEntry,
        RunSpan,
        TranscriptDelta,
        TranscriptPage,
        TranscriptSlice,
    )
    from durable_tools.handler_input import Undecodable, decode_input
    from durable_tools.transcript import TranscriptItem
    from durable_tools.transcript_digest import PrefixDigests

__all__ = [
    "DEFAULT_PAGE_BYTES",
    "MAX_DELTA_INLINE_BYTES",
    "transcript_delta",
    "transcript_page",
    "transcript_slice",
    "transcript_slice_request",
]

DEFAULT_PAGE_BYTES = 1_000_000
"""The page an undecodable `transcript_slice` argument gets; the client pages by
the same size (Temporal's query results are limited to about 2 MB)."""

MAX_DELTA_INLINE_BYTES = 64 * 1024
"""A `TranscriptDelta` gives at most this many bytes of items whole (user
messages, outputs the workflow made); past it the model activity queries."""


def transcript_slice_request(args: Sequence[RawValue], base: int, length: int) -> TranscriptSlice:
    """The `transcript_slice` query's argument; the first page for one that does not decode."""
    request = decode_input(args, TranscriptSlice, workflow.payload_converter())
    if isinstance(request, Undecodable):
        return TranscriptSlice(start=base, upto=length, max_bytes=DEFAULT_PAGE_BYTES)
    return request


def transcript_slice(
    transcript: Sequence[TranscriptItem], base: int, request: TranscriptSlice
) -> list[TranscriptItem]:
    """Items `start` to `upto` (conversation-wide indices) of a run's, paged by `max_bytes`.

    None when `start` is before the run's `base` (those items are in
    earlier runs, which only a `TranscriptPage` names).
    """
    if request.start < base:
        return []
    items = list(transcript[request.start - base : request.upto - base])
    if request.max_bytes is not None:
        size = 0
        for n, item in enumerate(items):
            size += len(item.model_dump_json().encode())  # bytes, not characters
            if n and size > request.max_bytes:
                return items[:n]
    return items


def transcript_page(
    transcript: Sequence[TranscriptItem],
    memo: PrefixDigests,
    base: int,
    earlier: Sequence[RunSpan],
    request: TranscriptSlice,
) -> TranscriptPage:
    """Only what the caller lacks: the items after the prefix whose digest it holds.

    Items `start` to `upto` (conversation-wide indices, paged by
    `max_bytes`) when the caller's `known_digest` is the digest of the
    conversation's items `[0, start)` (or is `""`: unchecked), else none
    (`matched=False`). A `start` before the run's `base` gets none either,
    with the earlier runs that hold those items (`earlier`).
    """
    length = base + len(transcript)
    start = request.start - base
    if start < 0:
        return TranscriptPage(matched=False, length=length, base=base, earlier=list(earlier))
    if start > len(transcript):
        return TranscriptPage(matched=False, length=length, base=base)
    digest = memo.digest(transcript, start)
    if request.known_digest and digest != request.known_digest:
        return TranscriptPage(matched=False, digest=digest, length=length, base=base)
    end, size = start, 0
    stop = max(start, min(request.upto - base, len(transcript)))
    while end < stop:
        size += memo.size(transcript, end)
        if end > start and request.max_bytes is not None and size > request.max_bytes:
            break
        end += 1
    return TranscriptPage(
        matched=True,
        items=list(transcript[start:end]),
        digest=memo.digest(transcript, end),
        length=length,
        base=base,
    )


def transcript_delta(
    transcript: Sequence[TranscriptItem],
    memo: PrefixDigests,
    base: int,
    start: int | None,
    sources: Mapping[int, DeltaEntry],
) -> TranscriptDelta | None:
    """The items from `start` (an index into the run's items) on, by reference where possible.

    `sources[index]` names an item an activity returned (the worker holds
    it); other items are given whole. `None` when a delta would record much
    that history already holds (items given whole over
    `MAX_DELTA_INLINE_BYTES`) or there is none to give (`start` `None`, or
    past the end): the activity then queries.
    """
    end = len(transcript)
    if start is None or start > end:
        return None
    entries: list[DeltaEntry] = []
    inline = 0
    for index in range(start, end):
        source = sources.get(index)
        if source is None:
            inline += memo.size(transcript, index)
            if inline > MAX_DELTA_INLINE_BYTES:
                return None
            source = DeltaEntry(item=transcript[index])
        entries.append(source)
    return TranscriptDelta(
        start=base + start,  # conversation-wide, as the worker's cache
        start_digest=memo.digest(transcript, start),
        entries=entries,
        digest=memo.digest(transcript, end),
    )
