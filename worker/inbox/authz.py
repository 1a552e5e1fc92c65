"""What an identity may do with a conversation: view, send, decide, answer, resume, retry, ...

The actions: view, send, decide, answer, resume, retry, raise_budget,
set_policy (install a policy version in a running conversation), cancel.

Every route of the inbox (pages, API, SSE streams, the list) asks one
`Authorizer`. Authentication (auth.py) says who is asking; this says what
they may do. A conversation an identity may not view does not exist for it:
never listed, its URL answers 404 and its event stream is refused the same
way, so the inbox does not even confirm that an id is in use.

The default, `TeamAuthorizer`, needs no code: a conversation is owned by the
team it was started for (its `DurableToolsTeam` search attribute,
`durable_tools.teams`), and an identity's groups map to teams (by default a
group is the team of the same name; `--team GROUP=TEAM` maps others). Admin
groups see every team, as does dev mode's one local person. Conversations
started without a team are visible to everyone unless `require_team` is set
(then to admins only). Deciding and answering also need `may_decide` (the
tool's approvers). Custom rules plug in as any object with the `Authorizer`
methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from durable_tools.errors import ConfigurationError
from durable_tools.teams import check_team, team_clause
from durable_tools.worker.inbox.auth import Identity

__all__ = ["ACTIONS", "Action", "Authorizer", "TeamAuthorizer", "parse_team_map"]

Action = Literal[
    "view", "send", "decide", "answer", "resume", "retry", "raise_budget", "set_policy", "cancel"
]
"""What an identity asks to do with a conversation."""

ACTIONS: tuple[Action, ...] = (
    "view",
    "send",
    "decide",
    "answer",
    "resume",
    "retry",
    "raise_budget",
    "set_policy",
    "cancel",
)


class Authorizer(Protocol):
    """Says what an identity may do; the inbox asks it on every route."""

    def visibility_clause(self, identity: Identity) -> str | None:
        """A visibility query clause restricting the list to what `identity` may view.

        Returns:
            A clause ANDed to the list's query, or `None`: no restriction.
        """
        ...

    def may(self, identity: Identity, action: Action, team: str | None) -> bool:
        """Whether `identity` may do `action` on a conversation owned by `team` (`None`: none)."""
        ...


@dataclass(frozen=True)
class TeamAuthorizer:
    """Conversations belong to teams; groups map to teams.

    Attributes:
        team_of_group: Groups mapped to teams (`--team GROUP=TEAM`). A group
            not in it is the team of the same name (when that is a valid
            team name).
        admin_groups: Groups that may view and act on every conversation.
        require_team: Hide conversations without a team from everyone but
            admins (default False: everyone sees them, as before teams).
    """

    team_of_group: Mapping[str, str] = field(default_factory=dict[str, str])
    admin_groups: frozenset[str] = frozenset()
    require_team: bool = False

    def teams(self, identity: Identity) -> frozenset[str]:
        """The teams `identity` belongs to, from its groups."""
        found: set[str] = set()
        for group in identity.groups:
            team = self.team_of_group.get(group, group)
            try:
                found.add(check_team(team))
            except ConfigurationError:
                continue  # a group that names no team
        return frozenset(found)

    def _admin(self, identity: Identity) -> bool:
        # Dev mode is one person on their own machine (127.0.0.1 only): they see it all.
        return identity.method == "dev" or not self.admin_groups.isdisjoint(identity.groups)

    def visibility_clause(self, identity: Identity) -> str | None:
        """`None` for admins, else the identity's teams (and untagged ones unless required)."""
        if self._admin(identity):
            return None
        return team_clause(self.teams(identity), untagged=not self.require_team)

    def may(self, identity: Identity, action: Action, team: str | None) -> bool:
        """Any action on a conversation of one of its teams; untagged ones unless required.

        `decide` and `answer` are further checked against the call's
        approvers (`may_decide`) by the inbox. `raise_budget` is allowed as
        `retry` is: an authorizer that keeps spending to some people
        refuses it for the others; so is `set_policy`, which an authorizer
        that keeps policies to some people refuses for the others.
        """
        del action  # every action follows the conversation's visibility
        if self._admin(identity):
            return True
        if not team:
            return not self.require_team
        return team in self.teams(identity)


def parse_team_map(entries: Sequence[str]) -> dict[str, str]:
    """`GROUP=TEAM` entries (`--team`) as a mapping.

    Raises:
        ConfigurationError: An entry without `=`, an empty group, or a team
            that is not a team name.
    """
    mapping: dict[str, str] = {}
    for entry in entries:
        group, sep, team = entry.partition("=")
        if not sep or not group.strip():
            raise ConfigurationError(f"--team {entry[:80]!r} is not GROUP=TEAM")
        mapping[group.strip()] = check_team(team.strip())
    return mapping
