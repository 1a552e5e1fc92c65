"""Jinja filters of the inbox pages: arguments as folded pretty JSON, times, countdowns."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from jinja2 import Environment

from durable_tools.worker.inbox.paths import quote_segment

__all__ = ["FOLD_CHARS", "Field", "fields_of", "register_filters"]

FOLD_CHARS = 160
"""Values whose JSON is longer than this are folded (`<details>`) on the pages."""


@dataclass(frozen=True)
class Field:
    """One top-level argument as the page shows it.

    Attributes:
        name: The key (`""` when the arguments are not a JSON object).
        text: Pretty JSON (strings as they are).
        folded: Whether the page folds it.
        preview: What a folded value shows before it is opened.
    """

    name: str
    text: str
    folded: bool
    preview: str


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def fields_of(arguments: str) -> list[Field]:
    """A call's raw argument text as fields, long values folded."""
    try:
        parsed: Any = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = arguments
    if isinstance(parsed, dict):
        pairs: list[tuple[str, Any]] = [(str(k), v) for k, v in parsed.items()]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    else:
        pairs = [("", parsed)]
    found: list[Field] = []
    for name, value in pairs:
        text = _pretty(value)
        folded = len(text) > FOLD_CHARS or text.count("\n") > 8
        preview = " ".join(text.split())[:80] + ("…" if folded else "")
        found.append(Field(name, text, folded, preview))
    return found


def iso(value: datetime | None) -> str:
    """ISO 8601 in UTC, for `<time datetime=...>`."""
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def human_time(value: datetime | None) -> str:
    """`2026-11-22 15:40 UTC`."""
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def left(value: datetime | None) -> str:
    """Time left until `value`, e.g. `6 d 23 h`, or `expired`."""
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    seconds = int((value - datetime.now(UTC)).total_seconds())
    if seconds <= 0:
        return "expired"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def output_text(content: str) -> str:
    """A tool output's content, pretty when it is JSON."""
    try:
        return _pretty(json.loads(content))
    except ValueError:
        return content


def register_filters(env: Environment) -> None:
    """Add the filters the templates use to `env`, and keep `tojson`'s key order.

    Jinja's `tojson` sorts keys by default; an answer schema's properties are
    the order its form shows its fields in, so they keep the schema's order.
    """
    env.policies["json.dumps_kwargs"] = {"sort_keys": False}
    filters = cast("dict[str, Any]", env.filters)
    filters.update(
        fields=fields_of,
        iso=iso,
        human_time=human_time,
        left=left,
        output_text=output_text,
        segment=quote_segment,
    )
