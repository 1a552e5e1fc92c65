"""Slim per-turn records (issue 12, item 2), on the dev server.

Each call's arguments are recorded once (in the model turn's result), the
agent configuration once per run (in the run's input); the tool activity finds
the arguments on the worker that planned them, or by the `tool_call` query on
a worker that did not, and the model activity reads the configuration by the
`agent_config` query.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import payloads_of

from durable_tools import Toolkit, tool
from durable_tools._wire import (
    CallReference,
    DeltaEntry,
    ModelTurn,
    ModelTurnRequest,
    PlannedCall,
    ToolActivityInput,
    TranscriptDelta,
)
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions, PendingApproval
from durable_tools.results import ToolCall
from durable_tools.testing import ScriptedModel, call
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage
from durable_tools.worker.plugin import DurableToolsPlugin

MARKER = "needle-7f3a"
INSTRUCTIONS = "instructions-b91e " * 20


@tool(retry=1)
async def shout(text: str) -> str:
    """Return the text in capitals.

    Args:
        text: Any text.
    """
    return text.upper()


@tool(needs_approval=True)
async def guarded_shout(text: str) -> str:
    """Return the text in capitals, once a person approves.

    Args:
        text: Any text.
    """
    return text.upper()


async def _occurrences(env: WorkflowEnvironment, workflow_id: str, needle: str) -> int:
    """Copies of `needle` in the history's payloads but its display summaries (user metadata)."""
    history = await env.client.get_workflow_handle(workflow_id).fetch_history()
    return sum(
        payload.data.decode(errors="replace").count(needle)
        for event in history.events
        for payload in payloads_of(event, skip="user_metadata")
    )


def _plugin(model: ScriptedModel) -> DurableToolsPlugin:
    return DurableToolsPlugin(
        toolkits={"default": Toolkit(shout, guarded_shout)},
        models={"model": model},
        search_attributes=False,
    )


def _client(env: WorkflowEnvironment, plugin: DurableToolsPlugin) -> Client:
    config = env.client.config()
    config["plugins"] = [plugin]
    return Client(**config)


def _start_options() -> dict[str, Any]:
    return {
        "agent": AgentConfig(model="model", toolkit="default", instructions=INSTRUCTIONS),
        "message": "go",
        "options": ConversationOptions(idle_timeout=0.5, search_attributes=False),
    }


async def test_arguments_and_configuration_are_recorded_once(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    model = ScriptedModel([[call("c1", "shout", text=MARKER)], "done"])
    client = _client(dev_env, _plugin(model))
    workflow_id = f"slim-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue):
        handle = await Conversations(client, task_queue=task_queue).start(
            workflow_id, **_start_options()
        )
        await handle.result()
    # The tool ran with the arguments it was never sent, and the model saw them.
    outputs = [o for o in model.requests[1].transcript if isinstance(o, ToolCallOutput)]
    assert [(o.call_id, o.content) for o in outputs] == [("c1", "NEEDLE-7F3A")]
    assert await _occurrences(dev_env, workflow_id, MARKER) == 1
    # Beside it, one display copy: the tool activity's summary (user
    # metadata, at most 120 characters), not its input.
    history = await dev_env.client.get_workflow_handle(workflow_id).fetch_history()
    holding = [
        (e.event_type, json.loads(p.data) if e.HasField("user_metadata") else None)
        for e in history.events
        for p in payloads_of(e)
        if MARKER in p.data.decode(errors="replace")
    ]
    assert holding == [
        (EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, None),  # the model turn
        (EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, f"shout(text='{MARKER}')"),
    ]
    assert len(model.requests) == 2
    assert all(r.instructions == INSTRUCTIONS for r in model.requests)
    # Two model turns, one run: the instructions are in the run's input and
    # its first model request only.
    assert await _occurrences(dev_env, workflow_id, "instructions-b91e") == 2 * 20


async def test_a_worker_that_did_not_plan_the_call_reads_it_by_query(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    model = ScriptedModel([[call("g1", "guarded_shout", text=MARKER)], "done"])
    workflow_id = f"slim-{uuid.uuid4()}"
    first = _client(dev_env, _plugin(model))
    conversations = Conversations(first, task_queue=task_queue)
    async with Worker(first, task_queue=task_queue):
        handle = await conversations.start(workflow_id, **_start_options())
        pending = await _approval(conversations, workflow_id)
    # A new worker: no memory of the planned call, nor of the configuration.
    second = _client(dev_env, _plugin(model))
    async with Worker(second, task_queue=task_queue):
        await Conversations(second, task_queue=task_queue).approve(
            workflow_id, pending.call_id, arguments_hash=pending.arguments_hash, decided_by="t"
        )
        result = await handle.result()
    assert result.status == "idle_timeout"
    outputs = [o for o in model.requests[1].transcript if isinstance(o, ToolCallOutput)]
    assert [(o.call_id, o.content, o.is_error) for o in outputs] == [("g1", "NEEDLE-7F3A", False)]
    assert await _occurrences(dev_env, workflow_id, MARKER) == 1


async def _approval(conversations: Conversations, workflow_id: str) -> PendingApproval:
    for _ in range(200):
        pending = await conversations.pending(workflow_id)
        if pending.approvals:
            return pending.approvals[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no approval became pending")


def test_a_recorded_turn_names_each_call_once() -> None:
    first = ToolCall(call_id="a", name="shout", arguments=json.dumps({"text": MARKER}))
    other = ToolCall(call_id="b", name="shout", arguments="{}")
    turn = ModelTurn(
        message=AssistantMessage(tool_calls=(first, other)),
        plans=[
            PlannedCall(call=first, kind="local", arguments_hash="h1", summary="s"),
            # A plan whose call differs from the message's keeps it whole.
            PlannedCall(
                call=other.model_copy(update={"arguments": '{"x": 1}'}),
                kind="unknown",
                arguments_hash="h2",
                summary="s",
            ),
        ],
    )
    recorded = turn.model_dump_json()
    assert recorded.count("needle-7f3a") == 1
    assert ModelTurn.model_validate_json(recorded) == turn
    # A turn recorded before (whole calls in the plans) decodes as it is.
    legacy = turn.model_dump(mode="json", round_trip=True)
    legacy["plans"][0]["call"] = first.model_dump(mode="json")
    legacy["plans"][0].pop("call_id")
    assert ModelTurn.model_validate(legacy) == turn


_RETRY_FIELDS = ("max_attempts", "initial_interval", "backoff_coefficient", "maximum_interval")
_RETRY_DEFAULTS = {"max_attempts": 1, "initial_interval": 1.0, "backoff_coefficient": 2.0,
                   "maximum_interval": 60.0}  # fmt: skip


@given(
    max_attempts=st.sampled_from([1, 2, 10]),
    initial_interval=st.sampled_from([1.0, 0.5, 2.0]),
    backoff_coefficient=st.sampled_from([2.0, 1.0, 1.5]),
    maximum_interval=st.sampled_from([60.0, 1.0, 600.0]),
    timeout=st.sampled_from([None, 60.0, 1.0]),
)
def test_a_recorded_plan_leaves_out_its_defaults_and_decodes_back(
    max_attempts: int,
    initial_interval: float,
    backoff_coefficient: float,
    maximum_interval: float,
    timeout: float | None,
) -> None:
    """Issue 26, item 2: a field with its default is not recorded; it decodes back."""
    values: dict[str, Any] = {
        "max_attempts": max_attempts,
        "initial_interval": initial_interval,
        "backoff_coefficient": backoff_coefficient,
        "maximum_interval": maximum_interval,
    }
    planned = ToolCall(call_id="a", name="shout", arguments='{"text": "x"}')
    plan = PlannedCall(
        call=planned, kind="local", arguments_hash="h", summary="s", timeout=timeout, **values
    )
    turn = ModelTurn(message=AssistantMessage(tool_calls=(planned,)), plans=[plan])
    recorded = json.loads(turn.model_dump_json())
    written = recorded["plans"][0]
    for name, value in values.items():
        assert (name in written) == (value != _RETRY_DEFAULTS[name]), name
    assert ("timeout" in written) == (timeout is not None)
    for name in ("descriptors", "summary", "messages_supersede", "cost_usd", "budget"):
        assert name not in recorded  # `None`: left out
    assert ModelTurn.model_validate(recorded) == turn
    # A turn recorded before (every retry field written out) decodes the same.
    written.update({name: _RETRY_DEFAULTS[name] for name in _RETRY_FIELDS if name not in written})
    assert ModelTurn.model_validate(recorded) == turn


def test_activity_inputs_leave_out_their_nones_and_decode_back() -> None:
    """Issue 26, item 2: a delta entry's and a tool input's `None`s are not recorded."""
    delta = TranscriptDelta(
        start=0,
        start_digest="d0",
        entries=[
            DeltaEntry(item=UserMessage(text="hi")),
            DeltaEntry(turn=1),
            DeltaEntry(call_id="c1"),
        ],
        digest="d1",
    )
    request = ModelTurnRequest(
        workflow_id="w", run_id="r", turn=2, upto=3, agent_name="default", delta=delta
    )
    recorded = json.loads(request.model_dump_json())
    assert [set(entry) for entry in recorded["delta"]["entries"]] == [
        {"item"}, {"turn"}, {"call_id"}
    ]  # fmt: skip
    assert ModelTurnRequest.model_validate(recorded) == request
    # Recorded before, with every `None` written out: the same request.
    legacy = dict(recorded)
    legacy["delta"] = {**recorded["delta"], "entries": [
        {"item": None, "turn": None, "call_id": None, **entry}
        for entry in recorded["delta"]["entries"]
    ]}  # fmt: skip
    assert ModelTurnRequest.model_validate(legacy) == request

    tool_input = ToolActivityInput(
        toolkit="k",
        workflow_id="w",
        idempotency_key="w/c1",
        reference=CallReference(call_id="c1", name="shout", digest="h"),
    )
    written = json.loads(tool_input.model_dump_json())
    assert "call" not in written and "resume" not in written
    assert written["max_result_bytes"] == tool_input.max_result_bytes  # a limit: always written
    assert ToolActivityInput.model_validate({**written, "call": None}) == tool_input


_JSON = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.lists(st.integers() | st.text(max_size=4), max_size=2)
)
_OPTIONAL_PLAN_FIELDS = sorted(
    n for n, f in PlannedCall.model_fields.items() if not f.is_required()
)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(values=st.dictionaries(st.sampled_from(_OPTIONAL_PLAN_FIELDS), _JSON, max_size=6))
def test_any_plan_that_decodes_records_and_decodes_back_equal(values: dict[str, Any]) -> None:
    """Hostile plan fields (any JSON, `True` for `1` included): what validates round-trips."""
    planned = ToolCall(call_id="a", name="shout", arguments="{}")
    fields = {"call": planned, "kind": "local", "arguments_hash": "h", "summary": "s"}
    try:
        plan = PlannedCall.model_validate({**fields, **values})
        turn = ModelTurn(message=AssistantMessage(tool_calls=(plan.call,)), plans=[plan])
    except ValidationError:
        return  # refused whole: nothing recorded
    assert ModelTurn.model_validate_json(turn.model_dump_json()) == turn
