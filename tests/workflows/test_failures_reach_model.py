"""Invariant 2: nothing a model sends crashes or wedges the conversation.

Against a real Temporal dev server: one model turn asks for an unknown tool,
arguments that violate the schema, arguments that are not JSON, a tool that
raises, a tool that exhausts its retries, a 3 MB result and misused signal
tools. Each call is answered by a `Failure` of the right kind, the next model
request sees every one of them, and the conversation goes on to a normal end.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, get_weather, turns
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, outputs_by_id, running

from durable_tools.constructors import provider_tool
from durable_tools.conversation import AgentConfig
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage, is_reconciled

BAD_CALLS = [
    ("u1", "no_such_tool", {"x": 1}),
    ("v1", "get_weather", {"town": "Paris"}),
    ("v2", "get_weather", "{city: Paris"),
    ("e1", "boom", {}),
    ("e2", "flaky", {}),
    ("b1", "big", {"n_bytes": 3_000_000}),
    ("s1", "sleep", {"seconds": -5}),
    ("h1", "handoff", {"agent": "specialist"}),
    ("ok", "get_weather", {"city": "Oslo"}),
]

EXPECTED_KINDS = {
    "u1": "unknown_tool",
    "v1": "input_validation_error",
    "v2": "input_validation_error",
    "e1": "execution_error",
    "e2": "execution_error",
    "b1": "output_too_large",
    "s1": "input_validation_error",
    "h1": "input_validation_error",
}


# A toolkit that also declares a tool the provider executes (web search).
PROVIDER_KIT = Toolkit(get_weather, provider_tool("web_search", provider="openai"), label="p")
PROVIDER_AGENT = AgentConfig(name="main", model="directed", toolkit="with-provider")


@pytest.fixture
async def harness(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(dev_env, task_queue, ledger, toolkits={"with-provider": PROVIDER_KIT}) as h:
        yield h


async def test_every_bad_call_becomes_a_failure_the_next_turn_sees(harness: Harness) -> None:
    conv = harness.conversations
    # No `handoffs`: the conversation knows only "main", so handing off to
    # "specialist" (allowed by the tool's schema) is a misuse.
    wf = await harness.start(turns(BAD_CALLS))

    items = await harness.wait_assistant_text(wf, "done (directed)")
    outputs = outputs_by_id(items)

    assert set(outputs) == {c[0] for c in BAD_CALLS}
    for call_id, kind in EXPECTED_KINDS.items():
        assert outputs[call_id].is_error, call_id
        assert outputs[call_id].failure_kind == kind, (call_id, outputs[call_id].content)
    reasons = {cid: json.loads(o.content)["reason"] for cid, o in outputs.items() if o.is_error}
    assert "no_such_tool" in reasons["u1"]
    assert "get_weather" in reasons["u1"]  # the model is told which tools exist
    assert "city" in reasons["v1"]
    assert "ValueError: bad state" in reasons["e1"]
    assert "upstream unavailable" in reasons["e2"] and "3 attempts" in reasons["e2"]
    assert "3000" in reasons["b1"] and "limit" in reasons["b1"]
    assert "no agent named 'specialist'" in reasons["h1"]
    # The good call of the same turn is unaffected.
    assert not outputs["ok"].is_error
    assert json.loads(outputs["ok"].content) == {"city": "Oslo", "temp_c": 21}

    # flaky ran exactly its 3 attempts; nothing retried forever.
    assert [r["attempt"] for r in harness.ledger_rows("flaky")] == [1, 2, 3]

    # The second model request saw every output, right after its call turn.
    requests = [r for r in harness.models["directed"].requests if r.workflow_id == wf]
    assert len(requests) == 2
    seen = requests[1].transcript
    assert is_reconciled(seen)
    assert isinstance(seen[1], AssistantMessage) and len(seen[1].tool_calls) == len(BAD_CALLS)
    seen_outputs = [i for i in seen[2:] if isinstance(i, ToolCallOutput)]
    assert {o.call_id: o.failure_kind for o in seen_outputs if o.is_error} == EXPECTED_KINDS

    # No oversized payload reached history: the 3 MB string never left the worker.
    assert all(len(o.content) < 10_000 for o in outputs.values())

    # The conversation goes on: a further message gets a model answer, then it
    # finishes normally; the workflow never failed.
    status = await conv.status(wf)
    assert status.state == "idle" and status.reconciled and status.turns == 2
    await conv.send(wf, "still there?")
    items = await harness.wait_assistant_text(wf, "echo: still there?")
    assert isinstance(items[-2], UserMessage) and items[-2].text == "still there?"
    await conv.send(wf, turns([("f1", "finish", {"output": {"survived": True}})]))
    result = await harness.result(wf)
    assert result.status == "finished"
    assert result.output == {"survived": True}
    assert await harness.execution_status(wf) == WorkflowExecutionStatus.COMPLETED


async def test_failures_across_consecutive_turns_keep_the_loop_going(harness: Harness) -> None:
    """Bad calls in consecutive turns: each turn's failures reach the following turn."""
    wf = await harness.start(
        turns(
            [("t1", "nope", {})],
            [("t2", "get_weather", "not json at all")],
            [("t3", "boom", {})],
            [("t4", "big", {"n_bytes": 3_000_000})],
        )
    )
    items = await harness.wait_assistant_text(wf, "done (directed)")
    assert is_reconciled(items)
    kinds = [(o.call_id, o.failure_kind) for o in items if isinstance(o, ToolCallOutput)]
    assert kinds == [
        ("t1", "unknown_tool"),
        ("t2", "input_validation_error"),
        ("t3", "execution_error"),
        ("t4", "output_too_large"),
    ]
    requests = [r for r in harness.models["directed"].requests if r.workflow_id == wf]
    assert len(requests) == 5
    for n, request in enumerate(requests[1:], start=1):
        last = request.transcript[-1]
        assert isinstance(last, ToolCallOutput) and last.call_id == f"t{n}"
    status = await harness.conversations.status(wf)
    assert status.state == "idle" and status.turns == 5
    assert await harness.execution_status(wf) == WorkflowExecutionStatus.RUNNING


async def test_a_provider_tool_called_as_a_local_call_is_answered_not_run(
    harness: Harness,
) -> None:
    """The model asks the loop to run a provider-executed tool: `non_local_tool`."""
    wf = await harness.start(
        turns(
            [("p1", "web_search", {"query": "weather"}), ("w1", "get_weather", {"city": "Oslo"})]
        ),
        agent=PROVIDER_AGENT,
    )
    items = await harness.wait_assistant_text(wf, "done (directed)")
    outputs = outputs_by_id(items)
    assert outputs["p1"].failure_kind == "non_local_tool"
    assert "provider tool" in json.loads(outputs["p1"].content)["reason"]
    assert not outputs["w1"].is_error
    assert is_reconciled(items)
    assert (await harness.conversations.status(wf)).state == "idle"
