"""Storage keys: which external storage references a worker fetches, decided from the reference.

A reference in history (`temporalio.converter.ExternalStorage`) names a driver
and a claim (`{"sha256": ...}` for `LocalFileStorageDriver`; bucket, key and
hash for S3). Any client can send one in a signal or an update, so a worker
must tell, before any I/O, whether a reference is one to fetch; what it
rejects must be rejected on every replay (DESIGN.md, invariant 10), and a
fetch that fails must fail the workflow task (retried), never become a
verdict (`durable_tools.references`).

With storage keys (`PayloadStorage(keys=...)` or `DURABLE_TOOLS_STORAGE_KEYS`),
every claim a worker or a trusted client stores carries an HMAC-SHA256 over
the driver name and the claim, under the entry `MAC_CLAIM_KEY`
(`v1:<key id>:<64 hex digits>`). Only references with a valid MAC under a key
this process holds are fetched; a reference without a MAC, with a MAC under
an unknown key id, with a wrong MAC, or with a claim of the wrong shape is
rejected from those facts alone. Rotation: one key signs (`signing_key_id`,
default the first), every key held verifies. Add a new key to every worker
and client first, then make it the signing key; drop an old key only when no
history that may still be replayed (namespace retention) holds a reference it
signed, or those references become rejections on replay.

Without keys, a reference is fetched when its claim has the shape its driver
makes (`driver_claim_problem`); a client that can signal a conversation can
then stall it (its workflow task retried) with a well-formed reference to an
object that does not exist, but never makes it lose a message or diverge on
replay. Configure keys to close that.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Final, Protocol, runtime_checkable

from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from durable_tools.errors import ConfigurationError, StorageError

__all__ = [
    "MAC_CLAIM_KEY",
    "MIN_KEY_BYTES",
    "STORAGE_KEYS_ENV",
    "ClaimChecking",
    "SignedStorageDriver",
    "claim_mac",
    "driver_claim_problem",
    "storage_keys_from_environment",
]

MAC_CLAIM_KEY: Final[str] = "durable-tools-mac"
"""The claim entry holding `v1:<key id>:<hex HMAC-SHA256>`."""

STORAGE_KEYS_ENV: Final[str] = "DURABLE_TOOLS_STORAGE_KEYS"
"""`KEY_ID:BASE64,...`; the first entry signs, every entry verifies."""

MIN_KEY_BYTES: Final[int] = 16
"""The shortest storage key accepted, in bytes (32 random bytes recommended)."""

_VERSION = "v1"
_DOMAIN = b"durable-tools/external-storage-claim/v1\n"
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_MAC = re.compile(r"v1:([A-Za-z0-9._-]{1,64}):([0-9a-f]{64})")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_S3_CLAIM_KEYS = frozenset({"bucket", "key", "hash_algorithm", "hash_value"})


@runtime_checkable
class ClaimChecking(Protocol):
    """A driver that can tell, without I/O, whether a claim has the shape it makes."""

    def claim_problem(self, claim_data: Mapping[str, str]) -> str | None:
        """Why this driver would never have made `claim_data`, or `None` if it could have."""
        ...


def _shown(text: object, limit: int = 40) -> str:
    return repr(str(text)[:limit])


def storage_keys_from_environment(environ: Mapping[str, str] | None = None) -> dict[str, bytes]:
    """The storage keys named by `DURABLE_TOOLS_STORAGE_KEYS`, in order (the first signs).

    Args:
        environ: The environment (default `os.environ`).

    Returns:
        Keys by key id; empty when the variable is unset or empty.

    Raises:
        ConfigurationError: An entry is not `KEY_ID:BASE64` (key id of letters,
            digits, `.`, `_`, `-`; at most 64), or a key is shorter than
            `MIN_KEY_BYTES`.
    """
    text = (os.environ if environ is None else environ).get(STORAGE_KEYS_ENV, "")
    keys: dict[str, bytes] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        key_id, sep, encoded = entry.partition(":")
        try:
            key = base64.b64decode(encoded, validate=True) if sep else b""
        except binascii.Error:
            key = b""
        if not key or _KEY_ID.fullmatch(key_id) is None:
            raise ConfigurationError(
                f"{STORAGE_KEYS_ENV}: entry {key_id[:40]!r}… is not KEY_ID:BASE64 "
                "(e.g. s1:$(head -c 32 /dev/urandom | base64))"
            )
        keys[key_id] = key
    check_storage_keys(keys)
    return keys


def check_storage_keys(keys: Mapping[str, bytes], signing_key_id: str | None = None) -> None:
    """Check key ids, key lengths and the signing key id.

    Raises:
        ConfigurationError: A key id is not 1-64 letters, digits, `.`, `_`,
            `-`; a key is shorter than `MIN_KEY_BYTES`; or `signing_key_id`
            is not one of `keys`.
    """
    for key_id, key in keys.items():
        if _KEY_ID.fullmatch(key_id) is None:
            raise ConfigurationError(
                f"storage key id {key_id[:40]!r} must be 1-64 letters, digits, '.', '_' or '-'"
            )
        if len(key) < MIN_KEY_BYTES:
            raise ConfigurationError(
                f"storage key {key_id!r} has {len(key)} bytes; use at least {MIN_KEY_BYTES} "
                "(32 random bytes: head -c 32 /dev/urandom | base64)"
            )
    if signing_key_id is not None and signing_key_id not in keys:
        raise ConfigurationError(
            f"the signing storage key {signing_key_id!r} is not one of the keys "
            f"({', '.join(keys) or 'none'})"
        )


def claim_mac(key: bytes, driver_name: str, claim_data: Mapping[str, str]) -> str:
    """The HMAC-SHA256 (64 hex digits) over a driver name and a claim without its MAC entry.

    The message is a domain-separation line and the canonical JSON (ASCII,
    entries sorted) of `[driver_name, [[key, value], ...]]`, so no two
    different claims share a message.
    """
    entries = sorted((k, v) for k, v in claim_data.items() if k != MAC_CLAIM_KEY)
    body = json.dumps([driver_name, entries], ensure_ascii=True, separators=(",", ":"))
    return hmac.new(key, _DOMAIN + body.encode("ascii"), hashlib.sha256).hexdigest()


def driver_claim_problem(driver: StorageDriver, claim_data: Mapping[str, str]) -> str | None:
    """Why `driver` would never have made `claim_data` (no I/O), or `None` if it could have.

    Drivers that implement `ClaimChecking` (`LocalFileStorageDriver`,
    `SignedStorageDriver`) decide themselves. The S3 driver's claims must
    have exactly `bucket`, `key`, `hash_algorithm` (`sha256`) and
    `hash_value` (64 lowercase hex digits), and name the driver's bucket
    when it has a fixed one. Claims of other drivers are taken as they are.
    """
    if isinstance(driver, ClaimChecking):
        return driver.claim_problem(claim_data)
    if isinstance(driver, S3StorageDriver):
        if frozenset(claim_data) != _S3_CLAIM_KEYS:
            return (
                "an S3 claim has the entries bucket, key, hash_algorithm, hash_value, "
                f"not {_entries(claim_data)}"
            )
        bucket: object = getattr(driver, "_bucket", None)
        if isinstance(bucket, str) and claim_data["bucket"] != bucket:
            return f"the claim names bucket {_shown(claim_data['bucket'])}, not this driver's"
        if not claim_data["key"] or claim_data["hash_algorithm"] != "sha256":
            return "an S3 claim needs a key and hash_algorithm 'sha256'"
        if _HEX64.fullmatch(claim_data["hash_value"]) is None:
            return "an S3 claim's hash_value must be 64 lowercase hex digits"
    return None


def _entries(claim_data: Mapping[str, str]) -> str:
    return "[" + ", ".join(sorted(_shown(k, 20) for k in claim_data)[:6]) + "]"


class SignedStorageDriver(StorageDriver):
    """A driver whose claims carry a MAC, and which fetches only claims whose MAC checks.

    `store` adds `MAC_CLAIM_KEY` to every claim `driver` makes, signed with
    `signing_key_id`; `retrieve` refuses (`StorageError`, before any I/O) a
    claim for which `claim_problem` finds a problem, and hands `driver` the
    claim without its MAC. Its name and type are `driver`'s, so references
    read the same with and without keys.

    Args:
        driver: The driver that stores the payloads.
        keys: Keys by key id (at least one); every one verifies.
        signing_key_id: The key that signs (default the first of `keys`).
        accept_unsigned: Also take claims without a MAC (checked as
            `driver_claim_problem` checks them): only while turning keys on
            for a deployment whose running conversations hold unsigned
            references. Default `False`.

    Raises:
        ConfigurationError: No keys, or see `check_storage_keys`.
    """

    def __init__(
        self,
        driver: StorageDriver,
        keys: Mapping[str, bytes],
        *,
        signing_key_id: str | None = None,
        accept_unsigned: bool = False,
    ) -> None:
        if not keys:
            raise ConfigurationError("a signed storage driver needs at least one key")
        check_storage_keys(keys, signing_key_id)
        self.driver = driver
        self.keys = dict(keys)
        self.signing_key_id = signing_key_id or next(iter(self.keys))
        self.accept_unsigned = accept_unsigned

    def name(self) -> str:
        """The wrapped driver's name (what references record)."""
        return self.driver.name()

    def type(self) -> str:
        """The wrapped driver's type."""
        return self.driver.type()

    def sign(self, claim_data: Mapping[str, str]) -> dict[str, str]:
        """`claim_data` with its MAC entry under the signing key."""
        mac = claim_mac(self.keys[self.signing_key_id], self.name(), claim_data)
        return {**claim_data, MAC_CLAIM_KEY: f"{_VERSION}:{self.signing_key_id}:{mac}"}

    def claim_problem(self, claim_data: Mapping[str, str]) -> str | None:
        """Why this claim is not fetched (no I/O), or `None`.

        In order: no MAC (unless `accept_unsigned`), a MAC not of the form
        `v1:<key id>:<64 hex>`, a key id this process does not hold, a MAC
        that does not match, and last the wrapped driver's own shape check.
        """
        mark = claim_data.get(MAC_CLAIM_KEY)
        unsigned = {k: v for k, v in claim_data.items() if k != MAC_CLAIM_KEY}
        if mark is None:
            if not self.accept_unsigned:
                return "the claim carries no storage MAC (not minted by a holder of a storage key)"
            return driver_claim_problem(self.driver, unsigned)
        found = _MAC.fullmatch(mark)
        if found is None:
            return f"malformed storage MAC {_shown(mark, 30)}"
        key_id, given = found.groups()
        key = self.keys.get(key_id)
        if key is None:
            return f"the claim is signed with storage key {_shown(key_id)}, which is not held here"
        if not hmac.compare_digest(claim_mac(key, self.name(), unsigned), given):
            return f"the storage MAC under key {key_id!r} does not match the claim"
        return driver_claim_problem(self.driver, unsigned)

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        """Store through the wrapped driver; each claim gets its MAC."""
        claims = await self.driver.store(context, payloads)
        return [StorageDriverClaim(claim_data=self.sign(c.claim_data)) for c in claims]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        """Retrieve through the wrapped driver, after checking every claim.

        Raises:
            StorageError: A claim has a problem (`claim_problem`); nothing was read.
            Exception: Whatever the wrapped driver raises (a 503, a missing object).
        """
        for claim in claims:
            problem = self.claim_problem(claim.claim_data)
            if problem is not None:
                raise StorageError(f"refused external storage claim: {problem}")
        stripped = [
            StorageDriverClaim({k: v for k, v in c.claim_data.items() if k != MAC_CLAIM_KEY})
            for c in claims
        ]
        return await self.driver.retrieve(context, stripped)
