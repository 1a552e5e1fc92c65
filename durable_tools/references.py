"""External storage references: a verdict from the payload alone, never from I/O.

Temporal's SDK fetches every external storage reference in a workflow
activation (`temporalio.converter.ExternalStorage`) before workflow code runs,
and any client may put a reference in a signal or an update. Two rules hold
while `GuardedDataConverter` (which `DurableToolsPlugin` installs) decodes an
activation (DESIGN.md, invariants 7 and 10):

* What is rejected is rejected from facts of the payload and the worker's
  configuration, with no I/O: a reference on a worker without external
  storage (the SDK's `[TMPRL1105]`), a malformed reference, one naming a
  driver this worker does not have, or one whose claim its driver would not
  fetch (`durable_tools.storage_keys.driver_claim_problem`: with storage keys,
  no MAC, a MAC under an unknown key id or a wrong MAC; always, a claim of the
  wrong shape). Such a payload is replaced by one of encoding
  `UNREADABLE_ENCODING` carrying the reason, and the workflow records a
  signal or an update holding it as a rejection, the same on every replay.
* Every other reference is fetched, and a fetch that fails (an S3 503, a
  timeout, a missing object) raises `StorageError`: the workflow task fails
  and Temporal retries it, so the conversation waits for storage and loses
  nothing. It never becomes a rejection that a later replay, with storage
  back, would contradict (a nondeterminism error).

Everywhere else (`DataConverter.decode`: clients, queries, activity inputs)
references are fetched and failures raise, as the SDK does; a
`SignedStorageDriver` refuses a claim without a valid MAC there too.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1.external_storage_pb2 import ExternalStorageReference
from temporalio.converter import DataConverter, ExternalStorage

from durable_tools.errors import StorageError
from durable_tools.storage_keys import driver_claim_problem

__all__ = ["UNREADABLE_ENCODING", "GuardedDataConverter", "guarded", "reference_problem"]

UNREADABLE_ENCODING: Final[bytes] = b"durable-tools/unreadable-external-payload"
"""Encoding of the payload standing for a reference a worker refused to fetch (data: the reason)."""

_MAX_REASON_BYTES = 500
_REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()
_LEGACY_REFERENCE_ENCODING = b"json/external-storage-reference"

_strict: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "durable_tools_strict_decode", default=False
)

_Step = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


@dataclass(frozen=True)
class GuardedDataConverter(DataConverter):
    """A `DataConverter` whose activation decoding decides references without I/O.

    See the module docstring. `decode` (what clients and activities use)
    raises as `DataConverter.decode` does.
    """

    async def decode(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        """Decode like `DataConverter.decode`: a reference that cannot be fetched raises."""
        token = _strict.set(True)
        try:
            return await super().decode(payloads, type_hints)
        finally:
            _strict.reset(token)

    async def _decode_reference_payload_sequence(
        self, payloads: Sequence[Payload]
    ) -> list[Payload]:
        return await _guard(super()._decode_reference_payload_sequence, payloads)

    async def _external_retrieve_payload_sequence(
        self, payloads: Sequence[Payload]
    ) -> list[Payload]:
        """Fetch the references that pass `reference_problem`; replace the others.

        Raises:
            StorageError: A fetch failed (while decoding an activation: the
                workflow task fails and is retried).
        """
        if _strict.get():
            return await super()._external_retrieve_payload_sequence(payloads)
        problems = [reference_problem(self.external_storage, p) for p in payloads]
        wanted = [p for p, problem in zip(payloads, problems, strict=True) if problem is None]
        try:
            fetched = iter(await super()._external_retrieve_payload_sequence(wanted))
        except Exception as exc:
            raise StorageError(
                f"fetching an external payload failed ({type(exc).__name__}: {exc}); the "
                "workflow task is retried until storage answers"
            ) from exc
        return [next(fetched) if problem is None else _unreadable(problem) for problem in problems]


async def _guard(step: _Step, payloads: Sequence[Payload]) -> list[Payload]:
    """Codec-decode marked references; one that cannot be decoded is replaced.

    Its failures are facts of the payload: a marked reference on a worker
    without external storage, or one that is not a reference once decoded
    (the SDK's `[TMPRL1105]` / `[TMPRL1106]`). No storage is read here.
    """
    try:
        return await step(payloads)
    except Exception:
        if _strict.get():
            raise
    # One at a time: only the payloads that fail are replaced.
    out: list[Payload] = []
    for payload in payloads:
        try:
            out.extend(await step([payload]))
        except Exception as exc:
            out.append(_unreadable(f"{type(exc).__name__}: {exc}"))
    return out


def _unreadable(reason: str) -> Payload:
    data = reason.encode(errors="replace")[:_MAX_REASON_BYTES]
    return Payload(metadata={"encoding": UNREADABLE_ENCODING}, data=data)


def _is_reference(payload: Payload) -> bool:
    encoding = payload.metadata.get("encoding")
    return encoding == _LEGACY_REFERENCE_ENCODING or (
        encoding == b"json/protobuf" and payload.metadata.get("messageType") == _REFERENCE_TYPE
    )


def reference_problem(storage: ExternalStorage | None, payload: Payload) -> str | None:
    """Why a worker does not fetch the reference `payload` (no I/O), or `None`.

    `None` also for a payload that is not a reference. Deterministic: the
    same payload and configuration give the same answer on every replay.

    Args:
        storage: The worker's external storage (`None`: not configured).
        payload: A payload of a workflow activation, codec-decoded references
            included.

    Returns:
        A one-line reason (at most about 200 characters), or `None`.
    """
    if not _is_reference(payload):
        return None
    if storage is None:
        return "external storage reference, but external storage is not configured on this worker"
    try:
        found = storage._decode_reference(payload)  # pyright: ignore[reportPrivateUsage]
    except Exception:
        found = None
    if found is None:
        return "malformed external storage reference"
    driver = next((d for d in storage.drivers if d.name() == found.driver_name), None)
    if driver is None:
        return f"no external storage driver named {found.driver_name[:40]!r} on this worker"
    problem = driver_claim_problem(driver, dict(found.claim_data))
    return None if problem is None else f"refused external storage claim: {problem}"


def guarded(converter: DataConverter) -> DataConverter:
    """`converter` as a `GuardedDataConverter`, its parts kept.

    A subclass of `DataConverter` other than this one is returned as it is
    (its own overrides are not ours to drop).
    """
    if type(converter) is not DataConverter:
        return converter
    return GuardedDataConverter(
        payload_converter_class=converter.payload_converter_class,
        payload_codec=converter.payload_codec,
        failure_converter_class=converter.failure_converter_class,
        external_storage=converter.external_storage,
    )
