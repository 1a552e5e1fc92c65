"""MCP URL elicitations (a link to open) as durable questions, on the Temporal dev server.

The test server's `connect` answers input-required with a URL elicitation
(a link carrying a one-time token), then, retried, says what the person did.

* `url_elicitation = "allow"` (default): a question of the call with the
  link and its host in `pending`, the CLI and the inbox's data; the person
  says they are done (`answer --done`: accept, no value), declines or
  cancels, and the server is told which in one final retry; the link's
  token is in no event;
* `url_elicitation = "approver"`: the consent is an approval of the call
  (the decision book's approvers and signatures apply);
* `"refuse"`, and links that must not be shown (`javascript:`), end the
  call with a clear `Failure`; every history replays.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from typer.testing import CliRunner
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import PendingApproval, PendingInteraction
from durable_tools.mcp import McpServerConfig
from durable_tools.worker.cli import app
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import StrictAgentWorkflow

SERVER = Path(__file__).with_name("mcp_test_server.py")
BASE = "https://auth.example.com/login"
LINK = f"{BASE}?token=one-time-7f3a"  # the server adds the token: it is not the call's argument
runner = CliRunner()


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
    setting: Literal["allow", "approver", "refuse"] = "allow",
) -> AsyncIterator[tuple[Harness, Path]]:
    tmp_path.mkdir(exist_ok=True)
    log = tmp_path / "server.jsonl"
    server = McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log)],
        trust_annotations=True,  # `connect` is read-only: no approval of the call itself
        url_elicitation=setting,
    )
    async with running(dev_env, task_queue, tmp_path / "ledger.jsonl", mcp_servers=[server]) as h:
        yield h, log


async def _link_question(h: Harness, workflow_id: str, call_id: str) -> PendingInteraction:
    async def probe() -> PendingInteraction | None:
        pending = await h.conversations.pending(workflow_id)
        for item in pending.interactions:
            if item.call_id == call_id and item.input_request is not None:
                return item
        return None

    return await eventually(probe, what="the link's question")


async def _replays(h: Harness, workflow_id: str) -> None:
    history = await h.client.get_workflow_handle(workflow_id).fetch_history()
    replayer = Replayer(
        workflows=[StrictAgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(),
    )
    await replayer.replay_workflow(history)


async def test_a_link_is_shown_with_its_host_and_done_through_the_cli(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    address = dev_env.client.service_client.config.target_host

    async def cli(*args: str) -> Any:
        argv = [*args, "--address", address, "--timeout", "20"]
        result = await asyncio.to_thread(runner.invoke, app, argv)
        assert result.exit_code == 0, result.output
        return result

    async with _harness(dev_env, task_queue, tmp_path) as (h, log):
        workflow_id = await h.start(_turns(("u", "notes__connect", {"url": BASE})))
        question = await _link_question(h, workflow_id, "u")
        asked = question.input_request
        assert asked is not None
        assert (asked.kind, asked.url, asked.host) == ("url", LINK, "auth.example.com")
        assert asked.message == "Sign in to the service, then come back."
        shown = " ".join((await cli("pending", workflow_id)).stdout.split())
        assert "auth.example.com" in shown and "--done" in shown
        # Any value is refused: a link's question is answered with none.
        bad = await asyncio.to_thread(
            runner.invoke,
            app,
            ["answer", workflow_id, "u", '{"x": 1}', "--yes", "--address", address],
        )
        assert bad.exit_code != 0
        await cli("answer", workflow_id, "u", "--done", "--yes", "--by", "ada")
        outputs = await h.wait_outputs(workflow_id, "u")
        await h.wait_assistant_text(workflow_id, "done (directed)")
        events, _ = await h.conversations.retained_events(workflow_id)
        await _replays(h, workflow_id)
    assert json.loads(outputs["u"].content) == {"result": "connect: accept"}
    (call,) = _log_events(log, "call")
    assert call["action"] == "accept" and call["state"] == "connect-1"
    assert len(_log_events(log, "round")) == 2  # asked, then one final retry
    dumped = json.dumps([e.model_dump(mode="json") for e in events])
    assert "one-time-7f3a" not in dumped and "auth.example.com" in dumped


async def test_a_declined_link_reaches_the_server(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with _harness(dev_env, task_queue, tmp_path) as (h, log):
        workflow_id = await h.start(_turns(("u", "notes__connect", {"url": BASE})))
        question = await _link_question(h, workflow_id, "u")
        await h.conversations.answer(
            workflow_id, "u", None, arguments_hash=question.arguments_hash, action="decline"
        )
        outputs = await h.wait_outputs(workflow_id, "u")
    assert json.loads(outputs["u"].content) == {"result": "connect: decline"}
    assert [c["action"] for c in _log_events(log, "call")] == ["decline"]


async def test_an_approver_only_link_is_an_approval(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with _harness(dev_env, task_queue, tmp_path, "approver") as (h, log):
        workflow_id = await h.start(_turns(("u", "notes__connect", {"url": BASE})))

        async def probe() -> PendingApproval | None:
            pending = await h.conversations.pending(workflow_id)
            found = [a for a in pending.approvals if a.input_request is not None]
            return found[0] if found else None

        approval = await eventually(probe, what="the link's approval")
        asked = approval.input_request
        assert asked is not None and (asked.kind, asked.host) == ("url", "auth.example.com")
        assert "auth.example.com" in approval.summary
        await h.conversations.approve(
            workflow_id, "u", arguments_hash=approval.arguments_hash, decided_by="ada"
        )
        outputs = await h.wait_outputs(workflow_id, "u")
        await _replays(h, workflow_id)
    assert json.loads(outputs["u"].content) == {"result": "connect: accept"}
    assert len(_log_events(log, "call")) == 1


async def test_refused_and_unsafe_links_fail_the_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with _harness(dev_env, task_queue, tmp_path / "unsafe") as (h, log):
        workflow_id = await h.start(
            _turns(("u", "notes__connect", {"url": "javascript:alert(document.cookie)"}))
        )
        outputs = await h.wait_outputs(workflow_id, "u")
        assert (await h.conversations.pending(workflow_id)).interactions == []
    assert outputs["u"].failure_kind == "invalid_input_request"
    assert "not http or https" in outputs["u"].content
    async with _harness(dev_env, task_queue, tmp_path / "refused", "refuse") as (h, log):
        workflow_id = await h.start(_turns(("u", "notes__connect", {"url": BASE})))
        outputs = await h.wait_outputs(workflow_id, "u")
    assert outputs["u"].failure_kind == "input_request_refused"
    assert _log_events(log, "call") == []
