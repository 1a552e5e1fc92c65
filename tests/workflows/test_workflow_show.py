"""`temporal workflow show` reads like the conversation.

Tool activities are typed `tool.<name>` with the summary `tool(arg=…)`;
model turns are `model.turn` with the summary `<agent>: <model>, turn <n>`
(issue 25, item 5: every step has one, as Temporal's Web UI shows them);
the workflow has a static summary. This
runs the Temporal CLI from the virtualenv against the session's dev server
and reads its output as a person (text, `--detailed`) or a script (`-o json`)
would.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from typing import Any

import pytest
from agent_support import AGENT, MODELS, TOOLKITS, turns
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from durable_tools import Toolkit, tool
from durable_tools.arguments import SUMMARY_LIMIT
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.testing import ScriptedModel, call
from durable_tools.worker.dev_server import find_temporal_cli
from durable_tools.worker.plugin import DurableToolsPlugin
from durable_tools.workflows.model_turns import turn_summary

CLI_TIMEOUT = 30


async def _show(env: WorkflowEnvironment, workflow_id: str, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        find_temporal_cli(),
        "workflow",
        "show",
        "-w",
        workflow_id,
        "--address",
        env.client.service_client.config.target_host,
        "--namespace",
        env.client.namespace,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT)
    assert process.returncode == 0, err.decode()
    return out.decode()


def _payload_text(payload: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(payload["data"]))


async def test_workflow_show_names_tools_and_summarizes_calls(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"show-{uuid.uuid4()}"
    script = turns(
        [("c1", "get_weather", {"city": "Paris"}), ("c2", "boom", {})],
        [("c3", "get_weather", {"city": "Oslo"})],
    )
    async with Worker(client, task_queue=task_queue):
        await conversations.start(
            workflow_id,
            agent=AGENT,
            message=script,
            options=ConversationOptions(idle_timeout=0.5),
            summary="weather for a trip",
        )
        result = await conversations.result(workflow_id)
    assert result.turns == 3

    # Without a worker: `show` reads the history from the server.
    detailed = await _show(dev_env, workflow_id, "--detailed")
    assert "activityType.name: tool.get_weather" in detailed
    assert "activityType.name: tool.boom" in detailed
    assert "activityType.name: model.turn" in detailed
    for shown in ("get_weather(city='Paris')", "get_weather(city='Oslo')", "boom()"):
        assert f"userMetadata.summary: {shown}" in detailed
    for turn in (1, 2, 3):
        assert f"userMetadata.summary: main: directed, turn {turn}" in detailed
    assert "input[0].summary" not in detailed  # one display copy, not two
    assert "userMetadata.summary: weather for a trip" in detailed
    assert "userMetadata.summary: idle: waiting for the next user message" in detailed

    plain = await _show(dev_env, workflow_id)
    assert "ActivityTaskScheduled" in plain and "COMPLETED" in plain

    events = json.loads(await _show(dev_env, workflow_id, "-o", "json"))["events"]
    scheduled = [
        (
            e["activityTaskScheduledEventAttributes"]["activityType"]["name"],
            _payload_text(e["userMetadata"]["summary"]) if "userMetadata" in e else None,
            _payload_text(e["activityTaskScheduledEventAttributes"]["input"]["payloads"][0]).get(
                "summary"
            ),
        )
        for e in events
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    ]
    assert scheduled == [
        ("model.turn", "main: directed, turn 1", None),
        ("tool.get_weather", "get_weather(city='Paris')", None),
        ("tool.boom", "boom()", None),
        ("model.turn", "main: directed, turn 2", None),
        ("tool.get_weather", "get_weather(city='Oslo')", None),
        ("model.turn", "main: directed, turn 3", None),
    ]


SECRET = "tok-summary-secret-5521"


@tool
async def sign_in(user: str, api_key: str) -> str:
    """Sign in.

    Args:
        user: Who.
        api_key: Their key.
    """
    return f"signed in {user}"


@tool
async def note(text: str) -> str:
    """Keep a note.

    Args:
        text: Any text.
    """
    return f"noted {len(text)} characters"


def _summaries(history: WorkflowHistory) -> list[tuple[str, str | None]]:
    """Each scheduled activity's type and its summary (user metadata), in order."""
    converter = pydantic_data_converter.payload_converter
    return [
        (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            converter.from_payload(e.user_metadata.summary, str)
            if e.user_metadata.HasField("summary")
            else None,
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_every_step_has_a_bounded_redacted_summary(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25, item 5: the Web UI's summary of every tool call and every model turn."""
    monkeypatch.setenv("SUMMARY_TEST_TOKEN", SECRET)  # a secret the worker knows
    model = ScriptedModel(
        [
            [call("c1", "sign_in", user="ana", api_key="k-8d1f0a77e2")],
            [call("c2", "note", text=f"see {SECRET} " + "x" * 500)],
            [call("c3", "note", text="short")],
            "done",
        ]
    )
    plugin = DurableToolsPlugin(
        toolkits={"notes": Toolkit(sign_in, note)},
        models={"scripted": model},
        search_attributes=False,
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    workflow_id = f"summaries-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue):
        handle = await Conversations(client, task_queue=task_queue).start(
            workflow_id,
            agent=AgentConfig(name="helper", model="scripted", toolkit="notes"),
            message="go",
            options=ConversationOptions(idle_timeout=0.5, search_attributes=False),
        )
        await handle.result()
    history = await dev_env.client.get_workflow_handle(workflow_id).fetch_history()

    summaries = _summaries(history)
    assert summaries[:2] == [
        ("model.turn", "helper: scripted, turn 1"),
        ("tool.sign_in", "sign_in(user='ana', api_key='[redacted]')"),
    ]
    assert summaries[2] == ("model.turn", "helper: scripted, turn 2")
    kind, long_note = summaries[3]
    assert kind == "tool.note" and long_note is not None
    assert long_note.startswith("note(text='see [redacted] xxx") and long_note.endswith("…")
    assert len(long_note) == SUMMARY_LIMIT
    assert summaries[4:] == [
        ("model.turn", "helper: scripted, turn 3"),
        ("tool.note", "note(text='short')"),
        ("model.turn", "helper: scripted, turn 4"),
    ]

    # A history recorded without summaries (before this change) replays:
    # Temporal does not compare a command's user metadata on replay.
    bare = History(events=history.events)
    for event in bare.events:
        event.ClearField("user_metadata")
    assert not any(e.HasField("user_metadata") for e in bare.events)
    replayer = Replayer(workflows=[], plugins=[plugin])
    result = await replayer.replay_workflow(
        WorkflowHistory(workflow_id, list(bare.events)), raise_on_replay_failure=False
    )
    assert result.replay_failure is None


def test_a_turn_summary_keeps_its_number_within_the_limit() -> None:
    agent = AgentConfig(name="a" * 80, model="m" * 80, toolkit="default")
    text = turn_summary(agent, 12345)
    assert len(text) == SUMMARY_LIMIT and text.endswith("…, turn 12345")
    assert turn_summary(AgentConfig(name="solo", toolkit="default"), 2) == "solo, turn 2"
