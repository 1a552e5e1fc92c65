"""`durable-tools approve --grant TOOL --grant-arg POINTER=VALUE` (issue 28, grants)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, turns
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result
from workflow_helpers import running

from durable_tools.conversation import ConversationOptions
from durable_tools.grants import GrantScope
from durable_tools.worker.cli import app
from durable_tools.worker.cli.shared import EXIT_BAD_INPUT

runner = CliRunner()


async def cli(*args: str) -> Result:
    # The CLI runs its own event loop: in a thread, beside the test's.
    return await asyncio.to_thread(runner.invoke, app, list(args), env={"COLUMNS": "200"})


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--grant-arg", "/order=A-1"], "--grant-arg needs --grant TOOL"),
        (["--grant", "refund", "--grant-arg", "/order"], "expected POINTER=VALUE"),
        (["--grant", "refund", "--grant-arg", "order=A-1"], "is not a JSON pointer"),
        (["--grant", "", "--grant-arg", "/order=A-1"], "tool: 1 to 200 characters"),
        (["--grant-for", "60"], "--grant-for needs --grant TOOL"),
        (["--grant", "refund", "--grant-for", "0"], "greater than 0"),
        (["--grant", "refund", "--grant-for", "1e9"], "less than or equal to"),
    ],
)
def test_bad_grants_exit_before_anything_is_sent(args: list[str], problem: str) -> None:
    result = runner.invoke(
        app, ["approve", "ticket-1", "call_1", "--hash", "ab" * 32, *args, "--address", "x:1"]
    )
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert problem in result.output


async def test_approve_with_a_grant_lets_the_next_matching_call_run(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    address = dev_env.client.service_client.config.target_host
    async with running(dev_env, task_queue, ledger) as harness:
        wf = await harness.start(
            turns(
                [("r1", "refund", {"order": "A-1", "amount": 100})],
                [("r2", "refund", {"order": "A-1", "amount": 7})],
            ),
            options=ConversationOptions(idle_timeout=60),
        )
        await harness.wait_approval(wf, "r1")
        done = await cli(
            "approve", wf, "r1", "--yes", "--as", "ana", "--grant", "refund",
            "--grant-arg", "/order=A-1", "--address", address, "--timeout", "20",
        )  # fmt: skip
        assert done.exit_code == 0, done.output
        assert 'for the rest of the conversation: refund where /order == "A-1"' in done.output
        outputs = await harness.wait_outputs(wf, "r1", "r2")
        assert outputs["r2"].content == "refunded 7 on A-1"
        [grant] = (await harness.conversations.pending(wf)).grants
        assert grant.scope == GrantScope(tool="refund", arguments={"/order": "A-1"})
        assert (grant.granted_by, grant.uses) == ("ana", ["r2"])
        shown = await cli("pending", wf, "--address", address, "--timeout", "20")
        assert shown.exit_code == 0, shown.output
        assert "Grants (rest of the conversation)" in shown.output
        assert 'refund where /order == "A-1"' in shown.output
