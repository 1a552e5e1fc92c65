"""Incremental transcript reads: the model activity reads only the items it has not seen.

Each `model.turn` needs the conversation's transcript, which lives in the
workflow and is read with the `transcript_slice` query (never recorded as
activity input, so history grows linearly). Reading all of it every turn made
a turn's cost grow with the conversation. A worker instead keeps, per
conversation (workflow id), the items it read and the digest of that prefix
(`durable_tools.transcript_digest`) in a `TranscriptCache`, and asks the
workflow only for items `[known, upto)` with that digest
(`TranscriptSlice.known_digest`). The workflow answers with the new items
when its prefix has the same digest. Indices and digests are
conversation-wide, so the cache survives continue-as-new: the new run holds
the newest items and the digest of the ones before them
(`durable_tools.carry`). On a miss (another worker ran the previous turn, a
restart) or a digest mismatch the activity reads the transcript again from
item 0, in pages (a query result over 2 MB fails), across runs: items before
the current run's `base` come from the earlier runs
(`durable_tools.transcript_reader`).

The activity checks every item it keeps: it computes the digest of what it
holds itself and compares it with the workflow's. Should they ever differ (an
item whose JSON does not survive a round trip), the items read are still used
(they are the workflow's), but not kept.

Most turns need no query at all: the model activity's input carries a
`TranscriptDelta`, the items appended since the run's previous model turn,
naming by reference those an activity returned (the previous assistant
message, the tool outputs) and giving the others whole (user messages,
outputs the workflow made). A worker that ran those activities remembers what
they returned (`ProducedItems`) and rebuilds the new items from it; it uses
them only when the chained digest it computes is the one the workflow sent,
and queries otherwise. A query costs a round trip through the server and a
workflow activation: about 4 ms of worker CPU and 5 ms of server CPU per turn
on the benchmark's machine, doubling what bare Temporal spends per turn.

A workflow running code from before this change ignores `known_digest` and
answers a list; the activity then reads the whole transcript in pages, as
before, and keeps nothing.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from temporalio.exceptions import ApplicationError

from durable_tools._wire import DeltaEntry, TranscriptDelta
from durable_tools.conversation import TranscriptPage, TranscriptSlice
from durable_tools.transcript import AssistantMessage, TranscriptItem
from durable_tools.transcript_digest import (
    EMPTY_DIGEST,
    CheckedTranscript,
    extend_digest,
    item_json,
)
from durable_tools.transcript_reader import (
    QUERY_PAGE_BYTES,
    OlderWorkflowCode,
    PrefixMismatch,
    RunQuery,
    read_pages,
)

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CACHE_ENTRIES",
    "QUERY_PAGE_BYTES",
    "CacheStats",
    "CachedTranscript",
    "ProducedItems",
    "TranscriptCache",
    "TranscriptQuery",
]

_log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES: Final[int] = 256 * 1024 * 1024
"""Default bound of a worker's cache: the JSON bytes of the items it holds."""

DEFAULT_CACHE_ENTRIES: Final[int] = 1024
"""Default bound of a worker's cache: how many conversations it holds transcripts of."""

_Answer = TranscriptPage | list[TranscriptItem]

TranscriptQuery = RunQuery
"""Sends one `transcript_slice` query to a run (`durable_tools.transcript_reader.RunQuery`)."""


class CachedTranscript:
    """The items `[0, len(items))` of one conversation's transcript, as a worker read them.

    Grows in place (`TranscriptCache.extend_by_delta` appends a turn's new
    items to `items` and `call_ids`), and `TranscriptCache` hands out `items`
    itself, not a copy: a turn costs the same at item 20,000 as at item 20
    (a copy of 17,000 items took 0.16 ms a turn, its reference counts
    touching every item). Read it, never change it: the model activity
    passes it on as `ModelRequest.transcript`, which says the same; a cache
    that finds its list changed (`intact`) drops the entry and reads again.

    Args:
        items: The items, in order (copied into a new list).
        digest: Their digest, computed here from the items (`transcript_digest`).
        size: Their JSON size in bytes (what the cache is bounded by).
        call_ids: The tool call ids of the assistant messages among them
            (copied into a new set).

    Attributes:
        items: The items, in order.
        digest: Their digest.
        size: Their JSON size in bytes.
        call_ids: The tool call ids of the assistant messages among them.
    """

    __slots__ = ("_count", "_last", "call_ids", "digest", "items", "size")

    def __init__(
        self,
        items: Iterable[TranscriptItem],
        digest: str,
        size: int,
        call_ids: Iterable[str],
    ) -> None:
        self.call_ids: set[str] = set(call_ids)
        self.items: CheckedTranscript = CheckedTranscript(items, self.call_ids)
        self.digest = digest
        self.size = size
        self._count, self._last = self._end()

    def _end(self) -> tuple[int, TranscriptItem | None]:
        return len(self.items), self.items[-1] if self.items else None

    @classmethod
    def empty(cls) -> CachedTranscript:
        """No items: the digest of the empty prefix."""
        return cls((), EMPTY_DIGEST, 0, ())

    def append(self, items: Sequence[TranscriptItem], call_ids: Iterable[str], digest: str) -> None:
        """Hold `items` after the others (their digest and call ids already computed)."""
        self.items.extend(items)
        self.call_ids.update(call_ids)
        self.digest = digest
        self._count, self._last = self._end()

    def intact(self) -> bool:
        """Whether `items` still ends where this entry left it (no one appended or cut it).

        O(1): it sees a list grown, shrunk or whose last item was replaced, not
        an earlier item replaced in place.
        """
        if len(self.items) != self._count:
            return False
        return not self.items or self.items[-1] is self._last


@dataclass
class CacheStats:
    """What a cache did, counted since it was made (for tests and benchmarks).

    Attributes:
        hits: Reads that extended a cached prefix.
        misses: Reads with nothing cached for the conversation.
        mismatches: Reads whose cached prefix the workflow did not confirm
            (digest differs, or it is longer than the transcript asked for).
        full_reads: Reads of the whole transcript from item 0.
        legacy_reads: Reads from a workflow that answered without digests.
        inconsistent: Reads whose items' digest, computed here, differed from
            the workflow's (used, not kept).
        queries: `transcript_slice` queries sent.
        local_reads: Pages read from the run in this process instead
            (`durable_tools.live_runs`), without a query.
        earlier_queries: Those of them sent to earlier (closed) runs, which
            a worker replays to answer.
        delta_hits: Reads answered from a `TranscriptDelta` and what this
            worker's activities returned, without a query.
        delta_mismatches: Deltas rebuilt here whose digest was not the
            workflow's (then read by query).
        tampered: Entries dropped because their list was changed by whoever
            it was handed to (`CachedTranscript.intact`).
    """

    hits: int = 0
    misses: int = 0
    mismatches: int = 0
    full_reads: int = 0
    legacy_reads: int = 0
    inconsistent: int = 0
    queries: int = 0
    local_reads: int = 0
    earlier_queries: int = 0
    delta_hits: int = 0
    delta_mismatches: int = 0
    tampered: int = 0


def _fold(item: TranscriptItem, digest: str, size: int, call_ids: set[str]) -> tuple[str, int]:
    """One more item held: the prefix's new digest and JSON size; its call ids added."""
    encoded = item_json(item)
    if isinstance(item, AssistantMessage):
        call_ids.update(c.call_id for c in item.tool_calls)
    return extend_digest(digest, encoded), size + len(encoded)


class ProducedItems:
    """What a worker's activities returned, as transcript items, by conversation.

    The model activity remembers each assistant message under its turn, the
    tool activity each output under its call id; a later model turn on this
    worker finds them for its `TranscriptDelta` instead of querying. Bounded
    by `max_bytes` of item content (least recently remembered out first);
    a single item over a quarter of it is not remembered.

    Args:
        max_bytes: Bound on the remembered items' approximate size in bytes
            (default 64 MiB).
    """

    def __init__(self, *, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], tuple[TranscriptItem, int]] = OrderedDict()
        self._keys: dict[str, set[str]] = {}  # by conversation, for `release`
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """The approximate size of the remembered items."""
        return self._bytes

    def _drop(self, workflow_id: str, key: str) -> None:
        found = self._items.pop((workflow_id, key), None)
        if found is not None:
            self._bytes -= found[1]
        keys = self._keys.get(workflow_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._keys[workflow_id]

    def release(self, workflow_id: str) -> None:
        """Forget everything remembered of the conversation (it ended or left the worker)."""
        for key in list(self._keys.get(workflow_id, ())):
            self._drop(workflow_id, key)

    def forget_delta(self, workflow_id: str, delta: TranscriptDelta) -> None:
        """Forget what `delta` named by reference: the transcript cache holds those items now."""
        for entry in delta.entries:
            if entry.item is None:
                self.forget(workflow_id, entry)

    @staticmethod
    def _key(entry: DeltaEntry) -> str | None:
        if entry.turn is not None:
            return f"turn:{entry.turn}"
        if entry.call_id is not None:
            return f"call:{entry.call_id}"
        return None

    def remember(self, workflow_id: str, entry: DeltaEntry, item: TranscriptItem) -> None:
        """Keep `item`, what the activity named by `entry` (a turn or a call id) returned."""
        key = self._key(entry)
        if key is None:
            return
        size = _approximate_size(item)
        self.forget(workflow_id, entry)
        if size > self.max_bytes // 4:
            return
        self._items[(workflow_id, key)] = (item, size)
        self._keys.setdefault(workflow_id, set()).add(key)
        self._bytes += size
        while self._bytes > self.max_bytes:
            (oldest, oldest_key), _ = next(iter(self._items.items()))
            self._drop(oldest, oldest_key)

    def forget(self, workflow_id: str, entry: DeltaEntry) -> None:
        """Drop what is remembered for `entry`, if anything."""
        key = self._key(entry)
        if key is not None:
            self._drop(workflow_id, key)

    def find(self, workflow_id: str, entry: DeltaEntry) -> TranscriptItem | None:
        """The remembered item for `entry`, or `None`."""
        key = self._key(entry)
        found = self._items.get((workflow_id, key)) if key is not None else None
        return found[0] if found is not None else None


def _approximate_size(item: TranscriptItem) -> int:
    """Bytes of an item's text fields: a cheap bound for `ProducedItems`."""
    if isinstance(item, AssistantMessage):
        return (
            256
            + len(item.text)
            + sum(len(c.arguments) + len(c.name) + len(c.call_id) for c in item.tool_calls)
        )
    return 256 + len(getattr(item, "content", "") or getattr(item, "text", "") or "")


class TranscriptCache:
    """A worker's transcripts by conversation, least recently used first out.

    Bounded by `max_entries` conversations and by `max_bytes` of the items' JSON (the
    Python objects take more memory than that, typically 2 to 3 times). A
    transcript larger than `max_bytes` is read every turn and never kept.

    Args:
        max_bytes: Bound on the JSON bytes of all cached items (default 256 MiB).
        max_entries: Bound on the number of conversations (default 1024). 0
            disables the cache: every read is a full read.
    """

    def __init__(
        self, *, max_bytes: int = DEFAULT_CACHE_BYTES, max_entries: int = DEFAULT_CACHE_ENTRIES
    ) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.stats = CacheStats()
        self._entries: OrderedDict[str, CachedTranscript] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """The JSON bytes of all cached items."""
        return self._bytes

    def get(self, workflow_id: str) -> CachedTranscript | None:
        """The cached prefix of a conversation's transcript, marked as recently used.

        An entry whose list someone changed (`CachedTranscript.intact`) is
        dropped: `None`, as if never read.
        """
        entry = self._entries.get(workflow_id)
        if entry is not None and not entry.intact():
            _log.warning(
                "transcript of %s: the cached list was changed; reading it again", workflow_id
            )
            self.stats.tampered += 1
            self.discard(workflow_id)
            return None
        if entry is not None:
            self._entries.move_to_end(workflow_id)
        return entry

    def put(self, workflow_id: str, entry: CachedTranscript) -> None:
        """Keep `entry` for the conversation (replacing what was kept), evicting the oldest."""
        self.discard(workflow_id)
        if self.max_entries <= 0 or entry.size > self.max_bytes:
            return
        self._entries[workflow_id] = entry
        self._bytes += entry.size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    def discard(self, workflow_id: str) -> None:
        """Forget the conversation's transcript, if kept."""
        entry = self._entries.pop(workflow_id, None)
        if entry is not None:
            self._bytes -= entry.size

    def extend_by_delta(
        self,
        workflow_id: str,
        delta: TranscriptDelta,
        resolve: Callable[[DeltaEntry], TranscriptItem | None],
    ) -> list[TranscriptItem] | None:
        """Items `[0, delta.start + len(delta.entries))` without a query, or `None`.

        Uses the cached prefix when it is exactly `[0, delta.start)` with
        `delta.start_digest` (or already the whole of it, with `delta.digest`:
        a retried turn), or nothing cached and `delta.start == 0`; each entry
        is the item it gives or what `resolve` finds for it. The result is
        used and kept only when its digest, computed here, is `delta.digest`.

        Args:
            workflow_id: The conversation's workflow id (the cache's key).
            delta: The model activity's `TranscriptDelta` (conversation-wide
                indices and digests, as the cache's).
            resolve: Finds an entry given by reference (what this worker's
                activities returned), `None` when it has none.

        Returns:
            The transcript, or `None` when any of that fails: then `read`.
        """
        entry = self.get(workflow_id)
        end = delta.start + len(delta.entries)
        if entry is None and delta.start == 0:
            entry = CachedTranscript.empty()
        if entry is None:
            return None
        if len(entry.items) == end and entry.digest == delta.digest:
            self.stats.delta_hits += 1
            return entry.items
        if len(entry.items) != delta.start or entry.digest != delta.start_digest:
            return None
        added: list[TranscriptItem] = []
        digest, size = entry.digest, entry.size
        call_ids = set[str]()
        for part in delta.entries:
            item = part.item if part.item is not None else resolve(part)
            if item is None:
                return None
            digest, size = _fold(item, digest, size, call_ids)
            added.append(item)
        if digest != delta.digest:  # e.g. remembered from an attempt not recorded
            self.stats.delta_mismatches += 1
            return None
        self.stats.delta_hits += 1
        # In place, not a new entry: the cost is the delta's, not the transcript's.
        entry.append(added, call_ids, digest)
        self._grow(workflow_id, entry, size)
        return entry.items

    def _grow(self, workflow_id: str, entry: CachedTranscript, size: int) -> None:
        """Account for `entry` now holding `size` bytes (it may be new), evicting the oldest."""
        kept = self._entries.get(workflow_id)
        if kept is not entry:
            entry.size = size
            self.put(workflow_id, entry)
            return
        self._bytes += size - entry.size
        entry.size = size
        self._entries.move_to_end(workflow_id)
        if size > self.max_bytes:
            self.discard(workflow_id)
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    async def read(
        self,
        query: TranscriptQuery,
        workflow_id: str,
        upto: int,
        *,
        page_bytes: int = QUERY_PAGE_BYTES,
        local: Callable[[TranscriptSlice], TranscriptPage | None] | None = None,
    ) -> list[TranscriptItem]:
        """Items `[0, upto)` of the conversation's transcript: the cached prefix plus the rest.

        Args:
            query: Sends `transcript_slice` to the run the turn serves (run
                `None`) or to an earlier run.
            workflow_id: The conversation's workflow id (the cache's key).
            upto: How many items the model sees (conversation-wide).
            page_bytes: Page size of each query answer (default `QUERY_PAGE_BYTES`).
            local: Answers a `transcript_slice` to the run the turn serves
                in process, without a query (`durable_tools.live_runs`), or
                `None` when it cannot (then `query`).

        Returns:
            A new list (the caller may keep or change it).

        Raises:
            ApplicationError: The transcript has fewer than `upto` items, or
                it changed other than by growing while it was read (retryable).
            TranscriptUnavailable: No run holds an item it needs (e.g. an
                earlier run past retention).
        """

        async def counted(run_id: str | None, arg: TranscriptSlice) -> _Answer:
            if run_id is None and local is not None:
                page = local(arg)
                if page is not None:
                    self.stats.local_reads += 1
                    return page
            self.stats.queries += 1
            if run_id is not None:
                self.stats.earlier_queries += 1
            return await query(run_id, arg)

        entry = self.get(workflow_id)
        if entry is not None and len(entry.items) <= upto:
            try:
                items = await self._extend(counted, workflow_id, upto, page_bytes, entry)
                self.stats.hits += 1
                return items
            except OlderWorkflowCode:
                return await self._legacy_read(counted, upto, page_bytes)
            except PrefixMismatch:
                self.stats.mismatches += 1
        elif entry is not None:
            self.stats.mismatches += 1
        else:
            self.stats.misses += 1
        self.discard(workflow_id)
        self.stats.full_reads += 1
        try:
            return await self._extend(
                counted, workflow_id, upto, page_bytes, CachedTranscript.empty()
            )
        except OlderWorkflowCode:
            return await self._legacy_read(counted, upto, page_bytes)
        except PrefixMismatch as exc:  # only a transcript changed in place gets here
            raise ApplicationError(
                f"the transcript changed while it was read (at item {exc.start} of {upto})"
            ) from None

    async def _extend(
        self,
        query: TranscriptQuery,
        workflow_id: str,
        upto: int,
        page_bytes: int,
        known: CachedTranscript,
    ) -> list[TranscriptItem]:
        """Append pages to `known` until `upto` items, checking each page's digest.

        Raises:
            PrefixMismatch: The workflow did not confirm `known` (first page).
            OlderWorkflowCode: The run answers lists.
            ApplicationError: A later page did not match (changed in place).
        """
        items = list(known.items)
        digest, size, consistent = known.digest, known.size, True
        call_ids = set[str]()
        pages = read_pages(query, len(items), upto, digest, page_bytes=page_bytes)
        try:
            async for page in pages:
                for item in page.items:
                    digest, size = _fold(item, digest, size, call_ids)
                items.extend(page.items)
                if digest != page.digest:
                    consistent = False
                    digest = page.digest  # the reader asks on with the workflow's own digest
        except PrefixMismatch as exc:
            if len(items) > len(known.items):  # the transcript changed while it was read
                raise ApplicationError(
                    f"the transcript changed while it was read (at item {exc.start} of {upto})"
                ) from None
            raise
        finally:
            await pages.aclose()
        read = CachedTranscript(items, digest, size, known.call_ids | call_ids)
        if consistent:
            self.put(workflow_id, read)
        else:
            self.stats.inconsistent += 1
            self.discard(workflow_id)
            _log.warning(
                "transcript of %s: the digest of the items read differs from the "
                "workflow's; reading it whole every turn",
                workflow_id,
            )
        return read.items

    async def _legacy_read(
        self, query: TranscriptQuery, upto: int, page_bytes: int
    ) -> list[TranscriptItem]:
        """The whole transcript in pages, from a workflow that answers without digests."""
        self.stats.legacy_reads += 1
        items: list[TranscriptItem] = []
        while len(items) < upto:
            page = await query(
                None, TranscriptSlice(start=len(items), upto=upto, max_bytes=page_bytes)
            )
            found = page.items if isinstance(page, TranscriptPage) else page
            if not found:
                raise ApplicationError(
                    f"the transcript has {len(items)} items, fewer than the {upto} expected"
                )
            items.extend(found)
        return items
