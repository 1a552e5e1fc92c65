"""`mcp-server-time` (PyPI, a dev dependency) over stdio, without Temporal.

Its tools answer with structured content (validated against their output
schemas); a bad timezone or time is a Failure the model can read, never an
exception, and the connection keeps serving the next call.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest
from mcp_support import started

from durable_tools.executor import Output
from durable_tools.mcp import McpServerConfig, McpToolsets
from durable_tools.results import Failure, Ok, ToolCall
from durable_tools.toolkit import Toolkit
from durable_tools.tools import Tool

TIME_SERVER = Path(sys.executable).parent / "mcp-server-time"


@pytest.fixture(scope="module")
async def time_server() -> AsyncIterator[McpToolsets]:
    if not TIME_SERVER.exists():
        pytest.fail(
            f"{TIME_SERVER} is missing: run `make install` (mcp-server-time is a dev extra)"
        )
    server = McpServerConfig(
        name="time",
        command=str(TIME_SERVER),
        args=["--local-timezone", "Etc/UTC"],
        trust_annotations=True,  # its read-only hints are policy (test_mcp_trust.py: untrusted)
    )
    async with started(server) as toolsets:
        yield toolsets


@pytest.fixture
def kit(time_server: McpToolsets) -> Toolkit:
    return time_server.toolkit()


async def _one(kit: Toolkit, name: str, args: dict[str, Any]) -> Ok | Failure:
    outputs: list[Ok | Failure] = []
    async with asyncio.timeout(30):
        async for event in kit.run([ToolCall(call_id="c1", name=name, arguments=json.dumps(args))]):
            assert isinstance(event, Output), event  # no approval, no progress
            outputs.append(event.result)
    assert len(outputs) == 1
    return outputs[0]


def test_tools_and_schemas(kit: Toolkit) -> None:
    assert {t.name for t in kit} == {"time__get_current_time", "time__convert_time"}
    for tool in kit:
        assert isinstance(tool, Tool)
        assert tool.annotations.read_only is True  # trusted, so: no approval, retried
        assert (tool.needs_approval, tool.at_most_once) == (False, False)
        assert tool.output is not None  # the server's output schema
    current = kit.get("time__get_current_time").descriptor()
    assert current.parameters["required"] == ["timezone"]


async def test_current_time_in_paris(kit: Toolkit) -> None:
    before = datetime.now(ZoneInfo("Europe/Paris"))
    result = await _one(kit, "time__get_current_time", {"timezone": "Europe/Paris"})
    after = datetime.now(ZoneInfo("Europe/Paris"))

    assert isinstance(result, Ok), result
    value = cast(dict[str, Any], result.value)
    assert isinstance(value, dict)
    assert value["timezone"] == "Europe/Paris"
    moment = datetime.fromisoformat(value["datetime"])
    assert moment.utcoffset() in (timedelta(hours=1), timedelta(hours=2))  # CET or CEST
    assert moment.utcoffset() == before.utcoffset() or moment.utcoffset() == after.utcoffset()
    assert before.replace(microsecond=0) - timedelta(seconds=1) <= moment <= after
    assert value["day_of_week"] == moment.strftime("%A")
    assert value["is_dst"] is (moment.utcoffset() == timedelta(hours=2))


async def test_convert_time(kit: Toolkit) -> None:
    result = await _one(
        kit,
        "time__convert_time",
        {"source_timezone": "Europe/Paris", "time": "14:30", "target_timezone": "Asia/Tokyo"},
    )
    assert isinstance(result, Ok), result
    source = datetime.fromisoformat(result.value["source"]["datetime"])
    target = datetime.fromisoformat(result.value["target"]["datetime"])
    assert (source.hour, source.minute) == (14, 30)
    assert source == target  # the same instant
    assert target.utcoffset() == timedelta(hours=9)
    assert result.value["source"]["timezone"] == "Europe/Paris"
    assert result.value["target"]["timezone"] == "Asia/Tokyo"
    hours = (target.utcoffset() - source.utcoffset()) / timedelta(hours=1)  # type: ignore[operator]
    assert result.value["time_difference"] == f"{hours:+.1f}h"


@pytest.mark.parametrize(
    ("name", "args", "text"),
    [
        ("time__get_current_time", {"timezone": "Mars/Olympus_Mons"}, "Mars/Olympus_Mons"),
        (
            "time__convert_time",
            {"source_timezone": "Europe/Paris", "time": "25:99", "target_timezone": "Asia/Tokyo"},
            "Invalid time format",
        ),
        (
            "time__convert_time",
            {"source_timezone": "Nowhere/Land", "time": "10:00", "target_timezone": "Asia/Tokyo"},
            "Nowhere/Land",
        ),
    ],
    ids=["bad-timezone", "bad-time", "bad-source-timezone"],
)
async def test_bad_input_is_a_failure_not_an_exception(
    time_server: McpToolsets, kit: Toolkit, name: str, args: dict[str, Any], text: str
) -> None:
    result = await _one(kit, name, args)
    assert isinstance(result, Failure), result
    assert result.kind == "execution_error"  # what mcp-server-time answers: is_error
    assert text in result.reason

    # The session survives: the next call works, with no reconnection.
    ok = await _one(kit, "time__get_current_time", {"timezone": "Etc/UTC"})
    assert isinstance(ok, Ok), ok
    assert time_server.stats()["time"]["starts"] == 1


async def test_one_handshake_and_one_listing(time_server: McpToolsets, kit: Toolkit) -> None:
    for zone in ("Asia/Tokyo", "America/New_York", "Etc/UTC"):
        assert isinstance(await _one(kit, "time__get_current_time", {"timezone": zone}), Ok)
    stats = time_server.stats()["time"]
    assert stats["starts"] == 1
    assert stats["tools/list"] == 1
    assert stats.get("initialize", 0) + stats.get("server/discover", 0) <= 2
