"""Reminders and escalation of an approval that waits: the rule, and where it stands.

A policy rule that gates a call can say `remind_after` (a duration), and
`escalate_after` with `escalate_to` (groups): while the call waits, a
workflow timer fires the reminder (event `approval_reminder`, a webhook
notification), and later the escalation: the call's approvers become the
`escalate_to` groups (event `approval_escalated`). The rule travels in the
recorded verdict (`PolicyVerdict.escalation`), where the wait stands in the
pending approval (`PendingApproval.escalation`, carried across
continue-as-new), so both replay from history alone.

Pure data and arithmetic: workflow code imports this module.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Literal, cast

from pydantic import BaseModel, Field, field_validator, model_validator

__all__ = ["MAX_DURATION", "Escalation", "EscalationState", "next_step", "parse_duration"]

MAX_DURATION: Final[float] = 366 * 86400.0
"""The longest `remind_after` / `escalate_after`, in seconds (a year)."""

_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION: Final = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,6})?)([smhd])")


def parse_duration(value: Any) -> float:
    """Seconds from a number of seconds or a text like `90s`, `30m`, `4h`, `2d`, `1h30m`.

    Raises:
        ValueError: Not a duration, zero or negative, or longer than `MAX_DURATION`.
    """
    if isinstance(value, bool):
        raise ValueError("a duration is seconds or a text like '30m', not a bool")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value and len(value) <= 40:
        text = value.lower()
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"not a duration: {value!r} (e.g. '90s', '30m', '4h', '2d', '1h30m')")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError("a duration is seconds or a text like '30m'")
    if not 0 < seconds <= MAX_DURATION:
        raise ValueError(f"a duration must be more than 0 s and at most {MAX_DURATION:g} s")
    return seconds


class Escalation(BaseModel):
    """When a waiting approval is reminded and escalated, and to whom.

    Attributes:
        remind_after: Seconds after the wait starts that a reminder fires
            (`None`: no reminder).
        escalate_after: Seconds after the wait starts that the approval is
            escalated (`None`: never).
        escalate_to: Who may decide once escalated (`group:NAME`,
            `user:ID`); they replace the call's approvers.
    """

    remind_after: float | None = None
    escalate_after: float | None = None
    escalate_to: list[str] = Field(default_factory=list[str])

    @field_validator("remind_after", "escalate_after", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)

    @field_validator("escalate_to", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            return cast(object, value)
        items = cast(Sequence[Any], value)
        names = [v for v in items if isinstance(v, str)]
        if len(names) != len(items):
            return items  # refused by the field's type
        return [n if ":" in n else f"group:{n}" for n in names]

    @model_validator(mode="after")
    def _paired(self) -> Escalation:
        if (self.escalate_after is None) != (not self.escalate_to):
            raise ValueError("escalate_after and escalate_to go together")
        if len(self.escalate_to) > 20 or any(not 0 < len(g) <= 200 for g in self.escalate_to):
            raise ValueError("escalate_to: at most 20 names of 1 to 200 characters")
        return self


class EscalationState(BaseModel):
    """Where a waiting approval stands: reminded, escalated (carried with the wait).

    Attributes:
        remind_at: When the reminder fires (`None`: none, or it fired).
        escalate_at: When the escalation fires (`None`: none, or it fired).
        reminded_at: When the reminder fired.
        escalated_at: When the approval was escalated.
        escalated_from: The approvers before the escalation.
    """

    remind_at: datetime | None = None
    escalate_at: datetime | None = None
    reminded_at: datetime | None = None
    escalated_at: datetime | None = None
    escalated_from: list[str] = Field(default_factory=list[str])

    @classmethod
    def start(cls, rule: Escalation, requested_at: datetime) -> EscalationState:
        """The state of a wait that starts at `requested_at` under `rule`."""

        def at(seconds: float | None) -> datetime | None:
            return None if seconds is None else requested_at + timedelta(seconds=seconds)

        return cls(remind_at=at(rule.remind_after), escalate_at=at(rule.escalate_after))


def next_step(
    state: EscalationState,
) -> tuple[Literal["reminder", "escalation"], datetime] | None:
    """What fires next and when: the earlier of a pending reminder and escalation."""
    steps: list[tuple[datetime, Literal["reminder", "escalation"]]] = []
    if state.remind_at is not None and state.reminded_at is None:
        steps.append((state.remind_at, "reminder"))
    if state.escalate_at is not None and state.escalated_at is None:
        steps.append((state.escalate_at, "escalation"))
    if not steps:
        return None
    at, kind = min(steps, key=lambda s: (s[0], s[1] != "reminder"))
    return kind, at
