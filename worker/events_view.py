"""One line per conversation event: what `durable-tools follow` prints."""

from __future__ import annotations

from durable_tools.events import ConversationEvent

__all__ = ["event_line"]


def event_line(event: ConversationEvent) -> str:
    """`OFFSET TIME KIND details`, e.g. `7 12:00:01 tool_attempt_failed c2 fetch attempt 1: ...`."""
    parts = [f"{event.offset:>4}", event.at.strftime("%H:%M:%S"), event.kind]
    if event.turn is not None and event.kind.startswith("turn_"):
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
    if event.decided_by:
        parts.append(f"by {event.decided_by}")
    if event.usage is not None:
        parts.append(f"tokens {event.usage.input_tokens} in / {event.usage.output_tokens} out")
    if event.calls:
        parts.append(f"{event.calls} tool call{'s' if event.calls > 1 else ''}")
    line = " ".join(parts)
    detail = event.reason or event.text
    if detail:
        line += ": " + " ".join(detail.split())[:200]
    return line
