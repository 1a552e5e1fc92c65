"""Digests of transcript prefixes, so a reader can extend what it already holds.

The model activity keeps the transcript items it read (`durable_tools.activities.
transcript_cache`) and asks the workflow only for the items after them, with the
digest of the prefix it holds; the workflow answers with the new items only
when its own prefix has the same digest (`transcript_slice` with
`known_digest`, answered by a `TranscriptPage`). Both sides compute the same
chained digest:

    digest(0) = EMPTY_DIGEST
    digest(n + 1) = sha256(bytes(digest(n)) + sha256(json(item n)))

where `json(item)` is `item.model_dump_json()` encoded as UTF-8 (what the
workflow pages by too). A chain, so extending a prefix by k items costs k
serializations whatever the conversation's length.

Pure Python, no I/O: importable in the workflow sandbox.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

from durable_tools.transcript import TranscriptItem

__all__ = ["EMPTY_DIGEST", "CheckedTranscript", "PrefixDigests", "extend_digest", "item_json"]

EMPTY_DIGEST: Final[str] = hashlib.sha256(b"durable-tools transcript digest v1").hexdigest()
"""The digest of an empty transcript (the start of every chain)."""


def item_json(item: TranscriptItem) -> bytes:
    """The bytes a transcript item is digested and paged by: its JSON, UTF-8."""
    return item.model_dump_json().encode()


def extend_digest(digest: str, encoded_item: bytes) -> str:
    """The digest of a prefix extended by one item.

    Args:
        digest: The digest of the prefix (hex, as returned here or `EMPTY_DIGEST`).
        encoded_item: `item_json(item)` of the next item.

    Returns:
        The digest of the prefix followed by the item (64 hex characters).

    Raises:
        ValueError: `digest` is not hex.
    """
    inner = hashlib.sha256(encoded_item).digest()
    return hashlib.sha256(bytes.fromhex(digest) + inner).hexdigest()


class PrefixDigests:
    """The digest and JSON size of every prefix of one growing transcript, memoized.

    The workflow keeps one for its transcript and answers `transcript_slice`
    from it: each item is serialized once, when a query first reaches it, so
    a query costs what it returns, not the transcript's length. Queries and
    the continue-as-new carry read it; what it returns is a pure function of
    the transcript, so replay is unaffected.

    The memo assumes what the loop guarantees: within a run the transcript
    only grows (items are frozen and only ever appended). It checks cheaply
    that this holds (the length, and the identity of the last item it
    memoized) and starts over when it does not; code that ever replaces an
    item in place must call `clear()`.

    Thread-safe: an activity in the same process reads a run's digests
    (`durable_tools.live_runs`) while the run may be in an activation on
    another thread, so extending the memo takes a lock.

    Args:
        start: The digest of the items before the transcript's first one
            (default `EMPTY_DIGEST`): a run continued as new holds the
            conversation's items from its `base`, and `start` is the digest
            of the items before it, so every digest is conversation-wide.
    """

    def __init__(self, start: str = EMPTY_DIGEST) -> None:
        self._start = start
        self._digests: list[str] = [start]
        self._sizes: list[int] = []
        self._last: TranscriptItem | None = None
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget everything (the transcript changed other than by appending)."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._digests = [self._start]
        self._sizes = []
        self._last = None

    def _cover_locked(self, transcript: Sequence[TranscriptItem], n: int) -> None:
        known = len(self._sizes)
        if known and (len(transcript) < known or transcript[known - 1] is not self._last):
            self._clear()
            known = 0
        if n <= known:
            return
        digest = self._digests[-1]
        for item in transcript[known:n]:
            encoded = item_json(item)
            digest = extend_digest(digest, encoded)
            self._digests.append(digest)
            self._sizes.append(len(encoded))
        self._last = transcript[n - 1]

    def digest(self, transcript: Sequence[TranscriptItem], n: int) -> str:
        """The digest of `transcript[:n]` (`0 <= n <= len(transcript)`)."""
        with self._lock:
            self._cover_locked(transcript, n)
            return self._digests[n]

    def size(self, transcript: Sequence[TranscriptItem], index: int) -> int:
        """Bytes of `item_json(transcript[index])`."""
        with self._lock:
            self._cover_locked(transcript, index + 1)
            return self._sizes[index]


class CheckedTranscript(list[TranscriptItem]):
    """A transcript read from the workflow and checked against its digest.

    What `TranscriptCache.read` returns: its items were validated when the
    query answer was decoded, so `ModelRequest` takes a shallow copy instead
    of validating every item again on every turn (1.2 ms at 4,000 items);
    `call_ids` (every tool call id of its assistant messages) is kept by the
    cache as it grows, so a turn need not scan the whole transcript for them.

    Args:
        items: The transcript items.
        call_ids: The call ids of the assistant messages among `items` (a
            superset is fine: they are for telling new call ids from used ones).
    """

    def __init__(self, items: Iterable[TranscriptItem], call_ids: AbstractSet[str]) -> None:
        super().__init__(items)
        self.call_ids = call_ids
