"""`temporal workflow show` reads like the conversation.

Tool activities are typed `tool.<name>` and their input carries a
`tool(arg=…)` summary; model turns are `model.turn` with `<agent>: <model>,
turn <n>` where the agent starts; the workflow has a static summary. This
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

from agent_support import AGENT, MODELS, TOOLKITS, turns
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools.client import Conversations
from durable_tools.conversation import ConversationOptions
from durable_tools.worker.dev_server import find_temporal_cli
from durable_tools.worker.plugin import DurableToolsPlugin

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
    for call in ("get_weather(city='Paris')", "get_weather(city='Oslo')", "boom()"):
        assert f"input[0].summary: {call}" in detailed  # in the tool activity's input
    assert "userMetadata.summary: main: directed, turn 1" in detailed
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
    # A model turn is summarized where the agent starts (the run's first turn,
    # a handoff), and a tool call in its input: an activity summary (user
    # metadata) costs worker CPU on every workflow task.
    assert scheduled == [
        ("model.turn", "main: directed, turn 1", None),
        ("tool.get_weather", None, "get_weather(city='Paris')"),
        ("tool.boom", None, "boom()"),
        ("model.turn", None, None),
        ("tool.get_weather", None, "get_weather(city='Oslo')"),
        ("model.turn", None, None),
    ]
