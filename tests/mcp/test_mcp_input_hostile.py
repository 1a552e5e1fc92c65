"""Hostile answers to an MCP server's question never fail a workflow task (hypothesis).

A call of the test server's `paint` waits for its first form answer; each
example sends random `answer` signals and `answer_now` updates (any call id,
hash, action and value: wrong types, lone surrogates, decline with a value,
hashes of other questions), then answers what is still pending properly. The
call ends with exactly one output, the server's tool body runs at most once,
and the history holds no failed workflow task.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, eventually, outputs_by_id, running

from durable_tools.conversation import PendingInteraction
from durable_tools.mcp import McpServerConfig

T = TypeVar("T")
SERVER = Path(__file__).with_name("mcp_test_server.py")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.just("\ud800"),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)

form_values = st.fixed_dictionaries(
    {},
    optional={
        "name": json_values,
        "color": json_values,
        "coats": json_values,
        "extra": json_values,
    },
)

answers = st.fixed_dictionaries(
    {
        "call_id": st.sampled_from(["p", "q", ""]) | json_values,
        "arguments_hash": st.sampled_from(["RIGHT", "OTHER", ""]) | json_values,
    },
    optional={
        "value": form_values | json_values,
        "action": st.sampled_from(["accept", "decline", "cancel", "ACCEPT", ""]) | json_values,
        "answered_by": st.text(max_size=12) | json_values,
        "surprise": json_values,
    },
)

deliveries = st.lists(
    st.tuples(st.sampled_from(["answer", "answer_now"]), answers), min_size=1, max_size=6
)


NAMED: list[tuple[str, dict[str, Any]]] = [
    # Right call and hash: a lone surrogate could not travel to the server.
    ("answer", {"call_id": "p", "arguments_hash": "RIGHT", "value": {"name": "\ud800"}}),
    ("answer_now", {"call_id": "p", "arguments_hash": "RIGHT", "value": {"name": "\ud800"}}),
    # A decline with a value, an unknown action, a wrong type.
    ("answer_now", {"call_id": "p", "arguments_hash": "RIGHT", "value": 1, "action": "decline"}),
    ("answer", {"call_id": "p", "arguments_hash": "RIGHT", "value": None, "action": "maybe"}),
    ("answer", {"call_id": "p", "arguments_hash": "RIGHT", "value": {"name": 3}}),
]
"""The named cases, run first."""


def _raw(value: Any, digest: str) -> RawValue:
    if isinstance(value, dict) and value.get("arguments_hash") == "RIGHT":  # pyright: ignore
        value = {**value, "arguments_hash": digest}  # pyright: ignore
    data = json.dumps(value).encode()  # lone surrogates travel escaped, as JSON allows
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))


def _server(log: Path) -> McpServerConfig:
    return McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log)],
        trust_annotations=True,
    )


async def _pending_question(h: Harness, workflow_id: str) -> PendingInteraction | None:
    pending = await h.conversations.pending(workflow_id)
    return next((i for i in pending.interactions if i.call_id == "p"), None)


async def _example(h: Harness, batch: list[tuple[str, dict[str, Any]]], log: Path) -> None:
    workflow_id = await h.start(json.dumps({"turns": [[["p", "notes__paint", {"thing": "x"}]]]}))
    asked = await eventually(lambda: _pending_question(h, workflow_id), what="the question")
    handle = h.client.get_workflow_handle(workflow_id)
    for name, answer in batch:
        raw = _raw(answer, asked.arguments_hash)
        if name == "answer_now":
            try:
                await handle.execute_update("answer_now", args=[raw])
            except WorkflowUpdateFailedError:
                pass
        else:
            await handle.signal("answer", args=[raw])
    # Then a person answers whatever is still asked, properly.
    for _ in range(6):
        outputs = outputs_by_id(await h.conversations.history(workflow_id))
        if "p" in outputs:
            break
        question = await _pending_question(h, workflow_id)
        if question is None:
            await asyncio.sleep(0.1)
            continue
        assert question.answer_schema is not None
        field = question.answer_schema["required"][0]
        try:
            await h.conversations.answer(
                workflow_id, "p", {field: "ok"}, arguments_hash=question.arguments_hash, wait=True
            )
        except Exception:  # the question moved on meanwhile (a random answer applied)
            continue
    outputs = await h.wait_outputs(workflow_id, "p")
    items = await h.conversations.history(workflow_id)
    assert (
        sum(1 for i in items if getattr(i, "call_id", None) == "p" and hasattr(i, "is_error")) == 1
    )
    assert outputs["p"].content  # an answer or a Failure the model reads
    failed: list[str] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failed.append(str(event.workflow_task_failed_event_attributes.failure.message))
    assert failed == []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    finals = [r for r in rows if r["event"] == "call" and r.get("key") == f"{workflow_id}/p"]
    assert len(finals) <= 1


@pytest.mark.timeout(300)
async def test_hostile_answers_never_fail_a_workflow_task(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    loop = asyncio.get_running_loop()

    def on_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=90)

    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[_server(log)]) as h:

        @settings(
            max_examples=12,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(batch=deliveries)
        @example(batch=NAMED)
        def check(batch: list[tuple[str, dict[str, Any]]]) -> None:
            on_loop(_example(h, batch, log))

        await asyncio.to_thread(check)
