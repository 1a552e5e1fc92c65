"""The built-in offline models drive real conversations on the Temporal dev server.

`model="test"` calls every non-signal tool of a toolkit once with arguments
generated from its schema, then summarizes; `model="scripted:FILE"` plays a
script file. Neither is registered on the worker: the model activity resolves
the spec.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import pytest
from agent_support import LEDGER_ENV, record
from pydantic import BaseModel, Field
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, assistant_texts, eventually, outputs_by_id, running

from durable_tools import (
    Toolkit,
    finish_tool,
    interaction_tool,
    pause_tool,
    sleep_tool,
    tool,
)
from durable_tools.constructors import provider_tool
from durable_tools.conversation import AgentConfig
from durable_tools.transcript import AssistantMessage


class Unit(StrEnum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Slot(BaseModel):
    start: datetime
    minutes: int = Field(ge=15, le=120)


@tool(retry=1)
async def get_time(city: str) -> dict[str, Any]:
    """The current time in a city.

    Args:
        city: City name.
    """
    record({"tool": "get_time", "city": city})
    return {"city": city, "datetime": "2026-05-01T12:00:00+02:00"}


@tool(retry=1)
async def convert(value: float, unit: Unit) -> str:
    """Convert a temperature.

    Args:
        value: Degrees.
        unit: Target unit.
    """
    record({"tool": "convert", "unit": unit.value})
    return f"{value} {unit.value}"


@tool(retry=1)
async def schedule(
    title: Annotated[str, Field(min_length=1)], slots: Annotated[list[Slot], Field(min_length=2)]
) -> int:
    """Schedule a meeting.

    Args:
        title: Meeting title.
        slots: Candidate slots.
    """
    record({"tool": "schedule", "slots": len(slots)})
    return len(slots)


@tool(retry=1)
async def fail_always(reason: str) -> str:
    """A tool that raises.

    Args:
        reason: Ignored.
    """
    record({"tool": "fail_always"})
    raise RuntimeError("out of order")


LOCAL_TOOLS = ["get_time", "convert", "schedule", "fail_always"]

OFFLINE_KIT = Toolkit(
    get_time,
    convert,
    schedule,
    fail_always,
    interaction_tool("ask", parameters={"type": "object", "properties": {}}),
    provider_tool("web_search", provider="openai"),
    sleep_tool(),
    pause_tool(),
    finish_tool(),
    label="offline",
)


@pytest.fixture
async def harness(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(
        dev_env,
        task_queue,
        ledger,
        toolkits={"offline": OFFLINE_KIT},
        allow_offline_models=True,
        scripts_dir=tmp_path,
    ) as h:
        yield h


async def test_test_model_calls_every_non_signal_tool_once(harness: Harness) -> None:
    wf = await harness.start(
        "exercise the toolkit", agent=AgentConfig(name="main", model="test", toolkit="offline")
    )

    async def summary() -> list[str]:
        texts = assistant_texts(await harness.conversations.history(wf))
        return [t for t in texts if t.startswith("Called ")]

    (text,) = await eventually(summary, what="the summary turn")
    lines = text.splitlines()
    assert lines[:4] == [
        "Called 4 tools: 3 ok, 1 failed.",
        "- get_time: ok",
        "- convert: ok",
        "- schedule: ok",
    ], text
    assert lines[4].startswith("- fail_always: failed (execution_error: "), text
    assert "out of order" in lines[4], text
    assert sorted(r["tool"] for r in harness.ledger_rows()) == sorted(LOCAL_TOOLS)
    assert harness.ledger_rows("schedule")[0]["slots"] >= 2

    items = await harness.conversations.history(wf)
    (calling,) = [i for i in items if isinstance(i, AssistantMessage) and i.tool_calls]
    assert [c.name for c in calling.tool_calls] == LOCAL_TOOLS
    status = await harness.conversations.status(wf)
    assert status.state == "idle" and status.reconciled and status.turns == 2


async def test_scripted_model_plays_a_script_file(harness: Harness, tmp_path: Path) -> None:
    script = tmp_path / "weather.yaml"
    script.write_text(
        "turns:\n"
        "  - text: Checking the clock.\n"
        "    tool_calls:\n"
        "      - {name: get_time, arguments: {city: Paris}, id: c1}\n"
        "  - text: 'It is {{ c1.datetime }} in {{ c1.city }}'\n"
    )
    wf = await harness.start(
        "what time is it?",
        agent=AgentConfig(name="main", model=f"scripted:{script}", toolkit="offline"),
    )
    items = await harness.wait_assistant_text(wf, "It is 2026-05-01T12:00:00+02:00 in Paris")
    assert json.loads(outputs_by_id(items)["c1"].content)["city"] == "Paris"
    assert harness.ledger_rows("get_time") == [{"tool": "get_time", "city": "Paris"}]
