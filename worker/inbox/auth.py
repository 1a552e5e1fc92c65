"""Who is asking: identities from a trusted proxy, static tokens or basic auth, or dev mode.

Authentication is pluggable: an `Authenticator` maps a request to an
`Identity` or `None`; `Authenticators` tries several in order. Three ship:

| authenticator | for | identity from |
|---|---|---|
| `DevAuth` | one person on their machine (the server binds 127.0.0.1 only) | a fixed name |
| `ProxyHeaderAuth` | behind oauth2-proxy, an identity-aware proxy | `X-Forwarded-User`, `-Groups` |
| `TokenAuth` | small teams | `Authorization: Bearer SECRET` or basic auth `NAME:SECRET` |

CSRF: every form and every state-changing API call carries a token that is
`nonce.mac`, where `nonce` is also in the `dt_csrf` cookie (double submit) and
`mac` is an HMAC of the nonce and the identity's name under the server's
secret, so a token minted for one person is worthless to another. Requests
authenticated with a bearer token (never sent by a browser on its own) need
no CSRF token.

Authorization: `may_decide(identity, approval)` is the one place that says
whether a person may decide on a call (the per-tool approver groups of the
trust work plug in there).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from starlette.requests import HTTPConnection

from durable_tools.conversation import PendingApproval, PendingInteraction
from durable_tools.errors import ConfigurationError

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "Authenticator",
    "Authenticators",
    "Csrf",
    "DevAuth",
    "Identity",
    "ProxyHeaderAuth",
    "TokenAuth",
    "may_decide",
    "refusal",
]

CSRF_COOKIE = "dt_csrf"
"""Cookie holding the CSRF nonce."""

CSRF_FIELD = "csrf_token"
"""Form field carrying the CSRF token."""

CSRF_HEADER = "X-CSRF-Token"
"""Header carrying the CSRF token on API calls."""


@dataclass(frozen=True)
class Identity:
    """An authenticated person or service.

    Attributes:
        name: Who (recorded as `decided_by` / `answered_by` / `sent_by`).
        groups: Groups the authenticator reported (proxy header, token file).
        method: How they were authenticated: `dev`, `proxy`, `bearer`, `basic`.
    """

    name: str
    groups: tuple[str, ...] = ()
    method: str = "dev"

    @property
    def needs_csrf(self) -> bool:
        """Whether a browser could send this request's credentials on its own."""
        return self.method != "bearer"


class Authenticator(Protocol):
    """Maps a request to an identity, or `None` when it carries none this one accepts."""

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The request's identity, or `None`."""
        ...


@dataclass(frozen=True)
class DevAuth:
    """Local dev mode: everyone reaching the server is `name` (bind 127.0.0.1 only).

    Attributes:
        name: The fixed name (default `dev`).
    """

    name: str = "dev"

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """Always `Identity(name, method="dev")`."""
        return Identity(self.name, method="dev")


@dataclass(frozen=True)
class ProxyHeaderAuth:
    """A trusted reverse proxy's headers (only behind a proxy that strips them from clients).

    Attributes:
        user_header: Header naming the user (default `X-Forwarded-User`).
        groups_header: Header with comma-separated groups (default `X-Forwarded-Groups`).
    """

    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The user the proxy names, or `None` without the header."""
        user = request.headers.get(self.user_header, "").strip()
        if not user:
            return None
        groups = request.headers.get(self.groups_header, "")
        return Identity(user, _split_groups(groups), method="proxy")


@dataclass(frozen=True)
class _Credential:
    name: str
    digest: bytes
    groups: tuple[str, ...]


@dataclass(frozen=True)
class TokenAuth:
    """Static tokens and basic auth from a file or an environment variable.

    One credential a line, `NAME:SECRET[:GROUP,GROUP]`; blank lines and `#`
    comments are skipped. `SECRET` is the token itself or `sha256:HEX` of it.
    A request authenticates with `Authorization: Bearer SECRET` or with basic
    auth (`NAME`, `SECRET`).

    Attributes:
        credentials: The parsed lines.
    """

    credentials: tuple[_Credential, ...] = field(default=())

    @classmethod
    def parse(cls, text: str, *, source: str = "credentials") -> TokenAuth:
        """Parse credential lines.

        Raises:
            ConfigurationError: A line without a name and a secret.
        """
        found: list[_Credential] = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(":")
            if len(parts) >= 3 and parts[1] == "sha256":
                name, hexdigest, rest = parts[0], parts[2], parts[3:]
                try:
                    digest = bytes.fromhex(hexdigest)
                except ValueError as exc:
                    raise ConfigurationError(f"{source} line {number}: bad sha256 hex") from exc
            elif len(parts) >= 2:
                name, rest = parts[0], parts[2:]
                digest = hashlib.sha256(parts[1].encode()).digest()
            else:
                raise ConfigurationError(f"{source} line {number}: expected NAME:SECRET[:GROUPS]")
            if not name or len(digest) != 32:
                raise ConfigurationError(f"{source} line {number}: expected NAME:SECRET[:GROUPS]")
            found.append(_Credential(name, digest, _split_groups(rest[0] if rest else "")))
        if not found:
            raise ConfigurationError(f"{source}: no credentials (lines NAME:SECRET[:GROUPS])")
        return cls(tuple(found))

    @classmethod
    def from_file(cls, path: Path) -> TokenAuth:
        """Read credential lines from `path` (ConfigurationError if unreadable)."""
        try:
            return cls.parse(path.read_text(encoding="utf-8"), source=str(path))
        except OSError as exc:
            raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from exc

    def _match(self, secret: str, name: str | None) -> _Credential | None:
        digest = hashlib.sha256(secret.encode()).digest()
        match: _Credential | None = None
        for credential in self.credentials:
            # Compare every credential: the time taken does not tell which matched.
            same = hmac.compare_digest(digest, credential.digest)
            if same and (name is None or hmac.compare_digest(name, credential.name)):
                match = credential
        return match

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The identity of a matching bearer token or basic-auth pair, else `None`."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            credential = self._match(value.strip(), None)
            method = "bearer"
        elif scheme.lower() == "basic" and value.strip():
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
            name, sep, secret = decoded.partition(":")
            if not sep:
                return None
            credential = self._match(secret, name)
            method = "basic"
        else:
            return None
        if credential is None:
            return None
        return Identity(credential.name, credential.groups, method=method)


@dataclass(frozen=True)
class Authenticators:
    """Several authenticators tried in order; the first identity wins.

    Attributes:
        chain: The authenticators.
        basic_realm: Sent in `WWW-Authenticate` on 401 when basic auth is
            accepted, so a browser asks for a name and a secret.
    """

    chain: Sequence[Authenticator]
    basic_realm: str | None = None

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The first identity an authenticator finds, or `None`."""
        for authenticator in self.chain:
            identity = authenticator.authenticate(request)
            if identity is not None:
                return identity
        return None


def _split_groups(text: str) -> tuple[str, ...]:
    return tuple(g.strip() for g in text.replace(";", ",").split(",") if g.strip())


class Csrf:
    """Double-submit CSRF tokens bound to the identity.

    Args:
        secret: The HMAC key (default: random per process; pass the same one
            to every replica behind a load balancer).
    """

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    @staticmethod
    def new_nonce() -> str:
        """A fresh nonce for the `dt_csrf` cookie."""
        return secrets.token_urlsafe(24)

    def token(self, nonce: str, identity: Identity) -> str:
        """The token forms and API calls send: `nonce.mac`."""
        mac = hmac.new(self._secret, f"{nonce}\n{identity.name}".encode(), "sha256")
        return f"{nonce}.{mac.hexdigest()}"

    def check(self, token: str, cookies: Mapping[str, str], identity: Identity) -> bool:
        """Whether `token` matches the cookie's nonce and was minted for `identity`."""
        nonce = cookies.get(CSRF_COOKIE, "")
        if not nonce or not token:
            return False
        return hmac.compare_digest(token, self.token(nonce, identity))


def may_decide(identity: Identity, approval: PendingApproval | PendingInteraction) -> bool:
    """Whether `identity` may decide on (or answer) `approval`.

    The tool's approvers (`@tool(approvers=["group:finance", "user:ana"])`,
    shown on the pending approval) are checked here before anything is sent:
    `user:NAME` (or a bare `NAME`) matches the identity's name, `group:NAME` one of its groups
    (from the proxy's groups header or the tokens file). An approval without
    approvers may be decided by anyone authenticated. The workflow checks
    again when a decision must be signed (docs/approvals.md, "Who may decide").

    Args:
        identity: The authenticated person.
        approval: The pending call, as the page showed it.

    Returns:
        True to allow.
    """
    approvers: list[str] = approval.approvers if isinstance(approval, PendingApproval) else []
    return refusal(identity, approvers) is None


def refusal(identity: Identity, approvers: Sequence[str]) -> str | None:
    """Why `identity` may not decide on a call with these approvers, or `None` if it may.

    Args:
        identity: The authenticated person.
        approvers: The tool's approvers (`group:NAME`, `user:NAME`; empty: anyone).

    Returns:
        A sentence for the page, or `None`.
    """
    if not identity.name:
        return "No decision without an identity: sign in first."
    if not approvers:
        return None
    for approver in approvers:  # as the worker checks (approvals.approver_problem)
        kind, sep, name = approver.partition(":")
        if sep and kind == "group":
            if name in identity.groups:
                return None
        elif (name if sep and kind == "user" else approver) == identity.name:
            return None
    groups = ", ".join(identity.groups) or "none"
    return (
        f"Only {' or '.join(approvers)} may decide on this call; you are signed in as "
        f"{identity.name} (groups: {groups})."
    )
