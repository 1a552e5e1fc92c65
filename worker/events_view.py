"""What `durable-tools follow` prints: one line per event, a turn's text as it streams.

`event_line` renders one event as `OFFSET TIME KIND details`. `EventPrinter`
renders a sequence: the `model_text_delta` events of one model attempt
continue a single line (`OFFSET TIME model_text_delta turn N attempt K: `
then the text as it arrives, its newlines kept), so the model's answer reads
as it streams; any other event ends that line. The offset shown on such a
line is its first delta's (`--json` prints every event with its own).

Text from models, tools and clients is untrusted: control characters (e.g.
terminal escape sequences) are dropped before anything is printed.
"""

from __future__ import annotations

import re
from typing import Final

from durable_tools.events import ConversationEvent
from durable_tools.policy_verdict import explain_verdict

__all__ = ["EventPrinter", "event_line", "printable"]

# C0 controls but tab and newline, DEL, C1 controls: a model's text could move
# the cursor, rewrite the screen or set the terminal's title.
_CONTROLS: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` without control characters other than tab and newline."""
    return _CONTROLS.sub("", text)


def event_line(event: ConversationEvent) -> str:
    """`OFFSET TIME KIND details`, e.g. `7 12:00:01 tool_attempt_failed c2 fetch attempt 1: ...`."""
    parts = [f"{event.offset:>4}", event.at.strftime("%H:%M:%S"), event.kind]
    if event.turn is not None and (event.kind.startswith(("turn_", "model_"))):
        parts.append(f"turn {event.turn}")
    if event.call_id:
        parts.append(event.call_id)
    if event.tool:
        parts.append(event.tool)
    if event.agent:
        parts.append(f"{event.agent} ({event.model})")
    if event.attempt is not None:
        parts.append(f"attempt {event.attempt}")
    if event.outcome:
        parts.append(f"-> {event.outcome}")
    if event.duration is not None:
        parts.append(f"in {event.duration:.3f} s")
    if event.decided_by:
        parts.append(f"by {event.decided_by}")
    if event.usage is not None:
        parts.append(f"tokens {event.usage.input_tokens} in / {event.usage.output_tokens} out")
    if event.calls:
        parts.append(f"{event.calls} tool call{'s' if event.calls > 1 else ''}")
    line = printable(" ".join(parts))
    detail = event.reason or event.text
    if not detail and event.policy is not None:
        detail = explain_verdict(event.policy)
    if detail:
        line += ": " + printable(" ".join(detail.split()))[:200]
    return line


class EventPrinter:
    """Renders events for a terminal: whole lines, and streamed text continuing one line."""

    def __init__(self) -> None:
        self._streaming: tuple[int | None, int | None] | None = None  # (turn, attempt)

    def feed(self, event: ConversationEvent) -> str:
        """The text to print for `event` (no trailing newline after a text delta)."""
        ends = "\n" if self._streaming is not None else ""
        if event.kind == "model_text_delta":
            key = (event.turn, event.attempt)
            text = printable(event.text or "")
            if self._streaming == key:
                return text
            self._streaming = key
            head = event_line(event.model_copy(update={"text": None}))
            return f"{ends}{head}: {text}"
        self._streaming = None
        return f"{ends}{event_line(event)}\n"

    def close(self) -> str:
        """What ends the output (a newline after streamed text)."""
        ends = "\n" if self._streaming is not None else ""
        self._streaming = None
        return ends
