"""A client cannot wedge a conversation with an external storage reference it sends.

The SDK fetches references before workflow code runs; one it cannot fetch used
to fail the workflow task forever (`[TMPRL1105]` on a worker without external
storage; a missing object, a forged claim or an unknown driver with it).
`durable_tools.references.GuardedDataConverter` decides, from the reference
alone, which ones it fetches, and turns the others into a recorded rejection
(DESIGN.md, invariants 7 and 10): with storage keys every reference without a
valid MAC; without keys every claim not of its driver's shape (a well-formed
unsigned claim is fetched, and a missing object then makes the conversation
wait: tests/durable_tools/test_storage_keys.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.testing import WorkflowEnvironment
from test_untrusted_inputs import (
    approve_and_finish,
    rejected_for,
    start_waiting_for_refund,
    workflow_task_failures,
)
from workflow_helpers import Harness, eventually, running

from durable_tools.codec import data_converter
from durable_tools.storage import LOCAL_DRIVER_NAME, LocalFileStorageDriver, PayloadStorage
from durable_tools.storage_keys import MAC_CLAIM_KEY, claim_mac
from durable_tools.worker.check_upgrade import ReplayVerdict, check_upgrade

REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"


def reference(driver: str, claim: dict[str, str], **metadata: bytes) -> RawValue:
    data = json.dumps({"driverName": driver, "claimData": claim}).encode()
    meta = {"encoding": b"json/protobuf", "messageType": REFERENCE_TYPE, **metadata}
    return RawValue(Payload(metadata=meta, data=data))


KEY = b"k" * 32
ALIEN_KEY = b"a" * 32  # a key the worker does not hold, under the id it does hold


def mac(key: bytes, key_id: str, digest: str) -> str:
    return f"v1:{key_id}:{claim_mac(key, LOCAL_DRIVER_NAME, {'sha256': digest})}"


FORGED = {
    "traversal": reference(LOCAL_DRIVER_NAME, {"sha256": "../../../../etc/passwd"}),
    "unknown driver": reference("no-such-driver", {"key": "x"}),
    "legacy encoding": RawValue(
        Payload(metadata={"encoding": b"json/external-storage-reference"}, data=b"{}")
    ),
    "extra entry": reference(LOCAL_DRIVER_NAME, {"sha256": "ab" * 32, "path": "/etc/passwd"}),
}
"""Refused from their shape alone, with or without storage keys."""

UNSIGNED_OR_FORGED_MAC = {
    "missing object": reference(LOCAL_DRIVER_NAME, {"sha256": "ab" * 32}),
    "marked": reference(
        LOCAL_DRIVER_NAME, {"sha256": "cd" * 32}, __temporal_external_storage_reference=b"true"
    ),
    "wrong key": reference(
        LOCAL_DRIVER_NAME,
        {"sha256": "ab" * 32, MAC_CLAIM_KEY: mac(ALIEN_KEY, "s1", "ab" * 32)},
    ),
    "unknown key id": reference(
        LOCAL_DRIVER_NAME,
        {"sha256": "ab" * 32, MAC_CLAIM_KEY: mac(KEY, "s9", "ab" * 32)},
    ),
}
"""Well-formed claims a worker with storage keys refuses: no MAC, or one it cannot verify."""


@pytest.fixture(params=["without storage", "with storage", "with storage and keys"])
async def either(
    request: pytest.FixtureRequest,
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Harness]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    keys = {"s1": KEY} if request.param == "with storage and keys" else {}
    storage = (
        PayloadStorage(driver=LocalFileStorageDriver(tmp_path / "payloads"), keys=keys)
        if request.param != "without storage"
        else None
    )
    async with running(dev_env, task_queue, ledger, storage=storage) as h:
        yield h


async def test_forged_references_in_signals_and_updates_are_rejected(either: Harness) -> None:
    wf, digest = await start_waiting_for_refund(either)
    handle = either.client.get_workflow_handle(wf)
    storage = either.plugin.storage
    forged = dict(FORGED)
    if storage is None or storage.key_ids:
        # Without storage every reference is refused; with keys, so is every
        # reference without a MAC the worker can verify.
        forged.update(UNSIGNED_OR_FORGED_MAC)
    for value in forged.values():
        await handle.signal("decide", args=[value])
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("decide_now", args=[FORGED["traversal"]])
    rejected = await rejected_for(either, wf, "decide", len(forged))
    assert all("unreadable-external-payload" in r.reason for r in rejected), rejected
    await approve_and_finish(either, wf, digest)
    assert await workflow_task_failures(handle) == []

    # `durable-tools check-upgrade` (a client with a plain data converter, as
    # the CLI builds it) replays the history as the worker decided it.
    cli_client = Client(
        **{**either.env.client.config(), "data_converter": data_converter(storage=storage)}
    )

    async def verdicts() -> list[ReplayVerdict]:
        return await check_upgrade(cli_client, query=f"WorkflowId = '{wf}'")

    (verdict,) = await eventually(verdicts, what="the run in visibility")
    assert verdict.problem is None, verdict.problem
