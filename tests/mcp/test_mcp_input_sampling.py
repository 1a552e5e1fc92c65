"""MCP sampling requests inside input-required results, on the Temporal dev server.

The test server's `poem` (the `mcp` SDK's `Resolve`/`Sample`) asks the
client's model for a haiku. Through a conversation whose model is scripted:

* `sampling = "approve"` (the default): the request is a `PendingApproval`
  of the call (`input_request.kind == "sampling"`, the server's message
  shown); once approved, the conversation's model answers it in the
  `model.sample-v1` activity (with the server's messages, its system prompt
  and no tools), the call is retried with the completion and the tool body
  runs once; the completion's tokens count in the conversation's usage;
* a denial ends the call `denied`; `sampling = "allow"` answers at once;
  `sampling = "refuse"` ends it with Failure `input_request_refused`;
* every history replays.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from mcp_support import HAIKU, POET, poet
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import ConversationOptions, PendingApproval
from durable_tools.mcp import McpServerConfig
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import Usage
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import StrictAgentWorkflow

SERVER = Path(__file__).with_name("mcp_test_server.py")


def _turns(*calls: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps({"turns": [[list(c) for c in calls]]})


def _log_events(log: Path, event: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event]


@asynccontextmanager
async def _harness(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    sampling: Literal["allow", "approve", "refuse"],
    model: ScriptedModel,
) -> AsyncIterator[tuple[Harness, Path]]:
    tmp_path.mkdir(exist_ok=True)
    log = tmp_path / "server.jsonl"
    server = McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log)],
        trust_annotations=True,  # `poem` is read-only: no approval of the call itself
        sampling=sampling,
    )
    async with running(
        dev_env, task_queue, tmp_path / "ledger.jsonl", mcp_servers=[server], models={"poet": model}
    ) as h:
        yield h, log


async def _sampling_approval(h: Harness, workflow_id: str, call_id: str) -> PendingApproval:
    async def probe() -> PendingApproval | None:
        pending = await h.conversations.pending(workflow_id)
        for item in pending.approvals:
            if item.call_id == call_id and item.input_request is not None:
                return item
        return None

    return await eventually(probe, what="the sampling request's approval")


async def _replays(h: Harness, workflow_id: str) -> None:
    history = await h.client.get_workflow_handle(workflow_id).fetch_history()
    replayer = Replayer(
        workflows=[StrictAgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    await replayer.replay_workflow(history)


async def test_an_approved_sampling_request_is_answered_by_the_conversations_model(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    model = ScriptedModel(poet)
    async with _harness(dev_env, task_queue, tmp_path, "approve", model) as (h, log):
        workflow_id = await h.start(_turns(("s", "notes__poem", {"topic": "the sea"})), agent=POET)
        approval = await _sampling_approval(h, workflow_id, "s")
        asked = approval.input_request
        assert asked is not None and asked.kind == "sampling" and asked.server == "notes"
        assert asked.message == "A haiku about the sea."
        assert (await h.conversations.status(workflow_id)).state == "waiting"
        sampled = [r for r in model.requests if r.purpose == "sampling"]
        assert sampled == []  # nothing sampled before a person approved
        await h.conversations.approve(
            workflow_id, "s", arguments_hash=approval.arguments_hash, decided_by="ada"
        )
        outputs = await h.wait_outputs(workflow_id, "s")
        await h.wait_assistant_text(workflow_id, "done (poet)")
        status = await h.conversations.status(workflow_id)
        events, _ = await h.conversations.retained_events(workflow_id)
        await _replays(h, workflow_id)
    assert not outputs["s"].is_error, outputs["s"].content
    result = json.loads(json.loads(outputs["s"].content)["result"])
    assert result == {"topic": "the sea", "poem": HAIKU, "model": "poet"}
    (request,) = [r for r in model.requests if r.purpose == "sampling"]
    assert request.instructions == "You write haiku."  # the server's, not the agent's
    assert request.tools == []
    assert request.settings["max_tokens"] == 60
    assert [(type(i).__name__, getattr(i, "text", "")) for i in request.transcript] == [
        ("UserMessage", "A haiku about the sea.")
    ]
    assert len(_log_events(log, "call")) == 1  # the tool body ran once
    # Two turns (1 + 1 each) and the completion (7 + 5).
    assert status.usage["poet"] == Usage(input_tokens=9, output_tokens=7)
    decided = [e for e in events if e.kind == "approval_decided" and e.call_id == "s"]
    assert [(e.outcome, e.decided_by) for e in decided] == [("approved", "ada")]
    assert all(HAIKU not in (e.text or "") for e in events)


async def test_a_denied_sampling_request_ends_the_call_denied(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    model = ScriptedModel(poet)
    async with _harness(dev_env, task_queue, tmp_path, "approve", model) as (h, log):
        workflow_id = await h.start(_turns(("s", "notes__poem", {"topic": "rain"})), agent=POET)
        approval = await _sampling_approval(h, workflow_id, "s")
        await h.conversations.deny(
            workflow_id, "s", arguments_hash=approval.arguments_hash, reason="not now"
        )
        outputs = await h.wait_outputs(workflow_id, "s")
        await h.wait_assistant_text(workflow_id, "done (poet)")
        await _replays(h, workflow_id)
    assert outputs["s"].is_error
    assert "denied" in outputs["s"].content and "not now" in outputs["s"].content
    assert [r for r in model.requests if r.purpose == "sampling"] == []
    assert _log_events(log, "call") == []


async def test_allowed_sampling_is_answered_at_once_and_refused_sampling_fails_the_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    model = ScriptedModel(poet)
    async with _harness(dev_env, task_queue, tmp_path / "a", "allow", model) as (h, log):
        workflow_id = await h.start(_turns(("s", "notes__poem", {"topic": "snow"})), agent=POET)
        outputs = await h.wait_outputs(workflow_id, "s")
        await _replays(h, workflow_id)
    assert HAIKU in outputs["s"].content
    assert len(_log_events(log, "call")) == 1
    refused = ScriptedModel(poet)
    async with _harness(dev_env, task_queue, tmp_path / "r", "refuse", refused) as (h, log):
        workflow_id = await h.start(_turns(("s", "notes__poem", {"topic": "ice"})), agent=POET)
        outputs = await h.wait_outputs(workflow_id, "s")
    assert outputs["s"].failure_kind == "input_request_refused"
    assert "configuration refuses (sampling" in outputs["s"].content
    assert [r for r in refused.requests if r.purpose == "sampling"] == []
    assert _log_events(log, "call") == []


async def test_a_sampling_request_not_approved_in_time_expires_the_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    model = ScriptedModel(poet)
    async with _harness(dev_env, task_queue, tmp_path, "approve", model) as (h, log):
        workflow_id = await h.start(
            _turns(("s", "notes__poem", {"topic": "fog"})),
            agent=POET,
            options=ConversationOptions(approval_deadline=2, search_attributes=True),
        )
        await _sampling_approval(h, workflow_id, "s")
        outputs = await h.wait_outputs(workflow_id, "s")
        assert (await h.conversations.pending(workflow_id)).approvals == []
        events, _ = await h.conversations.retained_events(workflow_id)
    assert outputs["s"].failure_kind == "expired"
    assert "sampling request" in outputs["s"].content
    assert [r for r in model.requests if r.purpose == "sampling"] == []
    finished = [e for e in events if e.kind == "tool_call_finished" and e.call_id == "s"]
    assert [e.outcome for e in finished] == ["expired"]
    assert _log_events(log, "call") == []
