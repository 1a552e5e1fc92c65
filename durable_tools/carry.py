"""What a conversation carries across continue-as-new: a bounded tail of its transcript.

A run that continues as new passes its state to the next run as the
continue-as-new input, which Temporal records twice (in the closing run's
`ContinuedAsNew` event and the new run's `Started` event) and rejects over
2 MiB. Carrying the whole transcript made that input grow with the
conversation. The loop carries only:

* the newest transcript items that fit in `ConversationOptions.
  carry_transcript_bytes` of JSON (`tail_start`), never cutting a tool
  call from its outputs, and always every call that has no output yet;
* `base`, the conversation-wide index of the first item carried, and the
  digest of the items before it, so indices and prefix digests
  (`durable_tools.transcript_digest`) stay conversation-wide;
* the earlier runs that hold the items before `base` (`RunSpan`, the latest
  `MAX_EARLIER_RUNS`), which a reader asks with the `transcript_slice` query:
  a closed run is replayed by a worker to answer it
  (`durable_tools.transcript_reader`).

An item larger than the budget is never carried, and nothing before it
either (the tail is contiguous): it stays in the run that recorded it. The
few facts the loop needs from older items travel as fields instead
(`CarriedState.needs_model`, `CarriedState.last_text`).

Pure Python, no I/O: importable in the workflow sandbox.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from durable_tools.transcript import AssistantMessage, ToolCallOutput, TranscriptItem

__all__ = [
    "CARRY_LIMIT_BYTES",
    "MAX_EARLIER_RUNS",
    "MAX_LAST_TEXT_BYTES",
    "cut_text",
    "tail_start",
]

CARRY_LIMIT_BYTES: Final[int] = 512 * 1024
"""The continue-as-new input this design stays under (Temporal warns at 512 KiB per payload).

The transcript tail is at most 384 KiB of it (`ConversationOptions.
carry_transcript_bytes`); the rest is the event stream's retained events,
descriptors, pending decisions and the agent configurations.
"""

MAX_EARLIER_RUNS: Final[int] = 100
"""Earlier runs a run lists (about 80 bytes each); the oldest listed one lists older ones."""

MAX_LAST_TEXT_BYTES: Final[int] = 16 * 1024
"""Bound on `CarriedState.last_text` (UTF-8 bytes): only a reply that is not in the tail."""


def tail_start(items: Sequence[TranscriptItem], sizes: Sequence[int], budget: int) -> int:
    """The index of the first item to carry: the newest items that fit in `budget` bytes.

    The tail `items[start:]` never starts with a tool output (an output is
    carried only with the assistant message that made its call), and holds
    every assistant message with a call that has no output in `items` yet,
    with everything after it, whatever their size: those calls are still
    running or waiting and the loop answers them in the next run.

    Args:
        items: The run's transcript, oldest first.
        sizes: `len(item_json(items[k]))` for each item (bytes), same length.
        budget: Bytes of JSON the tail may take (at least 0).

    Returns:
        `start` in `[0, len(items)]`: `sum(sizes[start:]) <= budget`, unless
        calls without outputs need more (then `start` is the first of them).
        An item larger than `budget` is never in the tail unless a call
        without output forces it in, so nothing before it is either.

    Raises:
        ValueError: `sizes` and `items` differ in length.
    """
    if len(sizes) != len(items):
        raise ValueError(f"{len(sizes)} sizes for {len(items)} items")
    answered = {item.call_id for item in items if isinstance(item, ToolCallOutput)}
    must = len(items)
    for index, item in enumerate(items):
        if isinstance(item, AssistantMessage) and any(
            call.call_id not in answered for call in item.tool_calls
        ):
            must = index
            break
    start, used = len(items), 0
    while start > 0 and used + sizes[start - 1] <= budget:
        start -= 1
        used += sizes[start]
    if must <= start:
        return must
    # Skip outputs whose assistant message did not fit (they would be orphans).
    while start < must and isinstance(items[start], ToolCallOutput):
        start += 1
    return start


def cut_text(text: str, max_bytes: int = MAX_LAST_TEXT_BYTES) -> str:
    """`text` cut to at most `max_bytes` of UTF-8, on a character boundary."""
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode("utf-8", "ignore")
