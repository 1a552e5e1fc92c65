"""Who is asking: identities from a trusted proxy, static tokens or basic auth, or dev mode.

Authentication is pluggable: an `Authenticator` maps a request to an
`Identity` or `None`; `Authenticators` tries several in order. Four ship:

| authenticator | for | identity from |
|---|---|---|
| `DevAuth` | one person on their machine (127.0.0.1 only) | a fixed name |
| `ProxyHeaderAuth` | behind oauth2-proxy | `X-Forwarded-User`, `-Groups` from a trusted proxy |
| `ProxyAssertionAuth` | behind IAP, Cloudflare Access | a JWT the proxy signed (`assertions.py`) |
| `TokenAuth` | small teams | `Authorization: Bearer SECRET` or basic auth `NAME:SECRET` |

A request never mixes methods. The first authenticator that finds its own
kind of credential in a request decides alone: it returns the identity or
raises `Rejected` (401), and no later one is asked. Identity headers from a
peer outside the trusted proxies are such a credential: the request is
refused, not answered as whoever its bearer token names. A trusted proxy's
identity wins over an `Authorization` header it passes along.

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
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable, Mapping, Sequence
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
    "LOOPBACK_NETWORKS",
    "Authenticator",
    "Authenticators",
    "Csrf",
    "DevAuth",
    "Identity",
    "Network",
    "ProxyHeaderAuth",
    "Rejected",
    "TokenAuth",
    "already_approved",
    "may_decide",
    "parse_networks",
    "peer_in",
    "refusal",
]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
"""One trusted address range (`ipaddress.ip_network("10.0.0.0/8")`)."""

LOOPBACK_NETWORKS: tuple[Network, ...] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)
"""This machine: the trusted proxies when none are named and the inbox binds loopback."""

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


class Rejected(Exception):
    """A request carries an authenticator's own kind of credential, and it does not hold.

    Answered 401 with `reason`; no other authenticator is asked (a request
    never mixes methods).

    Args:
        reason: One sentence for the person or program that sent it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Authenticator(Protocol):
    """Maps a request to an identity, or `None` when it carries none this one accepts."""

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The request's identity, or `None`.

        Raises:
            Rejected: The request carries this authenticator's kind of
                credential, and it is not valid (forged, expired, from an
                untrusted peer).
        """
        ...


def parse_networks(texts: Iterable[str]) -> tuple[Network, ...]:
    """Address ranges from CIDR texts (`127.0.0.1/32`, `10.0.0.0/8`, `fd00::/8`, a bare address).

    Raises:
        ConfigurationError: A text that is not an address or a CIDR range.
    """
    found: list[Network] = []
    for text in texts:
        try:
            found.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError as exc:
            raise ConfigurationError(
                f"trusted proxy {text!r} is not an address range (e.g. 127.0.0.1/32, 10.0.0.0/8)"
            ) from exc
    return tuple(found)


def peer_in(request: HTTPConnection, networks: Sequence[Network]) -> bool:
    """Whether the request's TCP peer (`request.client.host`) is in one of `networks`.

    The peer is the address the connection came from, never a header such as
    `X-Forwarded-For`, which any client can write. An IPv4 address mapped into
    IPv6 (`::ffff:127.0.0.1`) counts as itself; no peer (a Unix socket) is in none.
    """
    client = request.client
    if client is None:
        return False
    try:
        address = ipaddress.ip_address(client.host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


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
    """A trusted reverse proxy's headers, taken only from the proxy's own addresses.

    Attributes:
        user_header: Header naming the user (default `X-Forwarded-User`).
        groups_header: Header with comma-separated groups (default `X-Forwarded-Groups`).
        trusted_proxies: The proxy's addresses, checked against the TCP peer
            (default `LOOPBACK_NETWORKS`: a proxy on this machine or in this pod).
    """

    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"
    trusted_proxies: tuple[Network, ...] = LOOPBACK_NETWORKS

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The user the proxy names, or `None` when neither header is there.

        Raises:
            Rejected: The headers come from a peer outside `trusted_proxies`
                (whatever else the request carries), or name no user.
        """
        user = request.headers.get(self.user_header)
        groups = request.headers.get(self.groups_header)
        if user is None and groups is None:
            return None
        if not peer_in(request, self.trusted_proxies):
            peer = request.client.host if request.client else "a local socket"
            raise Rejected(
                f"{self.user_header} / {self.groups_header} came from {peer}, "
                "which is not a trusted proxy; sign in through the proxy"
            )
        if not (user or "").strip():
            raise Rejected(f"the proxy sent no user in {self.user_header}")
        return Identity((user or "").strip(), _split_groups(groups or ""), method="proxy")


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
            # Bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500).
            if same and (
                name is None or hmac.compare_digest(name.encode(), credential.name.encode())
            ):
                match = credential
        return match

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The identity of a matching bearer token or basic-auth pair; `None` without one.

        Raises:
            Rejected: A bearer token or basic-auth pair that matches no credential.
        """
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            credential = self._match(value.strip(), None)
            method = "bearer"
        elif scheme.lower() == "basic" and value.strip():
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode()
            except ValueError:  # binascii.Error, UnicodeDecodeError, non-ASCII text
                raise Rejected("the basic-auth credentials are not base64 of UTF-8") from None
            name, sep, secret = decoded.partition(":")
            credential = self._match(secret, name) if sep else None
            method = "basic"
        else:
            return None
        if credential is None:
            raise Rejected("unknown token or name and secret")
        return Identity(credential.name, credential.groups, method=method)


@dataclass(frozen=True)
class Authenticators:
    """Several authenticators tried in order; the first that claims the request decides.

    Attributes:
        chain: The authenticators.
        basic_realm: Sent in `WWW-Authenticate` on 401 when basic auth is
            accepted, so a browser asks for a name and a secret.
    """

    chain: Sequence[Authenticator]
    basic_realm: str | None = None

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The first identity an authenticator finds, or `None`.

        Raises:
            Rejected: An authenticator found its kind of credential and refused
                it; the ones after it are not asked.
        """
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
        # Bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500).
        expected = self.token(nonce, identity).encode()
        return hmac.compare_digest(token.encode("utf-8", "replace"), expected)


def may_decide(
    identity: Identity,
    approval: PendingApproval | PendingInteraction,
    *,
    approving: bool = False,
) -> bool:
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
        approving: The decision is an approval: someone already counted
            toward the call's quorum (`PendingApproval.approved_by`) may not
            approve again (the workflow would refuse it; each person counts
            once), though they may still deny.

    Returns:
        True to allow.
    """
    if not isinstance(approval, PendingApproval):
        return refusal(identity, []) is None
    if approving and already_approved(identity, approval.approved_by, approval.quorum):
        return False
    return refusal(identity, approval.approvers) is None


def already_approved(identity: Identity, approved_by: Sequence[str], quorum: int) -> str | None:
    """Why `identity` may not approve a call again, or `None` if they did not yet.

    Args:
        identity: The authenticated person.
        approved_by: Who approved the call so far (`PendingApproval.approved_by`).
        quorum: Distinct approvals the call needs.

    Returns:
        A sentence for the page (`None` when `identity` is not in `approved_by`).
    """
    if not identity.name or identity.name not in approved_by:
        return None
    return (
        f"You ({identity.name}) already approved this call; each person counts once "
        f"({len(approved_by)} of {quorum} distinct approvals). "
        "You may still deny it."
    )


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
