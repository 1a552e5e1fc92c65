"""A client cannot wedge a conversation with an external storage reference it sends.

The SDK fetches references before workflow code runs; one it cannot fetch used
to fail the workflow task forever (`[TMPRL1105]` on a worker without external
storage; a missing object, a forged claim or an unknown driver with it).
`durable_tools.references.GuardedDataConverter` turns such a signal or update
input into a recorded rejection (DESIGN.md, invariant 7).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.testing import WorkflowEnvironment
from test_untrusted_inputs import (
    approve_and_finish,
    rejected_for,
    start_waiting_for_refund,
    workflow_task_failures,
)
from workflow_helpers import Harness, running

from durable_tools.storage import LOCAL_DRIVER_NAME, LocalFileStorageDriver, PayloadStorage

REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"


def reference(driver: str, claim: dict[str, str], **metadata: bytes) -> RawValue:
    data = json.dumps({"driverName": driver, "claimData": claim}).encode()
    meta = {"encoding": b"json/protobuf", "messageType": REFERENCE_TYPE, **metadata}
    return RawValue(Payload(metadata=meta, data=data))


FORGED = {
    "traversal": reference(LOCAL_DRIVER_NAME, {"sha256": "../../../../etc/passwd"}),
    "missing object": reference(LOCAL_DRIVER_NAME, {"sha256": "ab" * 32}),
    "unknown driver": reference("no-such-driver", {"key": "x"}),
    "marked": reference(
        LOCAL_DRIVER_NAME, {"sha256": "cd" * 32}, __temporal_external_storage_reference=b"true"
    ),
    "legacy encoding": RawValue(
        Payload(metadata={"encoding": b"json/external-storage-reference"}, data=b"{}")
    ),
}


@pytest.fixture(params=["without storage", "with storage"])
async def either(
    request: pytest.FixtureRequest,
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Harness]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    storage = (
        PayloadStorage(driver=LocalFileStorageDriver(tmp_path / "payloads"))
        if request.param == "with storage"
        else None
    )
    async with running(dev_env, task_queue, ledger, storage=storage) as h:
        yield h


async def test_forged_references_in_signals_and_updates_are_rejected(either: Harness) -> None:
    wf, digest = await start_waiting_for_refund(either)
    handle = either.client.get_workflow_handle(wf)
    for value in FORGED.values():
        await handle.signal("decide", args=[value])
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("decide_now", args=[FORGED["missing object"]])
    rejected = await rejected_for(either, wf, "decide", len(FORGED))
    assert all("unreadable-external-payload" in r.reason for r in rejected), rejected
    await approve_and_finish(either, wf, digest)
    assert await workflow_task_failures(handle) == []
