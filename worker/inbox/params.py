"""The inbox's query parameters: age filters and event offsets, and the list's filter."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from durable_tools.worker.inbox.views import WaitingConversation
from durable_tools.worker.inbox.web import BadInput

__all__ = [
    "AGE_PATTERN",
    "MAX_AGE_SECONDS",
    "filter_waiting",
    "parse_age",
    "parse_ages",
    "parse_offset",
]

MAX_AGE_SECONDS = 3650 * 86400
"""The longest age a filter takes (ten years)."""

AGE_PATTERN = r"^ *([0-9]{1,10}(\.[0-9]{1,6})? *([sSmMhHdDwW]|[sS][eE][cC]|[mM][iI][nN])?)? *$"
"""What an age filter is, as the OpenAPI documents it (ECMA regex): a subset of
what `parse_age` accepts, so a request valid by the schema is never refused."""

_AGE = re.compile(r"(\d{1,10}(?:\.\d{1,6})?)\s*(s|sec|m|min|h|d|w)?", re.ASCII)
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_MAX_OFFSET = 2**53


def parse_age(text: str) -> float | None:
    """An age filter's value in seconds: `90`, `90s`, `15m`, `15min`, `2h`, `7d`, `1w`.

    Args:
        text: The value as given (surrounding blanks ignored; `""`: no filter).

    Returns:
        Seconds (0 to `MAX_AGE_SECONDS`: a longer age is cut to it), or
        `None` for `""`.

    Raises:
        ValueError: Not a number with an optional unit.
    """
    text = text.strip().lower()
    if not text:
        return None
    match = _AGE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{text[:40]!r} is not an age: write a number and a unit, e.g. 30m, 2h, 7d"
        )
    # Longer than ten years is ten years: every conversation is younger.
    return min(float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"], MAX_AGE_SECONDS)


def parse_offset(text: str | None) -> int | None:
    """An event offset from `Last-Event-ID` or `?after=`: an integer from -1 to 2**53.

    Returns:
        The offset, or `None` when `text` is `None` or blank.

    Raises:
        ValueError: Anything else.
    """
    if text is None or not text.strip():
        return None
    text = text.strip()
    if not re.fullmatch(r"-?\d{1,16}", text, re.ASCII):
        raise ValueError(f"{text[:40]!r} is not an event offset")
    value = int(text)
    if not -1 <= value <= _MAX_OFFSET:
        raise ValueError(f"{text[:40]!r} is not an event offset")
    return value


def parse_ages(older_than: str, newer_than: str) -> tuple[float | None, float | None]:
    """`(older_than, newer_than)` in seconds; `BadInput` (`invalid_filter`) otherwise."""
    try:
        return parse_age(older_than), parse_age(newer_than)
    except ValueError as exc:
        raise BadInput("invalid_filter", f"Age filter: {exc}.") from exc


def filter_waiting(
    waiting: list[WaitingConversation],
    *,
    tool: str | None,
    kind: str | None,
    agent: str | None = None,
    ages: tuple[float | None, float | None] = (None, None),
) -> list[WaitingConversation]:
    """The conversations and items that pass the filters.

    `ages` is `(older_than, newer_than)` in seconds: an item passes when it
    was asked (`requested_at`, else the conversation's start) at least
    `older_than` and at most `newer_than` ago; an item with neither time
    fails an age filter.
    """
    older_than, newer_than = ages
    if not tool and not kind and not agent and older_than is None and newer_than is None:
        return waiting
    now = datetime.now(UTC)
    shown: list[WaitingConversation] = []
    for conversation in waiting:
        if agent and conversation.agent != agent:
            continue
        items = [
            i
            for i in conversation.items
            if (not tool or i.tool == tool)
            and (not kind or i.kind == kind)
            and _age_passes(i.requested_at or conversation.started, now, older_than, newer_than)
        ]
        if items:
            shown.append(conversation.model_copy(update={"items": items}))
    return shown


def _age_passes(
    asked: datetime | None, now: datetime, older_than: float | None, newer_than: float | None
) -> bool:
    if older_than is None and newer_than is None:
        return True
    if asked is None:
        return False
    if asked.tzinfo is None:
        asked = asked.replace(tzinfo=UTC)
    age = now - asked
    if older_than is not None and age < timedelta(seconds=older_than):
        return False
    return newer_than is None or age <= timedelta(seconds=newer_than)
