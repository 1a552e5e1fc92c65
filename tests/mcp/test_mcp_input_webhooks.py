"""Webhooks for what a running call's MCP server asks (issue 28 item 5, with issue 27 item 1).

The test server's `paint` asks a form question in two rounds. With a
webhook configured, each round is sent to it as `question_asked`, then
`question_answered` with who answered and how: four events with four ids,
each accepted once by a real receiver on 127.0.0.1 that fails its first
answer, each signature verified. The recorded history replays (the sends
depend on a `workflow.patched` marker, so runs recorded before them replay
unchanged).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from test_mcp_input_required import question
from webhook_support import SECRET, receiving
from workflow_helpers import eventually, running

from durable_tools.mcp import McpServerConfig
from durable_tools.webhooks import Webhook

SERVER = Path(__file__).with_name("mcp_test_server.py")


def _turns(*calls: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps({"turns": [[list(c) for c in calls]]})


async def test_each_round_of_an_mcp_question_is_sent_to_the_webhook_once(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    server = McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(tmp_path / "server.jsonl")],
        trust_annotations=True,  # `paint` is not destructive: no approval first
    )
    with receiving(fail_first=1) as receiver:
        hooks = {"ops": Webhook(url=receiver.url, secret=SECRET)}
        async with running(
            dev_env, task_queue, tmp_path / "ledger.jsonl", mcp_servers=[server], webhooks=hooks
        ) as h:
            wf = await h.start(_turns(("p", "notes__paint", {"thing": "fence"})))
            first = await question(h, wf, "p", 1)
            await h.conversations.answer(
                wf, "p", {"name": "Ada"}, arguments_hash=first.arguments_hash, answered_by="ada"
            )
            second = await question(h, wf, "p", 2)
            await h.conversations.answer(
                wf, "p", {"color": "red"}, arguments_hash=second.arguments_hash, answered_by="bo"
            )
            await h.wait_outputs(wf, "p")
            expected = [("question_asked", "p"), ("question_answered", "p")] * 2

            async def all_four() -> bool:
                return sorted(receiver.kinds()) == sorted(expected)

            await eventually(all_four, what="four events delivered")
            history = await h.handles[wf].fetch_history()
            replayer = Replayer(workflows=[], plugins=[h.plugin])
            replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert replayed.replay_failure is None
    assert receiver.bad_signatures == 0
    events = list(receiver.accepted.values())
    asked = [e for e in events if e["kind"] == "question_asked"]
    answered = [e for e in events if e["kind"] == "question_answered"]
    assert len({e["round"] for e in asked}) == 2  # one id per round
    assert sorted((e["outcome"], e["decided_by"]) for e in answered) == [
        ("accept", "ada"),
        ("accept", "bo"),
    ]
    assert all(e["tool"] == "notes__paint" and e["call_id"] == "p" for e in events)
    assert len(receiver.requests) == 5  # the first event twice (500, then 200)
