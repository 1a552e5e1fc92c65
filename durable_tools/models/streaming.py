"""Where a model adapter sends its text as it streams in.

A streaming adapter calls `text_delta(piece)` for each piece of text the
provider sends; the `model.turn` activity installs a sink with
`text_sink(...)` that publishes the pieces to the conversation's event
stream (`model_text_delta` events, batched: see
`durable_tools.activities.activity_events`). The adapter still returns the
whole turn as one `AssistantMessage`; the deltas are a view of it as it
arrives, never the record.

`streaming_wanted()` tells an adapter whether anything listens: outside the
activity (a model called directly, a unit test) nothing does, and an adapter
may then make one plain request instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from contextvars import ContextVar

__all__ = ["streaming_wanted", "text_delta", "text_sink"]

_sink: ContextVar[Callable[[str], None] | None] = ContextVar(
    "durable_tools_text_sink", default=None
)


def text_delta(piece: str) -> None:
    """Report a piece of the model's text as it arrives (nothing when no one listens).

    Args:
        piece: The next characters of the turn's text, in order; empty
            pieces are ignored.
    """
    sink = _sink.get()
    if sink is not None and piece:
        sink(piece)


def streaming_wanted() -> bool:
    """Whether a sink listens for text deltas in this context (see `text_sink`)."""
    return _sink.get() is not None


@contextlib.contextmanager
def text_sink(sink: Callable[[str], None]) -> Generator[None]:
    """Send `text_delta` pieces to `sink` inside the block (in this task and its children).

    Args:
        sink: Called with each non-empty piece, in order, from the adapter's
            task; it must not block (buffer and return).
    """
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)
