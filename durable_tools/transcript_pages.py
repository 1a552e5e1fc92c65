"""Reading a conversation's transcript in pages, across the runs that hold it.

The `transcript_slice` query takes a `TranscriptSlice` and, when the caller
sends `known_digest`, answers a `TranscriptPage`: items paged under
Temporal's 2 MB query-result limit, checked against the caller's digest of
what it already holds, and the earlier runs (`RunSpan`) that hold items a
run continued as new no longer carries. Re-exported by
`durable_tools.conversation`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from durable_tools.transcript import TranscriptItem

__all__ = ["RunSpan", "TranscriptPage", "TranscriptSlice"]


class TranscriptSlice(BaseModel):
    """Argument of the `transcript_slice` query the model activity uses.

    Attributes:
        upto: Transcript items `[start, upto)` are returned.
        start: First item to return (default 0).
        max_bytes: Page size: return only as many items from `start` as fit
            in this many bytes of JSON (at least one), so a transcript over
            Temporal's 2 MB query-result limit is read in pages. `None`: all.
        known_digest: The digest of items `[0, start)` the caller already
            holds (`durable_tools.transcript_digest`; `EMPTY_DIGEST` for
            `start=0`). When set, the answer is a `TranscriptPage` (the items
            only if the workflow's prefix has this digest) instead of a list;
            `""`: a `TranscriptPage` whatever the prefix (a reader that holds
            nothing before `start`, e.g. `Conversations.history`); `None`
            (the default, what older callers send): a list, empty when
            `start` is before the run's `base`.

    `start` and `upto` are conversation-wide indices: a run continued as new
    holds items from its `base` on (`TranscriptPage.base`).
    """

    upto: int
    start: int = 0
    max_bytes: int | None = None
    known_digest: str | None = None


class RunSpan(BaseModel):
    """An earlier run of a conversation and the first transcript item it holds.

    Attributes:
        run_id: The run's id (a closed run: a worker replays it to answer
            `transcript_slice`).
        base: The conversation-wide index of the first item it holds; it
            holds every item up to the next run's `base` (and a few more).
    """

    run_id: str
    base: int = Field(ge=0)


class TranscriptPage(BaseModel):
    """Answer of `transcript_slice` to a caller that sent `known_digest`.

    Attributes:
        matched: Whether the workflow's items `[0, start)` have the caller's
            `known_digest` (always, for `known_digest=""`). When not,
            `items` is empty: with `start < base` the caller asks an earlier
            run (`earlier`), else its copy is stale (another conversation
            with this workflow id, or a bug) and it reads again from 0.
        items: Items from `start`, paged by `max_bytes` (at least one item
            when any is asked for and `matched`).
        digest: The digest of items `[0, start + len(items))` when `matched`,
            else of `[0, start)` (`""` when `start` is past the transcript).
        length: How many items the conversation's transcript has now (over
            every run).
        base: The conversation-wide index of the first item this run holds;
            the items before it are in earlier runs (0 in runs recorded
            before continue-as-new carried a bounded tail).
        earlier: When `start < base` (then `matched` is False): the earlier
            runs that hold the items before `base`, oldest first (at most
            `durable_tools.carry.MAX_EARLIER_RUNS`; ask the oldest one for
            older runs).
    """

    matched: bool
    items: list[TranscriptItem] = Field(default_factory=list[TranscriptItem])
    digest: str = ""
    length: int = 0
    base: int = 0
    earlier: list[RunSpan] = Field(default_factory=list[RunSpan])
