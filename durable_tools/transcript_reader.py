"""Read a conversation's transcript across runs, in pages: one owner of the paging loop.

A conversation that continued as new holds its transcript in several runs:
the current run holds the items from its `base` on, and earlier runs (closed;
a worker replays one to answer a query) hold the older ones
(`durable_tools.carry`). Every run answers the `transcript_slice` query by
conversation-wide index with a `TranscriptPage`; a run asked for an item
before its `base` answers `matched=False` with the earlier runs it knows
(`TranscriptPage.earlier`). `read_pages` follows them: each page is asked of
the newest run that holds its first item, so closed runs are replayed only
for the items no newer run holds.

The model activity reads with digests (`activities/transcript_cache.py`); the
client reads without (`known_digest=""`: `Conversations.history`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final

from durable_tools.conversation import TranscriptPage, TranscriptSlice
from durable_tools.errors import TranscriptUnavailable
from durable_tools.transcript import TranscriptItem

__all__ = [
    "QUERY_PAGE_BYTES",
    "UNCHECKED",
    "OlderWorkflowCode",
    "PrefixMismatch",
    "RunQuery",
    "read_pages",
]

QUERY_PAGE_BYTES: Final[int] = 1_000_000
"""Page size of transcript reads: Temporal rejects query results over 2 MB."""

UNCHECKED: Final[str] = ""
"""`known_digest` of a reader that holds nothing before `start`: pages come unchecked."""

RunQuery = Callable[[str | None, TranscriptSlice], Awaitable[TranscriptPage | list[TranscriptItem]]]
"""Sends one `transcript_slice` query and returns its decoded answer.

The first argument is the run to ask: `None` for the run the read starts from
(the conversation's latest run, or the run a model turn serves), else the id
of an earlier run (`RunSpan.run_id`).
"""

# Queries in a row that return no item before the read gives up: each either
# learns an earlier run or fixes one's base, so a consistent chain needs far fewer.
_MAX_QUERIES_WITHOUT_ITEMS: Final[int] = 1000


class PrefixMismatch(Exception):
    """The run that holds item `start` did not confirm the reader's digest of `[0, start)`.

    Attributes:
        start: The conversation-wide index asked for.
        length: How many items the conversation has (as the run answered).
    """

    def __init__(self, start: int, length: int) -> None:
        super().__init__(f"the transcript's items before {start} differ from the reader's")
        self.start = start
        self.length = length


class OlderWorkflowCode(Exception):
    """The run answered a list: its workflow code predates `TranscriptPage` answers."""


def _run_for(index: int, current_base: int | None, runs: dict[int, str]) -> str | None:
    """The newest run known to hold item `index` (`None`: the current run)."""
    if current_base is None or index >= current_base:
        return None
    holding = [base for base in runs if base <= index]
    if holding:
        return runs[max(holding)]
    if not runs:
        raise TranscriptUnavailable(
            f"no run of the conversation holds transcript item {index}: the current run "
            f"starts at item {current_base} and names no earlier run"
        )
    return runs[min(runs)]  # it names older runs


async def read_pages(
    query: RunQuery,
    start: int,
    upto: int,
    digest: str = UNCHECKED,
    *,
    page_bytes: int = QUERY_PAGE_BYTES,
) -> AsyncGenerator[TranscriptPage]:
    """The transcript's items `[start, upto)` in pages, across runs.

    Args:
        query: Sends `transcript_slice` to a run (`RunQuery`).
        start: Conversation-wide index of the first item (at least 0).
        upto: Index after the last item.
        digest: Digest of the items `[0, start)` the caller holds
            (`durable_tools.transcript_digest`; `EMPTY_DIGEST` for
            `start=0`), checked by every run asked; `UNCHECKED` (default):
            no check.
        page_bytes: Page size of each answer (default `QUERY_PAGE_BYTES`).

    Yields:
        Matched pages in order, each with at least one item; their items
        together are `[start, upto)`. `page.digest` is the digest of the
        items up to the page's end (when `digest` was given).

    Raises:
        PrefixMismatch: The run holding `start` (or a later page's first
            item) did not confirm the digest.
        OlderWorkflowCode: The current run answered a list.
        TranscriptUnavailable: The runs hold fewer than `upto` items, or
            none holds an item (e.g. an earlier run past the namespace's
            retention, or an inconsistent chain of runs).
    """
    runs: dict[int, str] = {}
    current_base: int | None = None
    index, idle = start, 0
    while index < upto:
        run_id = _run_for(index, current_base, runs)
        answer = await query(
            run_id,
            TranscriptSlice(start=index, upto=upto, max_bytes=page_bytes, known_digest=digest),
        )
        if isinstance(answer, list):
            if run_id is None:
                raise OlderWorkflowCode("the run answered transcript_slice with a list")
            raise TranscriptUnavailable(f"earlier run {run_id} answered without pages")
        if answer.matched:
            if not answer.items:
                raise TranscriptUnavailable(
                    f"the transcript has {answer.length} items, fewer than the {upto} expected"
                )
            idle = 0
            if len(answer.items) > upto - index:  # more than asked: not from this code
                raise TranscriptUnavailable(
                    f"a run answered {len(answer.items)} items, more than the {upto - index} asked"
                )
            yield answer
            index += len(answer.items)
            if digest != UNCHECKED:
                digest = answer.digest
            continue
        if index >= answer.base:
            raise PrefixMismatch(index, answer.length)
        idle += 1
        known = dict(runs)
        if run_id is None:
            current_base = answer.base
        else:  # an earlier run that starts later than it was listed at
            for base in [b for b, r in runs.items() if r == run_id]:
                del runs[base]
            runs[answer.base] = run_id
        for span in answer.earlier:
            if span.base < answer.base:
                runs.setdefault(span.base, span.run_id)
        if (run_id is not None and runs == known) or idle > _MAX_QUERIES_WITHOUT_ITEMS:
            raise TranscriptUnavailable(
                f"no run of the conversation holds transcript item {index} (asked run "
                f"{run_id}, which starts at item {answer.base})"
            )
