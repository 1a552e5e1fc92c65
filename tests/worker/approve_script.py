"""A client script as an application writes one: approve a pending call, then exit.

`python approve_script.py ADDRESS TASK_QUEUE WORKFLOW_ID CALL_ID`; it ends with
`run_and_exit` (durable_tools.worker.exits), the documented way out of a
process that used Temporal. tests/worker/test_clean_exits.py runs it.
"""

from __future__ import annotations

import sys

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_tools.client import Conversations
from durable_tools.worker import run_and_exit


async def main() -> None:
    address, task_queue, workflow_id, call_id = sys.argv[1:5]
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    conversations = Conversations(client, task_queue=task_queue)
    (approval,) = [a for a in (await conversations.pending(workflow_id)).approvals]
    assert approval.call_id == call_id, approval
    await conversations.approve(
        workflow_id, call_id, arguments_hash=approval.arguments_hash, decided_by="script"
    )
    print(f"approved {workflow_id} {call_id}", flush=True)


if __name__ == "__main__":
    run_and_exit(main)
