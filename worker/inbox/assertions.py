"""Identity from a signed assertion: a JWT an identity-aware proxy adds, verified here.

A header naming the user can be written by anyone who reaches the inbox; a
JWT the proxy (or its identity provider) signed cannot. `ProxyAssertionAuth`
takes the JWT from one header, checks its signature against the issuer's
published keys (a JWKS, with PyJWT), its issuer, audience and expiry, and
reads the user and groups from configurable claims:

- Google IAP: header `X-Goog-IAP-JWT-Assertion`; keys
  `https://www.gstatic.com/iap/verify/public_key-jwk`; issuer
  `https://cloud.google.com/iap`; audience
  `/projects/NUMBER/global/backendServices/ID`; claim `email`.
- Cloudflare Access: header `Cf-Access-Jwt-Assertion`; keys
  `https://TEAM.cloudflareaccess.com/cdn-cgi/access/certs`; issuer
  `https://TEAM.cloudflareaccess.com`; audience the application's AUD tag.
- oauth2-proxy with `--pass-authorization-header`: header `Authorization`
  (`Bearer` and the identity provider's ID token); keys the provider's
  `jwks_uri`; issuer the provider's; audience the client id.

(An AWS ALB's `X-Amzn-Oidc-Data` is signed with a key published per key id
as PEM, not as a JWKS, and has no audience: it is not supported here.)

In the `Authorization` header only a `Bearer` value shaped like a JWT is
claimed, so static bearer tokens (`TokenAuth`) still work beside it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jwt
from starlette.requests import HTTPConnection

from durable_tools.errors import ConfigurationError
from durable_tools.worker.inbox.auth import Identity, Network, Rejected, peer_in

__all__ = ["DEFAULT_ALGORITHMS", "Jwks", "ProxyAssertionAuth"]

DEFAULT_ALGORITHMS = ("RS256", "ES256")
"""Signature algorithms accepted unless configured (IAP signs ES256, Cloudflare RS256)."""

_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_MAX_TOKEN_CHARS = 16 * 1024


class Jwks:
    """The issuer's signing keys: a JWKS URL (fetched when needed, cached) or a JWKS file.

    Args:
        source: An `https://` (or `http://`) URL of a JWKS document, or the
            path of one (read once, here).
        cache_seconds: How long keys fetched from a URL are kept (default
            300); a token with an unknown key id fetches again, at most once
            per 30 s (PyJWT's `PyJWKClient`).
        timeout_seconds: Limit of one fetch (default 10).

    Raises:
        ConfigurationError: The file cannot be read or is not a JWKS with
            usable keys.
    """

    def __init__(
        self, source: str, *, cache_seconds: float = 300, timeout_seconds: float = 10
    ) -> None:
        self.source = source
        self._client: jwt.PyJWKClient | None = None
        self._keys: dict[str | None, jwt.PyJWK] = {}
        if source.startswith(("https://", "http://")):
            self._client = jwt.PyJWKClient(
                source, cache_jwk_set=True, lifespan=cache_seconds, timeout=timeout_seconds
            )
            return
        try:
            keys = jwt.PyJWKSet.from_json(Path(source).read_text(encoding="utf-8")).keys
        except OSError as exc:
            raise ConfigurationError(f"cannot read the JWKS {source}: {exc.strerror}") from exc
        except (jwt.PyJWTError, ValueError) as exc:
            raise ConfigurationError(f"{source} is not a JWKS with usable keys: {exc}") from exc
        self._keys = {key.key_id: key for key in keys}
        if len(keys) == 1:
            self._keys.setdefault(None, keys[0])  # a token without `kid`

    def key_for(self, token: str) -> jwt.PyJWK:
        """The key the token's header names (`kid`).

        Raises:
            jwt.PyJWTError: No such key, or the keys could not be fetched.
        """
        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token)
        kid = jwt.get_unverified_header(token).get("kid")
        found = self._keys.get(kid) if isinstance(kid, str | None) else None
        if found is None:
            raise jwt.PyJWKError(f"no key {kid!r} in {self.source}")
        return found


@dataclass(frozen=True, kw_only=True)
class ProxyAssertionAuth:
    """A JWT an identity-aware proxy adds to each request, verified against the issuer's keys.

    Attributes:
        header: The header carrying the JWT (`X-Goog-IAP-JWT-Assertion`,
            `Cf-Access-Jwt-Assertion`, `Authorization`...). A `Bearer ` prefix is
            removed.
        keys: The issuer's keys (`Jwks`).
        issuer: The `iss` claim required.
        audience: The `aud` claim required (one of the token's audiences).
        user_claim: The claim naming the user (default `email`).
        groups_claim: The claim listing the groups: a list of strings or one
            comma-separated string (default `groups`; absent: no groups; `None`:
            never read).
        algorithms: Signature algorithms accepted (default `DEFAULT_ALGORITHMS`;
            never `none` or an HMAC one).
        leeway_seconds: Clock skew allowed on `exp`, `nbf` and `iat` (default 30).
        trusted_proxies: When set, the JWT counts only from these TCP peers as
            well (`None`, the default: from any peer; the signature is the trust).
    """

    header: str
    keys: Jwks
    issuer: str
    audience: str
    user_claim: str = "email"
    groups_claim: str | None = "groups"
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    leeway_seconds: float = 30.0
    trusted_proxies: tuple[Network, ...] | None = field(default=None)

    def __post_init__(self) -> None:
        """Refuse a configuration that could accept a forged token.

        Raises:
            ConfigurationError: No issuer or audience, or an algorithm that is
                `none` or HMAC (a shared secret is not an issuer's key).
        """
        if not self.issuer or not self.audience:
            raise ConfigurationError(
                "a signed proxy assertion needs its issuer and audience "
                "(--proxy-jwt-issuer, --proxy-jwt-audience)"
            )
        weak = [a for a in self.algorithms if a.lower() == "none" or a.upper().startswith("HS")]
        if weak or not self.algorithms:
            raise ConfigurationError(
                f"proxy assertion algorithms must be public-key ones (RS256, ES256, ...), not "
                f"{', '.join(weak) or 'none'}"
            )

    @classmethod
    def configure(
        cls,
        *,
        header: str,
        jwks: str,
        issuer: str,
        audience: str,
        user_claim: str = "email",
        groups_claim: str | None = "groups",
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
    ) -> ProxyAssertionAuth:
        """The authenticator for command-line options (`jwks`: a URL or a file).

        Raises:
            ConfigurationError: As `Jwks` and `__post_init__`.
        """
        return cls(
            header=header,
            keys=Jwks(jwks),
            issuer=issuer,
            audience=audience,
            user_claim=user_claim,
            groups_claim=groups_claim or None,
            algorithms=tuple(algorithms),
        )

    def _token(self, request: HTTPConnection) -> str | None:
        value = request.headers.get(self.header)
        if value is None:
            return None
        scheme, _, rest = value.strip().partition(" ")
        if scheme.lower() == "bearer":
            value = rest.strip()
        elif self.header.lower() == "authorization":
            return None  # basic auth or another scheme: not ours
        if self.header.lower() == "authorization" and not _JWT.fullmatch(value):
            return None  # a static bearer token (TokenAuth)
        return value

    def authenticate(self, request: HTTPConnection) -> Identity | None:
        """The user and groups the verified JWT names, or `None` without one.

        Raises:
            Rejected: The JWT does not verify (signature, key, issuer,
                audience, expiry), lacks the user claim, or comes from a peer
                outside `trusted_proxies`.
        """
        token = self._token(request)
        if token is None:
            return None
        if self.trusted_proxies is not None and not peer_in(request, self.trusted_proxies):
            raise Rejected(f"{self.header} came from an address that is not a trusted proxy")
        if len(token) > _MAX_TOKEN_CHARS or not _JWT.fullmatch(token):
            raise Rejected(f"{self.header} is not a JWT")
        try:
            key = self.keys.key_for(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=list(self.algorithms),
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_seconds,
                options={"require": ["exp", "iss", "aud"]},
            )
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise Rejected(f"{self.header} does not verify: {reason}") from None
        user = claims.get(self.user_claim)
        if not isinstance(user, str) or not user.strip():
            raise Rejected(f"{self.header} names no user (claim {self.user_claim!r})")
        return Identity(user.strip(), self._groups(claims), method="proxy")

    def _groups(self, claims: dict[str, Any]) -> tuple[str, ...]:
        if self.groups_claim is None:
            return ()
        found: object = claims.get(self.groups_claim)
        if found is None:
            return ()
        if isinstance(found, str):
            return tuple(g.strip() for g in found.split(",") if g.strip())
        if isinstance(found, list):
            names = [g for g in cast(list[object], found) if isinstance(g, str)]
            if len(names) == len(cast(list[object], found)):
                return tuple(g for g in names if g)
        raise Rejected(f"claim {self.groups_claim!r} is not a list of group names")
