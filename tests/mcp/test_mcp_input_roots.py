"""Roots requests inside input-required results, through conversations on the dev server.

The test server's `files` asks only for the client's roots (the `mcp` SDK's
`Resolve`/`ListRoots`): the tool activity answers from the server's
configuration and calls again at once, so the call ends in one activity
with no question. `tidy` asks the user's name and the roots in one round:
the person is asked the name only ("1 of 1"), and the roots, recorded in
the activity's result, go back beside the person's answer with the exact
`requestState`. A task (`survey`) that asks for the roots, alone or beside
its question, gets them with `tasks/update` (alone: with the next poll, no
one asked). Every history replays in the strict sandbox, and odd mixes of
roots requests (too many, bad keys, odd `_meta`, beside an unsafe link or an
image sampling request) end with one output and no failed workflow task.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp_support import stdio_test_server, task_test_server
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from test_mcp_input_required import question, request_states
from test_mcp_tasks import failed_workflow_tasks
from workflow_helpers import running

from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import StrictAgentWorkflow

ROOTS = ["/srv/data", "file:///home/ada/"]
LISTED = [["file:///srv/data", "data"], ["file:///home/ada/", "ada"]]


def _turns(*calls: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps({"turns": [[list(c) for c in calls]]})


def _rows(log: Path, event: str, tool: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event and r.get("tool") == tool]


def _result(content: str) -> Any:
    return json.loads(json.loads(content)["result"])


def _tool_activities(history: WorkflowHistory, tool: str) -> int:
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == f"tool.{tool}"
    )


async def _replays(history: WorkflowHistory) -> None:
    replayed = await Replayer(
        workflows=[StrictAgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(strict=True),
    ).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


async def test_roots_alone_are_answered_in_the_activity(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = stdio_test_server(log, trust_annotations=True, roots=ROOTS)
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        workflow_id = await h.start(_turns(("f", "notes__files", {})))
        outputs = await h.wait_outputs(workflow_id, "f")
        await h.wait_assistant_text(workflow_id, "done (directed)")
        events, _ = await h.conversations.retained_events(workflow_id)
        history = await h.client.get_workflow_handle(workflow_id).fetch_history()
        failed = await failed_workflow_tasks(h.client.get_workflow_handle(workflow_id))
    await _replays(history)
    assert failed == []
    assert _result(outputs["f"].content) == {"roots": LISTED}
    # No person, no durable wait: one activity, no question.
    assert _tool_activities(history, "notes__files") == 1
    assert not [e for e in events if e.kind in ("question_asked", "approval_requested")]
    assert [r["roots"] for r in _rows(log, "call", "files")] == [LISTED]
    assert len(_rows(log, "round", "roots")) == 2  # asked, then answered


async def test_roots_beside_a_question_travel_with_the_round(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = stdio_test_server(log, trust_annotations=True, roots=ROOTS)
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        workflow_id = await h.start(_turns(("t", "notes__tidy", {})))
        asked = await question(h, workflow_id, "t", 1)
        shown = asked.input_request
        assert shown is not None
        assert (shown.kind, shown.message, shown.index, shown.count) == (
            "form",
            "What is your name?",
            1,
            1,
        )
        pending = await h.conversations.pending(workflow_id)
        assert len(pending.interactions) == 1 and not pending.approvals
        await h.conversations.answer(
            workflow_id, "t", {"name": "Ada"}, arguments_hash=asked.arguments_hash
        )
        outputs = await h.wait_outputs(workflow_id, "t")
        await h.wait_assistant_text(workflow_id, "done (directed)")
        events, _ = await h.conversations.retained_events(workflow_id)
        states = await request_states(h, workflow_id)
        history = await h.client.get_workflow_handle(workflow_id).fetch_history()
        failed = await failed_workflow_tasks(h.client.get_workflow_handle(workflow_id))
    await _replays(history)
    assert failed == []
    assert _result(outputs["t"].content) == {"name": {"name": "Ada"}, "roots": LISTED}
    assert _tool_activities(history, "notes__tidy") == 2  # asked, then retried with both
    assert [e.text for e in events if e.kind == "question_asked"] == ["What is your name?"]
    finals = _rows(log, "call", "tidy")
    assert len(finals) == 1 and finals[0]["key"] == f"{workflow_id}/t"
    # The requestState went back to the server and stayed out of the events.
    assert len(states) == 1
    events_text = "\n".join(e.model_dump_json() for e in events)
    assert states[0] not in events_text


@pytest.mark.parametrize("where", ["alone", "beside"])
async def test_a_task_asking_for_roots_gets_them_with_its_update(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, where: str
) -> None:
    log = tmp_path / "server.jsonl"
    server = task_test_server(log).model_copy(update={"roots": ROOTS})
    args = {"topic": "tides", "seconds": 2.0, "roots": where}
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        workflow_id = await h.start(_turns(("s", "notes__survey", args)))
        asked = await question(h, workflow_id, "s", 1)  # a roots-only update is no round
        shown = asked.input_request
        assert shown is not None and (shown.message, shown.count) == ("Who is the survey for?", 1)
        await h.conversations.answer(
            workflow_id, "s", {"name": "Ada"}, arguments_hash=asked.arguments_hash
        )
        outputs = await h.wait_outputs(workflow_id, "s", timeout=60)
        events, _ = await h.conversations.retained_events(workflow_id)
        handle = h.client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        failed = await failed_workflow_tasks(handle)
    await _replays(history)
    assert failed == []
    content = outputs["s"].content
    assert "survey of tides for Ada (accept) in file:///srv/data file:///home/ada/" in content
    assert [e.text for e in events if e.kind == "question_asked"] == ["Who is the survey for?"]
    (task_id,) = {r["task_id"] for r in _rows(log, "call", "survey")}
    updates = [
        r["keys"]
        for r in (json.loads(x) for x in log.read_text().splitlines())
        if r["event"] == "task_update"
    ]
    if where == "alone":
        assert updates == [[f"roots-{task_id}"], [f"who-{task_id}"]]
    else:
        assert updates == [sorted([f"roots-{task_id}", f"who-{task_id}"])]


ROOTS_ASK = {"method": "roots/list"}
FORM_ASK = {
    "method": "elicitation/create",
    "params": {
        "message": "Name?",
        "requestedSchema": {"type": "object", "properties": {"n": {"type": "string"}}},
    },
}
HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({f"r{i}": ROOTS_ASK for i in range(16)}, "answered"),  # the most one result may carry
    ({f"r{i}": ROOTS_ASK for i in range(17)}, "invalid_input_request"),
    ({"r" * 201: ROOTS_ASK}, "invalid_input_request"),
    (
        {"r": {"method": "roots/list", "params": {"_meta": {"x": ["\x00", 1e308, None]}}}},
        "answered",
    ),
    ({"r": ROOTS_ASK, "f": FORM_ASK}, "answered"),  # the form is cancelled below
    (
        {
            "r": ROOTS_ASK,
            "u": {
                "method": "elicitation/create",
                "params": {
                    "mode": "url",
                    "message": "m",
                    "url": "javascript:x",
                    "elicitationId": "e",
                },
            },
        },
        "invalid_input_request",
    ),
    (
        {
            "r": ROOTS_ASK,
            "s": {
                "method": "sampling/createMessage",
                "params": {
                    "maxTokens": 5,
                    "messages": [
                        {
                            "role": "user",
                            "content": {"type": "image", "data": "AA==", "mimeType": "image/png"},
                        }
                    ],
                },
            },
        },
        "unsupported_input_request",
    ),
]


async def test_odd_roots_requests_never_fail_a_workflow_task(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = stdio_test_server(log, trust_annotations=True, roots=ROOTS)
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        for requests, expected in HOSTILE:
            workflow_id = await h.start(_turns(("x", "notes__raw_ask", {"requests": requests})))
            if "f" in requests:
                asked = await question(h, workflow_id, "x", 1)
                await h.conversations.answer(
                    workflow_id, "x", None, arguments_hash=asked.arguments_hash, action="cancel"
                )
            outputs = await h.wait_outputs(workflow_id, "x")
            handle = h.client.get_workflow_handle(workflow_id)
            assert await failed_workflow_tasks(handle) == []
            items = await h.conversations.history(workflow_id)
            assert (
                sum(
                    1
                    for i in items
                    if getattr(i, "call_id", None) == "x" and hasattr(i, "is_error")
                )
                == 1
            )
            assert expected in outputs["x"].content, (list(requests)[:3], outputs["x"].content)
