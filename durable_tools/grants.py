"""Grants: "approve for the rest of this conversation", scoped to a tool and its arguments.

An approver who approves a call may attach a `GrantScope` to the decision
(`Conversations.approve(..., grant=GrantScope(tool="refund", arguments=
{"/order": "A-1"}))`, `durable-tools approve --grant`, the inbox's checkbox).
The workflow then records a `Grant` (who, when, the scope, the call it was
given on), carries it across continue-as-new, and a later call of that tool
in the same conversation whose arguments match the scope runs without
waiting, the grant recorded with it (`Grant.uses`, the `approval_decided`
event with outcome `granted`).

A grant may expire (`GrantScope.expires_after`, seconds from when the
workflow took it) and may be revoked (the `revoke_grant` signal, a
`GrantRevocation`: `Conversations.revoke_grant`, `durable-tools revoke-grant`);
an expired or revoked grant stays in the record, marked, and runs nothing
more.

The pattern is deliberately small: each key of `arguments` is an RFC 6901
JSON pointer into the call's arguments, each value a JSON scalar the
pointed-at value must equal (same JSON type; numbers compared as numbers).
No wildcards, no expressions: what an approver grants is exactly what they
read. An empty `arguments` grants every call of the tool.

A grant never stands in for more than one approver: a call whose policy
asks for a quorum of N > 1 takes no grant and is never run by one. A call
that needs a signed decision (it has approvers) runs by a grant only when
the grant came in a signed decision whose signer is among that call's
approvers.

Pure functions and data: workflow code imports this module.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

__all__ = [
    "MAX_GRANTS",
    "MAX_GRANT_USES",
    "MAX_GRANT_SECONDS",
    "Grant",
    "GrantRevocation",
    "GrantScope",
    "JsonScalar",
    "describe_scope",
    "expiry",
    "explain_grant",
    "scope_matches",
]

MAX_GRANTS: Final[int] = 100
"""Grants one conversation holds; a decision that would add one more is rejected."""

MAX_GRANT_USES: Final[int] = 100
"""Call ids a grant keeps of the calls it ran (the newest)."""

MAX_GRANT_SECONDS: Final[float] = 366 * 24 * 3600.0
"""Longest `GrantScope.expires_after`: a year (and a day)."""

_MAX_POINTERS: Final[int] = 16
_MAX_TEXT: Final[int] = 1000
_MAX_SAFE_INT: Final[int] = 2**53
_POINTER: Final = re.compile(r"(/([^~/]|~[01])*)*")

JsonScalar = str | bool | int | float | None
"""A value a grant's argument pattern compares with: a JSON scalar."""


def _text_ok(text: str, limit: int) -> bool:
    if not 0 < len(text) <= limit:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return "\x00" not in text


class GrantScope(BaseModel):
    """Which later calls a grant lets run: one tool, and an argument pattern.

    Strict like `Decision`: exact JSON types, no unknown fields.

    Attributes:
        tool: The tool's name (the call's own tool).
        arguments: JSON pointer (RFC 6901, e.g. `/order`, `/to/iban`) →
            the value it must point at (a JSON scalar; strings at most
            1,000 characters, integers within ±2^53). At most 16. Empty:
            every call of the tool.
        expires_after: Seconds after the workflow took the grant when it
            stops running calls (more than 0, at most `MAX_GRANT_SECONDS`).
            `None` (the default): for the rest of the conversation. Left out
            of the JSON when `None`, so a signed decision without it signs
            the bytes it signed before the field existed.
    """

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    tool: str
    arguments: dict[str, JsonScalar] = Field(default_factory=dict[str, JsonScalar])
    expires_after: float | None = Field(
        default=None, gt=0, le=MAX_GRANT_SECONDS, allow_inf_nan=False
    )

    @model_serializer(mode="wrap")
    def _without_expiry(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if dumped.get("expires_after") is None:
            dumped.pop("expires_after", None)
        return dumped

    @field_validator("tool")
    @classmethod
    def _tool(cls, value: str) -> str:
        if not _text_ok(value, 200):
            raise ValueError("tool: 1 to 200 characters of UTF-8 text")
        return value

    @field_validator("arguments")
    @classmethod
    def _pattern(cls, value: dict[str, JsonScalar]) -> dict[str, JsonScalar]:
        if len(value) > _MAX_POINTERS:
            raise ValueError(f"arguments: at most {_MAX_POINTERS} pointers")
        for pointer, expected in value.items():
            if len(pointer) > 200 or not _POINTER.fullmatch(pointer) or not pointer:
                raise ValueError(
                    f"arguments: {pointer[:50]!r} is not a JSON pointer like '/order' "
                    "(RFC 6901; ~0 and ~1 the only escapes)"
                )
            if not (pointer.isascii() or _text_ok(pointer, 200)):
                raise ValueError("arguments: a pointer must be UTF-8 text")
            if isinstance(expected, str) and not (expected == "" or _text_ok(expected, _MAX_TEXT)):
                raise ValueError(f"arguments: a string value of at most {_MAX_TEXT} characters")
            if isinstance(expected, float) and not math.isfinite(expected):
                raise ValueError("arguments: a number must be finite")
            if (
                isinstance(expected, int)
                and not isinstance(expected, bool)
                and abs(expected) > _MAX_SAFE_INT
            ):
                raise ValueError("arguments: an integer within ±2^53")
        return value


class Grant(BaseModel):
    """A grant the conversation holds (recorded in its state, carried across continue-as-new).

    Attributes:
        id: `g1`, `g2`, ... in the order they were given.
        scope: The tool and argument pattern.
        granted_by: Who approved with it (`Decision.decided_by`, cleaned).
        groups: The groups a signed decision asserted for them.
        signed: Whether it came in a signed decision (only then can it run
            calls that need one).
        granted_at: When the workflow took it (its clock).
        call_id: The call whose approval carried it.
        uses: The calls it ran without waiting (the newest `MAX_GRANT_USES`).
        expires_at: When it stops running calls (`granted_at` plus
            `scope.expires_after`); `None`: never.
        revoked_by: Who revoked it (`""`: not revoked, or revoked by
            someone who did not say).
        revoked_at: When the workflow took the revocation; `None`: in force.
        revoke_reason: Why, as the revocation said.
    """

    id: str
    scope: GrantScope
    granted_by: str
    groups: list[str] = Field(default_factory=list[str])
    signed: bool = False
    granted_at: datetime
    call_id: str
    uses: list[str] = Field(default_factory=list[str])
    expires_at: datetime | None = None
    revoked_by: str = ""
    revoked_at: datetime | None = None
    revoke_reason: str = ""

    def in_force(self, now: datetime) -> bool:
        """Whether it may still run a call at `now` (neither revoked nor expired)."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


class GrantRevocation(BaseModel):
    """Input of the `revoke_grant` signal: end a grant before the conversation does.

    Strict like `Decision`: exact JSON types, no unknown fields.

    Attributes:
        grant_id: The grant (`g1`, `g2`, ...: `PendingState.grants`).
        revoked_by: Who revokes it (recorded; the inbox sends the signed-in
            identity, like a decision's `decided_by`).
        reason: Why (at most 500 characters shown).
    """

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    grant_id: str = Field(min_length=1, max_length=200)
    revoked_by: str = Field(default="", max_length=500)
    reason: str = Field(default="", max_length=2000)


def expiry(granted_at: datetime, scope: GrantScope) -> datetime | None:
    """When a grant of `scope` taken at `granted_at` expires (`None`: never)."""
    if scope.expires_after is None:
        return None
    return granted_at + timedelta(seconds=scope.expires_after)


def _resolve(document: Any, pointer: str) -> tuple[bool, Any]:
    """The value at `pointer` in `document`: `(found, value)`."""
    value = document
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            mapping = cast(Mapping[str, Any], value)
            if token not in mapping:
                return False, None
            value = mapping[token]
        elif isinstance(value, list):
            items = cast(list[Any], value)
            if not token.isdigit() or (token != "0" and token.startswith("0")):
                return False, None
            index = int(token)
            if index >= len(items):
                return False, None
            value = items[index]
        else:
            return False, None
    return True, value


def _same(actual: Any, expected: JsonScalar) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual is expected
    if isinstance(expected, int | float):
        return isinstance(actual, int | float) and actual == expected
    if expected is None:
        return actual is None
    return isinstance(actual, str) and actual == expected


def scope_matches(scope: GrantScope, tool: str, arguments: str) -> bool:
    """Whether a call of `tool` with argument text `arguments` is within `scope`.

    Arguments that are not a JSON object match only an empty pattern, and
    only when they are `{}`-like (no text, or an object).
    """
    if tool != scope.tool:
        return False
    try:
        document: Any = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        return False
    if not isinstance(document, dict):
        return False
    for pointer, expected in scope.arguments.items():
        found, actual = _resolve(document, pointer)
        if not found or not _same(actual, expected):
            return False
    return True


def describe_scope(scope: GrantScope) -> str:
    """The scope in one line: `refund where /order == "A-1"` (or `every refund call`).

    With `expires_after`, `for 3600 s` follows.
    """
    lasting = f" for {scope.expires_after:g} s" if scope.expires_after is not None else ""
    if not scope.arguments:
        return f"every {scope.tool} call{lasting}"
    terms = " and ".join(
        f"{pointer} == {json.dumps(value, ensure_ascii=False)}"
        for pointer, value in sorted(scope.arguments.items())
    )
    return f"{scope.tool} where {terms}{lasting}"


def explain_grant(grant: Grant) -> str:
    """One line: which grant, by whom, when, on which call, for what.

    E.g. `grant g1 by ana at 2026-11-26 20:41:07 UTC on call r1: refund
    where /order == "A-1"` (at most 500 characters).
    """
    when = grant.granted_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    text = (
        f"grant {grant.id} by {grant.granted_by or 'someone'} at {when} on call "
        f"{grant.call_id}: {describe_scope(grant.scope)}"
    )
    return text if len(text) <= 500 else text[:499] + "…"
