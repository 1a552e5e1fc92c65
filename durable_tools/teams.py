"""The team that owns a conversation: recorded at start, filtered on server-side.

A conversation may be started for a team (`Conversations.start(...,
team="support")`, `durable-tools run --team support`). The team is the
conversation's `DurableToolsTeam` search attribute (Keyword), set when the
workflow starts and carried across continue-as-new (Temporal copies a run's
search attributes to the next), so the inbox's list asks Temporal only for
the conversations of the teams a person belongs to (`team_clause`) and
every other route checks the one it opens (worker/inbox/authz.py). A
conversation started without a team has no attribute.

Team names are plain identifiers (`TEAM_PATTERN`): they are written into
visibility queries, so nothing that needs quoting is ever accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from temporalio.common import SearchAttributeKey

from durable_tools.errors import ConfigurationError

__all__ = ["TEAM", "TEAM_PATTERN", "check_team", "team_clause"]

TEAM: Final = SearchAttributeKey.for_keyword("DurableToolsTeam")
"""The search attribute naming a conversation's team (Keyword; absent: no team)."""

TEAM_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
"""What a team name is: 1 to 64 ASCII letters, digits, `_`, `.`, `@`, `-`, not
starting with punctuation (so a name is safe inside a visibility query)."""


def check_team(team: str) -> str:
    """`team` if it is a valid team name (`TEAM_PATTERN`).

    Raises:
        ConfigurationError: One line saying what a team name may hold.
    """
    if not TEAM_PATTERN.fullmatch(team):
        raise ConfigurationError(
            f"team {team[:80]!r} is not a team name: 1 to 64 ASCII letters, digits, '_', '.', "
            "'@' or '-', starting with a letter or digit"
        )
    return team


def team_clause(teams: Iterable[str], *, untagged: bool) -> str:
    """A visibility query clause matching conversations of `teams`.

    Args:
        teams: Team names (each checked with `check_team`).
        untagged: Whether conversations without a team match too.

    Returns:
        `(DurableToolsTeam IN ('a','b') OR DurableToolsTeam IS NULL)`, or
        `DurableToolsTeam IS NULL`, or a clause that matches nothing when
        there are no teams and untagged ones are excluded.

    Raises:
        ConfigurationError: A name is not a team name.
    """
    names = sorted({check_team(t) for t in teams})
    parts: list[str] = []
    if names:
        parts.append(f"{TEAM.name} IN ({', '.join(repr(n) for n in names)})")
    if untagged:
        parts.append(f"{TEAM.name} IS NULL")
    if not parts:
        return "WorkflowId = ''"  # no workflow has an empty id: nothing matches
    return f"({' OR '.join(parts)})"
