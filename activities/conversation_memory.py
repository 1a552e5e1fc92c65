"""A worker's small per-conversation memories, bounded and let go together.

The activities keep, per conversation (workflow id), what recorded inputs
name instead of holding: agent configurations by run and name, the calls
the model activity planned. `ByConversation` groups such entries by
conversation, so a conversation that ends or leaves the worker
(`durable_tools.live_runs`) is dropped at once, and bounds them: past
`max_conversations` conversations or `max_entries` entries in all, the
least recently used conversation goes whole.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ByConversation"]

_K = TypeVar("_K")
_V = TypeVar("_V")


class ByConversation(Generic[_K, _V]):
    """Entries by (workflow id, key), least recently used conversation out first.

    Args:
        max_conversations: Most conversations held (at least 1).
        max_entries: Most entries held over every conversation (at least 1).
    """

    def __init__(self, *, max_conversations: int, max_entries: int) -> None:
        self.max_conversations = max(1, max_conversations)
        self.max_entries = max(1, max_entries)
        self._by: OrderedDict[str, dict[_K, _V]] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        """Entries held, over every conversation."""
        return self._count

    def conversations(self) -> int:
        """Conversations with at least one entry."""
        return len(self._by)

    def get(self, workflow_id: str, key: _K) -> _V | None:
        """The entry, marking its conversation recently used; `None` when not held."""
        entries = self._by.get(workflow_id)
        if entries is None:
            return None
        self._by.move_to_end(workflow_id)
        return entries.get(key)

    def put(self, workflow_id: str, key: _K, value: _V) -> None:
        """Hold `value`; the least recently used conversations go past the bounds."""
        entries = self._by.get(workflow_id)
        if entries is None:
            entries = self._by[workflow_id] = {}
        else:
            self._by.move_to_end(workflow_id)
        if key not in entries:
            self._count += 1
        entries[key] = value
        while len(self._by) > 1 and (
            len(self._by) > self.max_conversations or self._count > self.max_entries
        ):
            _, evicted = self._by.popitem(last=False)
            self._count -= len(evicted)
        if self._count > self.max_entries:  # one conversation over the bound alone
            oldest = next(iter(entries))
            del entries[oldest]
            self._count -= 1

    def pop(self, workflow_id: str, key: _K) -> _V | None:
        """Drop one entry; its value, or `None`."""
        entries = self._by.get(workflow_id)
        if entries is None or key not in entries:
            return None
        self._count -= 1
        value = entries.pop(key)
        if not entries:
            del self._by[workflow_id]
        return value

    def release(self, workflow_id: str, where: Callable[[_K], bool] | None = None) -> None:
        """Drop the conversation's entries (only those whose key passes `where`, if given)."""
        entries = self._by.get(workflow_id)
        if entries is None:
            return
        if where is None:
            del self._by[workflow_id]
            self._count -= len(entries)
            return
        for key in [k for k in entries if where(k)]:
            del entries[key]
            self._count -= 1
        if not entries:
            del self._by[workflow_id]
