"""Large payloads: Temporal's External Storage with a local-filesystem driver.

Temporal rejects a payload over 2 MiB (a warning at 512 KiB) and a gRPC message
over about 4 MB. With External Storage (`temporalio.converter.ExternalStorage`,
experimental in temporalio 1.35), the data converter stores every payload of
at least `PayloadStorage.threshold` bytes (default 256 KiB, Temporal's) with a
`StorageDriver` and records only a small reference in history; whoever reads the
payload (worker, client, CLI) fetches it back through the same driver. So tool
arguments and results up to `PayloadStorage.max_payload_bytes` (default 64 MiB)
travel through the loop; larger ones become `output_too_large` (results) or
`input_validation_error` (arguments).

Two drivers:

* `LocalFileStorageDriver(root)`: one file per payload under `root`, named by
  the sha256 of the serialized payload. For `durable-tools dev`, tests, and a
  single machine (or a shared filesystem every worker and client mounts).
* `temporalio.contrib.aws.s3driver.S3StorageDriver`: Amazon S3, for clusters
  (`s3_storage(bucket)` builds it with aioboto3; the `s3` extra).

Every process that reads these conversations (each worker, each client, the
CLI) needs the same storage: a reference recorded by one is read by the other
through the driver of the same name. A process without it fails with the
SDK's `[TMPRL1105] Detected externally stored payload(s) but external storage
is not configured.`

The SDK runs the payload codec first and stores its output: with an
encryption codec, stored objects are encrypted; without one, they are the
plain serialized payloads (docs/operations.md, "Large payloads").

Which references a worker fetches is decided from the reference alone
(`durable_tools.storage_keys`): with storage keys (`PayloadStorage.keys`,
default `DURABLE_TOOLS_STORAGE_KEYS`), only claims carrying a valid MAC; without,
claims of the shape their driver makes. Any other reference a client sends
becomes a rejected input, the same on every replay; a fetch that fails fails
the workflow task, which Temporal retries (`durable_tools.references`).

Example:
    ```python
    storage = PayloadStorage(
        driver=LocalFileStorageDriver("/var/lib/agents/payloads"),
        keys={"s1": base64.b64decode(os.environ["PAYLOAD_KEY"])},
    )
    app = App(toolkits={"support": kit}, storage=storage)
    client = await Client.connect("localhost:7233", data_converter=data_converter(storage=storage))
    ```
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import re
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from durable_tools.errors import ConfigurationError, MissingExtra, StorageError
from durable_tools.storage_keys import (
    STORAGE_KEYS_ENV,
    SignedStorageDriver,
    check_storage_keys,
    storage_keys_from_environment,
)

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_THRESHOLD",
    "LOCAL_DRIVER_NAME",
    "LocalFileStorageDriver",
    "PayloadStorage",
    "s3_storage",
    "storage_from_options",
]

DEFAULT_THRESHOLD: Final[int] = 256 * 1024
"""Payloads of at least this many bytes are stored externally (Temporal's default)."""

DEFAULT_MAX_PAYLOAD_BYTES: Final[int] = 64 * 1024 * 1024
"""The largest tool result or argument text, in bytes, with external storage."""

LOCAL_DRIVER_NAME: Final[str] = "durable-tools.local-file"
"""The name `LocalFileStorageDriver` records in references (its default)."""

_DIGEST = re.compile(r"[0-9a-f]{64}")
_CLAIM_KEY = "sha256"


class LocalFileStorageDriver(StorageDriver):
    """Store payloads as files under one directory, named by their content.

    Each payload is serialized (protobuf), hashed with sha256, and written to
    `root/sha256/<first 2 hex digits>/<64 hex digits>` through a temporary
    file in the same directory that is fsynced and renamed into place, so a
    reader sees a whole object or none. Storing the same bytes again (a retried
    activity, a replayed workflow task) finds the file and writes nothing: the
    claim is the digest alone.

    A claim read from history is untrusted: it must be exactly 64 lowercase hex
    digits, the path built from it must stay under `root`, and the bytes read
    must hash to it; anything else raises `StorageError` and no file outside
    `root` is opened.

    Nothing is ever deleted: remove objects older than the namespace's
    retention yourself (docs/operations.md, "Large payloads").

    Args:
        root: The directory (created on the first store if missing). Every
            worker and client of the conversations must see the same files.
        name: The driver name recorded in references (default
            `LOCAL_DRIVER_NAME`); readers must register a driver of that name.

    Raises:
        ConfigurationError: `name` is empty.
    """

    def __init__(self, root: str | os.PathLike[str], *, name: str = LOCAL_DRIVER_NAME) -> None:
        if not name:
            raise ConfigurationError("a storage driver needs a non-empty name")
        self.root = Path(root).absolute()
        self._name = name

    def name(self) -> str:
        """The driver name recorded in every reference it makes."""
        return self._name

    def type(self) -> str:
        """`"durable-tools.local-file"`, the same for every instance."""
        return LOCAL_DRIVER_NAME

    def claim_problem(self, claim_data: Mapping[str, str]) -> str | None:
        """Why this driver would never have made `claim_data` (no I/O), or `None`.

        Its claims are exactly `{"sha256": <64 lowercase hex digits>}`.
        """
        if set(claim_data) != {_CLAIM_KEY}:
            keys = sorted(repr(str(k)[:20]) for k in claim_data)[:6]
            return f"a local-file claim has the one entry 'sha256', not [{', '.join(keys)}]"
        if _DIGEST.fullmatch(claim_data[_CLAIM_KEY]) is None:
            return "a local-file claim's sha256 must be 64 lowercase hex digits"
        return None

    def path_of(self, digest: str) -> Path:
        """The file of the object whose sha256 is `digest` (64 lowercase hex digits).

        Raises:
            StorageError: `digest` is not 64 lowercase hex digits, or the
                path escapes `root` (a symlinked fan-out directory).
        """
        if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise StorageError(
                f"invalid external storage claim {digest[:80]!r}: expected a sha256 "
                "digest of 64 lowercase hex digits"
            )
        path = self.root / "sha256" / digest[:2] / digest
        root = self.root.resolve()
        if not path.resolve().is_relative_to(root):
            raise StorageError(f"external payload {digest} resolves outside {root}")
        return path

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        """Write each payload (unless its file exists); one claim `{"sha256": digest}` each.

        Raises:
            OSError: The file could not be written (disk full, permissions).
        """
        del context  # content addressing needs no workflow or activity identity
        claims: list[StorageDriverClaim] = []
        for payload in payloads:
            data = payload.SerializeToString(deterministic=True)
            digest = await asyncio.to_thread(self._write, data)
            claims.append(StorageDriverClaim(claim_data={_CLAIM_KEY: digest}))
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        """Read the payload of each claim, checking its sha256.

        Raises:
            StorageError: A claim is malformed or points outside `root`, the
                object is missing, or its bytes do not match the digest.
        """
        del context
        payloads: list[Payload] = []
        for claim in claims:
            digest = _claimed_digest(claim.claim_data)
            data = await asyncio.to_thread(self._read, digest)
            payload = Payload()
            payload.ParseFromString(data)
            payloads.append(payload)
        return payloads

    def _write(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self.path_of(digest)
        if path.is_file() and path.stat().st_size == len(data):
            return digest  # stored before: the same bytes (retry, replay, or a duplicate)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{digest[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        _fsync_directory(path.parent)
        return digest

    def _read(self, digest: str) -> bytes:
        path = self.path_of(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StorageError(
                f"external payload sha256:{digest} is missing from {self.root}: was the "
                "directory removed, or does this process use another storage directory "
                "than the worker that stored it (--storage-dir / DURABLE_TOOLS_STORAGE_DIR)?"
            ) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise StorageError(f"external payload {path} does not match its digest {digest}")
        return data


def _claimed_digest(claim_data: Mapping[str, str]) -> str:
    value = claim_data.get(_CLAIM_KEY)
    if not isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        keys = sorted(str(k)[:40] for k in claim_data)[:10]
        raise StorageError(f"invalid external storage claim: no {_CLAIM_KEY!r} (keys: {keys})")
    return value


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is; not on every OS.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True, kw_only=True)
class PayloadStorage:
    """External storage for large payloads, and the size limits that come with it.

    Attributes:
        driver: Where payloads go (`LocalFileStorageDriver`, or the S3 driver
            from `s3_storage`).
        threshold: Payloads of at least this many serialized bytes are
            stored externally (default `DEFAULT_THRESHOLD`, 256 KiB); smaller
            ones stay in history.
        max_payload_bytes: The largest tool result (JSON bytes) and the
            largest tool-call argument text (UTF-8 bytes, per turn) the loop
            accepts (default `DEFAULT_MAX_PAYLOAD_BYTES`, 64 MiB). A larger
            result becomes Failure `output_too_large`, larger arguments
            `input_validation_error`. Without external storage these limits
            are 1.5 MB and 1 MiB (Temporal's 2 MiB payload limit).
        on_close: Closes what the driver opened (the S3 client of
            `s3_storage`); `aclose()` calls it. Default none.
        keys: Storage keys by key id (each at least 16 bytes; 32 random
            bytes recommended), shared by every worker and trusted client:
            every claim stored carries a MAC under `signing_key_id`, and only
            references with a valid MAC under one of these keys are fetched
            (`durable_tools.storage_keys`). `None` (default): from
            `DURABLE_TOOLS_STORAGE_KEYS` (`s2:BASE64,s1:BASE64`, the first
            signs); empty there or `{}`: no MAC, and a reference is fetched
            when its claim has its driver's shape.
        signing_key_id: The key that signs (default the first of `keys`).
            Rotate by adding the new key everywhere first, then signing
            with it; keep an old key while histories that may be replayed
            hold references it signed.
        accept_unsigned_references: Also fetch references without a MAC
            (default `False`): only while turning keys on for a deployment
            whose running conversations hold unsigned references.

    Raises:
        ConfigurationError: `threshold` is negative, `max_payload_bytes` is
            not positive, a key or key id is malformed, `signing_key_id` is
            not one of `keys`, or `accept_unsigned_references` without keys.
    """

    driver: StorageDriver
    threshold: int = DEFAULT_THRESHOLD
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    on_close: Callable[[], Awaitable[None]] | None = None
    keys: Mapping[str, bytes] | None = None
    signing_key_id: str | None = None
    accept_unsigned_references: bool = False

    async def aclose(self) -> None:
        """Close what the driver opened (`run_worker` calls it when the worker stops)."""
        if self.on_close is not None:
            await self.on_close()

    def __post_init__(self) -> None:
        """Check the sizes (see the class's Raises)."""
        if self.threshold < 0:
            raise ConfigurationError(
                f"the external storage threshold must be >= 0 bytes, not {self.threshold}"
            )
        if self.max_payload_bytes <= 0:
            raise ConfigurationError(
                f"the maximum payload size must be > 0 bytes, not {self.max_payload_bytes}"
            )
        keys = dict(storage_keys_from_environment() if self.keys is None else self.keys)
        check_storage_keys(keys, self.signing_key_id)
        if self.accept_unsigned_references and not keys:
            raise ConfigurationError(
                "accept_unsigned_references needs storage keys: without keys every "
                f"reference is unsigned (set keys= or {STORAGE_KEYS_ENV})"
            )
        object.__setattr__(self, "keys", keys)

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the storage keys held, the signing one first (empty without keys)."""
        held = tuple(self.keys or {})
        first = self.signing_key_id or (held[0] if held else None)
        return tuple(k for k in held if k == first) + tuple(k for k in held if k != first)

    def stored_driver(self) -> StorageDriver:
        """The driver the SDK is given: `driver`, wrapped in a `SignedStorageDriver` with keys."""
        if not self.keys:
            return self.driver
        return SignedStorageDriver(
            self.driver,
            self.keys,
            signing_key_id=self.signing_key_id,
            accept_unsigned=self.accept_unsigned_references,
        )

    def external_storage(self) -> ExternalStorage:
        """The SDK's `ExternalStorage` for this driver (`stored_driver()`) and threshold."""
        return ExternalStorage(
            drivers=[self.stored_driver()], payload_size_threshold=self.threshold
        )

    def apply(self, converter: DataConverter) -> DataConverter:
        """`converter` storing large payloads here.

        Its payload converter, payload codec and failure converter are kept.
        """
        return dataclasses.replace(converter, external_storage=self.external_storage())

    def describe(self) -> str:
        """One line for a start-up message.

        E.g. `payloads of 262144 bytes or more stored in /srv/p (largest tool
        result or arguments: 67108864 bytes); references signed with storage
        key s2 (accepted: s2, s1)`.
        """
        driver = self.driver
        where = str(driver.root) if isinstance(driver, LocalFileStorageDriver) else driver.name()
        ids = self.key_ids
        signed = (
            f"references signed with storage key {ids[0]} (accepted: {', '.join(ids)})"
            if ids
            else f"references unsigned (no storage keys: set {STORAGE_KEYS_ENV})"
        )
        return (
            f"payloads of {self.threshold} bytes or more stored in {where} "
            f"(largest tool result or arguments: {self.max_payload_bytes} bytes); {signed}"
        )


def s3_storage(
    bucket: str,
    *,
    client: S3StorageDriverClient | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    keys: Mapping[str, bytes] | None = None,
) -> PayloadStorage:
    """External storage in an S3 bucket (`temporalio.contrib.aws.s3driver.S3StorageDriver`).

    Args:
        bucket: The bucket (it must exist; the driver never creates it).
        client: The S3 client adapter; default: an aioboto3 client opened on
            first use from the environment's AWS configuration
            (`AWS_REGION`, credentials, `AWS_ENDPOINT_URL_S3`, ...), kept for
            the process's lifetime.
        threshold: See `PayloadStorage.threshold`.
        max_payload_bytes: See `PayloadStorage.max_payload_bytes`. The
            driver's own cap on one stored object is set to 4x this: a model
            turn records its calls' arguments twice, in JSON.
        keys: See `PayloadStorage.keys` (default `DURABLE_TOOLS_STORAGE_KEYS`).

    Returns:
        The storage.

    Raises:
        MissingExtra: aioboto3 is not installed (the `s3` extra) and no
            `client` was given.
    """
    lazy = _LazyAioboto3Client() if client is None else None
    return PayloadStorage(
        driver=S3StorageDriver(
            client=lazy if lazy is not None else cast(S3StorageDriverClient, client),
            bucket=bucket,
            max_payload_size=4 * max_payload_bytes,
        ),
        threshold=threshold,
        max_payload_bytes=max_payload_bytes,
        on_close=lazy.aclose if lazy is not None else None,
        keys=keys,
    )


def storage_from_options(
    *,
    directory: str | os.PathLike[str] | None = None,
    s3_bucket: str | None = None,
    threshold: int | None = None,
    max_payload_bytes: int | None = None,
    keys: Mapping[str, bytes] | None = None,
) -> PayloadStorage | None:
    """The storage the CLI's `--storage-dir` / `--storage-s3-bucket` options ask for.

    Args:
        directory: A `LocalFileStorageDriver` root.
        s3_bucket: An S3 bucket (`s3_storage`).
        threshold: Bytes from which payloads are stored (default 256 KiB).
        max_payload_bytes: The largest tool result or arguments (default 64 MiB).
        keys: Storage keys (default `DURABLE_TOOLS_STORAGE_KEYS`; see
            `PayloadStorage.keys`).

    Returns:
        The storage, or `None` when neither a directory nor a bucket is given.

    Raises:
        ConfigurationError: Both a directory and a bucket are given, a size
            without either, a size out of range, or a malformed key.
        MissingExtra: A bucket is given and aioboto3 is not installed.
    """
    if directory is not None and s3_bucket is not None:
        raise ConfigurationError("give a storage directory or an S3 bucket, not both")
    if directory is None and s3_bucket is None and (threshold, max_payload_bytes) != (None, None):
        raise ConfigurationError(
            "a storage threshold or maximum payload size needs external storage: "
            "give a storage directory or an S3 bucket too"
        )
    above = DEFAULT_THRESHOLD if threshold is None else threshold
    most = DEFAULT_MAX_PAYLOAD_BYTES if max_payload_bytes is None else max_payload_bytes
    if s3_bucket is not None:
        return s3_storage(s3_bucket, threshold=above, max_payload_bytes=most, keys=keys)
    if directory is not None:
        driver = LocalFileStorageDriver(directory)
        return PayloadStorage(driver=driver, threshold=above, max_payload_bytes=most, keys=keys)
    return None


class _LazyAioboto3Client(S3StorageDriverClient):
    """An aioboto3 S3 client opened on first use (a driver is built before any loop runs).

    The client is configured by the environment as boto3 documents it
    (`AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL_S3`, profiles).
    """

    def __init__(self) -> None:
        try:
            from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
        except ImportError:
            raise MissingExtra("S3 external storage", "s3") from None
        self._new = new_aioboto3_client
        self._opened: S3StorageDriverClient | None = None
        self._lock: asyncio.Lock | None = None
        self._stack = contextlib.AsyncExitStack()

    async def _client(self) -> S3StorageDriverClient:
        if self._opened is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._opened is None:
                    import aioboto3

                    session: Any = aioboto3.Session()  # its overloads name every AWS service
                    s3 = await self._stack.enter_async_context(session.client("s3"))
                    self._opened = self._new(s3)
        return self._opened

    async def aclose(self) -> None:
        """Close the client if it was opened; the next use opens a new one."""
        self._opened = None
        await self._stack.aclose()
        self._stack = contextlib.AsyncExitStack()

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        """Upload `data` (multipart above boto3's threshold)."""
        await (await self._client()).put_object(bucket=bucket, key=key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        """Whether `key` exists (`HeadObject`)."""
        return await (await self._client()).object_exists(bucket=bucket, key=key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        """The bytes of `key`."""
        return await (await self._client()).get_object(bucket=bucket, key=key)
