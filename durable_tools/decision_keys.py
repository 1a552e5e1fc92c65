"""Keys that sign and verify decisions: HMAC-SHA256 secrets and Ed25519 key pairs.

Two kinds of key (docs/approvals.md, "Trust model"):

- **HMAC-SHA256** (RFC 2104): one shared secret of at least
  `MIN_HMAC_KEY_BYTES` (32) bytes, the length of the hash's output (RFC 2104,
  section 3: shorter keys weaken it). The signing service and every worker
  hold the same secret, so any worker host could also sign.
- **Ed25519** (RFC 8032): the signing service (the inbox) holds the private
  key and workers hold only the public key, so a worker host cannot forge a
  decision. Needs the `cryptography` package (the `signing` extra).

Text forms, one entry each, as `DURABLE_TOOLS_DECISION_KEYS` (comma
separated), `--decision-key-file` and `DURABLE_TOOLS_INBOX_DECISION_KEY` read them:

| entry | key |
|---|---|
| `KEY_ID:BASE64` | an HMAC secret (32 bytes or more), for signing and verifying |
| `KEY_ID:ed25519:BASE64` | a raw 32-byte Ed25519 public key (verifying, on workers) |
| `KEY_ID:ed25519-private:BASE64` | a raw 32-byte Ed25519 private key (signing, the inbox) |

`durable-tools keygen` prints a new pair of entries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias, cast

from durable_tools.errors import ConfigurationError, MissingExtra

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    VerifyingKey: TypeAlias = bytes | Ed25519PublicKey
    SigningKey: TypeAlias = bytes | Ed25519PrivateKey
else:  # `cryptography` is optional: at run time (`get_type_hints`) a key is any object
    VerifyingKey = object
    SigningKey = object

__all__ = [
    "MIN_HMAC_KEY_BYTES",
    "SigningKey",
    "VerifyingKey",
    "check_verifying_keys",
    "generate_ed25519_entries",
    "parse_signing_key",
    "parse_verifying_keys",
    "sign_bytes",
    "verify_bytes",
]

MIN_HMAC_KEY_BYTES: Final = 32
"""Shortest HMAC-SHA256 key accepted, in bytes (SHA-256's output length; RFC 2104, §3)."""

# `VerifyingKey`: a key a worker checks signatures with, an HMAC secret or an
# Ed25519 public key; `SigningKey`: one a service signs with, an HMAC secret or
# an Ed25519 private key (defined above, for the type checker and at run time).

_ED25519 = "ed25519"
_ED25519_PRIVATE = "ed25519-private"


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ModuleNotFoundError:
        raise MissingExtra("Ed25519 decision keys", "signing") from None
    return ed25519


def _check_hmac(key_id: str, key: bytes, source: str) -> None:
    if len(key) < MIN_HMAC_KEY_BYTES:
        raise ConfigurationError(
            f"{source}: HMAC key {key_id[:40]!r} has {len(key)} bytes; decision keys need at "
            f"least {MIN_HMAC_KEY_BYTES} random bytes (e.g. $(head -c 32 /dev/urandom | base64))"
        )


def check_verifying_keys(keys: Mapping[str, object], *, source: str) -> dict[str, VerifyingKey]:
    """Check keys given in code (`App(decision_keys=...)`): each an HMAC secret or public key.

    Args:
        keys: Keys by key id.
        source: Where they came from, for the error message.

    Returns:
        The same keys, as a new dict.

    Raises:
        ConfigurationError: A key is neither `bytes` of at least
            `MIN_HMAC_KEY_BYTES` nor an Ed25519 public key (a private key is
            refused: workers hold public keys only).
    """
    checked: dict[str, VerifyingKey] = {}
    for key_id, key in keys.items():
        if isinstance(key, bytes):
            _check_hmac(key_id, key, source)
            checked[key_id] = key
            continue
        ed25519 = _ed25519()
        if isinstance(key, ed25519.Ed25519PublicKey):
            checked[key_id] = cast("Ed25519PublicKey", key)
            continue
        what = (
            "an Ed25519 private key (a worker holds the public key only)"
            if isinstance(key, ed25519.Ed25519PrivateKey)
            else f"a {type(key).__name__}"
        )
        raise ConfigurationError(
            f"{source}: key {key_id[:40]!r} is {what}, not bytes (HMAC) or an Ed25519PublicKey"
        )
    return checked


def _entry(entry: str, source: str, example: str) -> tuple[str, str, bytes]:
    """`(key_id, kind, raw)` of one `KEY_ID:[KIND:]BASE64` entry."""
    key_id, sep, rest = entry.partition(":")
    kind, sep2, encoded = rest.partition(":")
    if not sep2:
        kind, encoded = "", rest
    try:
        raw = base64.b64decode(encoded, validate=True) if sep and key_id else b""
    except binascii.Error:
        raw = b""
    if not raw or kind not in ("", _ED25519, _ED25519_PRIVATE):
        raise ConfigurationError(f"{source}: entry {key_id[:40]!r}… is not {example}")
    return key_id, kind, raw


def _ed25519_key(key_id: str, kind: str, raw: bytes, source: str) -> Any:
    ed25519 = _ed25519()
    if len(raw) != 32:
        raise ConfigurationError(
            f"{source}: Ed25519 key {key_id[:40]!r} has {len(raw)} bytes, not 32 (raw key)"
        )
    if kind == _ED25519:
        return ed25519.Ed25519PublicKey.from_public_bytes(raw)
    return ed25519.Ed25519PrivateKey.from_private_bytes(raw)


def parse_verifying_keys(text: str, *, source: str) -> dict[str, VerifyingKey]:
    """Keys from `KEY_ID:BASE64` (HMAC) and `KEY_ID:ed25519:BASE64` (public) entries.

    Args:
        text: Comma-separated entries; blank: no keys.
        source: Where the text came from (a variable or file), for errors.

    Returns:
        Keys by key id.

    Raises:
        ConfigurationError: A malformed entry, an HMAC key under
            `MIN_HMAC_KEY_BYTES`, an Ed25519 key not 32 bytes, or a private
            key (workers hold public keys only).
        MissingExtra: An Ed25519 entry without the `cryptography` package.
    """
    example = "KEY_ID:BASE64 or KEY_ID:ed25519:BASE64 (e.g. k1:$(head -c 32 /dev/urandom | base64))"
    keys: dict[str, VerifyingKey] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        key_id, kind, raw = _entry(entry, source, example)
        if kind == _ED25519_PRIVATE:
            raise ConfigurationError(
                f"{source}: key {key_id[:40]!r} is an Ed25519 private key; a worker holds the "
                "public key only (KEY_ID:ed25519:BASE64, from `durable-tools keygen`)"
            )
        if kind == _ED25519:
            keys[key_id] = _ed25519_key(key_id, kind, raw, source)
        else:
            _check_hmac(key_id, raw, source)
            keys[key_id] = raw
    return keys


def parse_signing_key(text: str, *, source: str) -> tuple[str, SigningKey] | None:
    """The one key a service signs with: `KEY_ID:BASE64` or `KEY_ID:ed25519-private:BASE64`.

    Args:
        text: One entry (blanks around it ignored); blank: no key.
        source: Where the text came from, for errors.

    Returns:
        `(key_id, key)`, or `None` for blank text.

    Raises:
        ConfigurationError: Not exactly one well-formed entry, an HMAC key
            under `MIN_HMAC_KEY_BYTES`, or an Ed25519 public key (it cannot sign).
        MissingExtra: An Ed25519 entry without the `cryptography` package.
    """
    entries = [part.strip() for part in text.split(",") if part.strip()]
    if not entries:
        return None
    example = "KEY_ID:BASE64 or KEY_ID:ed25519-private:BASE64"
    if len(entries) != 1:
        raise ConfigurationError(
            f"{source}: one {example} entry signs decisions, not {len(entries)}"
        )
    key_id, kind, raw = _entry(entries[0], source, example)
    if kind == _ED25519:
        raise ConfigurationError(
            f"{source}: key {key_id[:40]!r} is an Ed25519 public key, which cannot sign "
            "(KEY_ID:ed25519-private:BASE64)"
        )
    if kind == _ED25519_PRIVATE:
        return key_id, _ed25519_key(key_id, kind, raw, source)
    _check_hmac(key_id, raw, source)
    return key_id, raw


def sign_bytes(key: SigningKey, payload: bytes) -> str:
    """Base64 signature of `payload`: HMAC-SHA256 with a secret, else Ed25519.

    Raises:
        ConfigurationError: An HMAC key under `MIN_HMAC_KEY_BYTES`.
    """
    if isinstance(key, bytes):
        _check_hmac("", key, "sign_decision")
        digest = hmac.new(key, payload, hashlib.sha256).digest()
    else:
        digest = key.sign(payload)
    return base64.b64encode(digest).decode("ascii")


def verify_bytes(key: VerifyingKey, payload: bytes, signature: str) -> bool:
    """Whether `signature` (base64) signs `payload` with `key`; never raises for a bad one."""
    if isinstance(key, bytes):
        expected = base64.b64encode(hmac.new(key, payload, hashlib.sha256).digest())
        return hmac.compare_digest(expected, signature.encode("utf-8", "replace"))
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return False
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(raw, payload)
    except InvalidSignature:
        return False
    return True


def generate_ed25519_entries(key_id: str) -> tuple[str, str]:
    """A new Ed25519 key pair as `(signing entry, verifying entry)` text.

    Raises:
        MissingExtra: Without the `cryptography` package.
    """
    from cryptography.hazmat.primitives import serialization

    private = _ed25519().Ed25519PrivateKey.generate()
    raw_private = private.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    raw_public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return (
        f"{key_id}:{_ED25519_PRIVATE}:{base64.b64encode(raw_private).decode()}",
        f"{key_id}:{_ED25519}:{base64.b64encode(raw_public).decode()}",
    )
