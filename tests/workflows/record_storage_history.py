"""Record a conversation whose payloads are in external storage (run by hand, commit the output).

    python tests/workflows/record_storage_history.py

Like `record_histories.py`, on an embedded dev server, but the worker and the
client store every payload of at least `THRESHOLD` bytes with a
`LocalFileStorageDriver` under `histories/storage/payloads/`: a tool result of
`RESULT_BYTES` bytes, the model turns and the queries' results become
references. Writes `histories/storage/large_result.json`; the objects it
refers to are committed beside it, so the replay test
(`test_large_payloads.py`) decodes them through the same driver. The
threshold is low so the committed objects stay small.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from agent_support import AGENT, MODELS, TOOLKITS, turns  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from durable_tools.client import Conversations  # noqa: E402
from durable_tools.conversation import ConversationOptions  # noqa: E402
from durable_tools.storage import LocalFileStorageDriver, PayloadStorage  # noqa: E402
from durable_tools.worker.dev_server import DevServer  # noqa: E402
from durable_tools.worker.plugin import DurableToolsPlugin  # noqa: E402

DIRECTORY = Path(__file__).resolve().parent / "histories" / "storage"
PAYLOADS = DIRECTORY / "payloads"
THRESHOLD = 2048
RESULT_BYTES = 20_000
WORKFLOW_ID = "large_result"


def storage() -> PayloadStorage:
    """The storage the recording used, for replaying it."""
    return PayloadStorage(driver=LocalFileStorageDriver(PAYLOADS), threshold=THRESHOLD)


async def main() -> None:
    """Run the conversation and write its history and stored objects."""
    shutil.rmtree(PAYLOADS, ignore_errors=True)
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS, storage=storage())
    async with DevServer(headless=True) as server:
        client = await Client.connect(server.address, plugins=[plugin])
        task_queue = f"record-storage-{uuid.uuid4()}"
        conversations = Conversations(client, task_queue=task_queue)
        async with Worker(client, task_queue=task_queue):
            script = turns([("c1", "big", {"n_bytes": RESULT_BYTES})])
            await conversations.start(
                WORKFLOW_ID,
                agent=AGENT,
                message=script,
                options=ConversationOptions(idle_timeout=1.0),
            )
            await client.get_workflow_handle(WORKFLOW_ID).result()
            history = await client.get_workflow_handle(WORKFLOW_ID).fetch_history()
    path = DIRECTORY / f"{WORKFLOW_ID}.json"
    path.write_text(history.to_json() + "\n")
    objects = [p for p in PAYLOADS.rglob("*") if p.is_file()]
    where = PAYLOADS.relative_to(ROOT)
    print(f"wrote {path.relative_to(ROOT)} and {len(objects)} objects under {where}")


if __name__ == "__main__":
    asyncio.run(main())
