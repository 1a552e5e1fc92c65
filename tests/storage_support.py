"""A real storage driver for outage tests: `LocalFileStorageDriver` whose reads fail on demand.

`FlakyDriver` stores and reads through a real `LocalFileStorageDriver` (same
name, same claims, same files), except that the next `n` calls to `retrieve`
after `fail_next(n)` raise `ConnectionError` before touching the disk, as an
S3 503 would. It counts every `retrieve` call, so a test can assert that a
reference was decided without any I/O.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from durable_tools.storage import LocalFileStorageDriver

KEY = b"k" * 32
KEYS = {"s1": KEY}
"""A storage key for tests (never a real one)."""

KEYS_ENV = "s1:" + base64.b64encode(KEY).decode()
"""`KEYS` as `DURABLE_TOOLS_STORAGE_KEYS` writes them."""


class FlakyDriver(StorageDriver):
    """A `LocalFileStorageDriver` under `root` whose reads fail when told to.

    Attributes:
        inner: The real driver.
        retrieves: How many times `retrieve` was called (failed calls included).
        failed: How many of those raised because of `fail_next`.
    """

    def __init__(self, root: Path) -> None:
        self.inner = LocalFileStorageDriver(root)
        self.retrieves = 0
        self.failed = 0
        self._failures_left = 0
        self._lock = threading.Lock()

    def fail_next(self, n: int) -> None:
        """Make the next `n` calls to `retrieve` raise `ConnectionError`."""
        with self._lock:
            self._failures_left = n

    def name(self) -> str:
        """The local driver's name: references interchange with it."""
        return self.inner.name()

    def type(self) -> str:
        """The local driver's type."""
        return self.inner.type()

    def claim_problem(self, claim_data: Mapping[str, str]) -> str | None:
        """The local driver's shape check."""
        return self.inner.claim_problem(claim_data)

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        """Store through the local driver (never fails on purpose)."""
        return await self.inner.store(context, payloads)

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        """Read through the local driver, unless a failure is due."""
        with self._lock:
            self.retrieves += 1
            fail = self._failures_left > 0
            if fail:
                self._failures_left -= 1
                self.failed += 1
        if fail:
            raise ConnectionError("503 Slow Down (a storage outage, injected by the test)")
        return await self.inner.retrieve(context, claims)
