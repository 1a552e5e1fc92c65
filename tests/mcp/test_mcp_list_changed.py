"""A server's tool list changes at run time: `tools/list_changed` marks the
toolsets stale, the current toolkit stays as it was (a turn never sees its tools
change under it), and `refresh()` between turns lists the server again.

The test server's `grow(name)` registers a tool and reports the change: on
2026-07-28 sessions the SDK delivers it on the `subscriptions/listen` stream the
connection opens when the server advertises `tools.listChanged`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import http_test_server, started

from durable_tools.executor import Output
from durable_tools.mcp import McpServerConfig, McpToolsets
from durable_tools.results import Failure, Ok, ToolCall
from durable_tools.toolkit import Toolkit
from durable_tools.tools import Tool

SERVER = Path(__file__).with_name("mcp_test_server.py")
TOKEN_ENV = "DT_TEST_LIST_CHANGED_TOKEN"


@pytest.fixture
def http_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test server over streamable HTTP (the shared helper), with its token set."""
    monkeypatch.setenv(TOKEN_ENV, "tok-list-changed")
    with http_test_server(tmp_path / "http.jsonl", TOKEN_ENV) as url:
        yield url


@pytest.fixture(params=["stdio", "http"])
async def toolsets(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[McpToolsets]:
    if request.param == "stdio":
        config = McpServerConfig(
            name="notes",
            prefix="n",
            command=sys.executable,
            args=[str(SERVER), "stdio", "--log", str(tmp_path / "stdio.jsonl")],
            trust_annotations=True,
        )
    else:
        url: str = request.getfixturevalue("http_url")
        config = McpServerConfig(
            name="notes", prefix="n", url=url, token_env=TOKEN_ENV, trust_annotations=True
        )
    async with started(config) as toolsets:
        yield toolsets


async def _one(kit: Toolkit, name: str, args: dict[str, Any]) -> Ok | Failure:
    outputs: list[Ok | Failure] = []
    async with asyncio.timeout(30):
        async for event in kit.run([ToolCall(call_id="c1", name=name, arguments=json.dumps(args))]):
            assert isinstance(event, Output), event
            outputs.append(event.result)
    assert len(outputs) == 1
    return outputs[0]


async def _until_stale(toolsets: McpToolsets, seconds: float = 10) -> None:
    async with asyncio.timeout(seconds):
        while not toolsets.stale:
            await asyncio.sleep(0.02)


# The server is trusted here (its tools run without approval, so `grow` can be
# called directly); test_mcp_trust.py covers policy across a change.
async def test_list_changed_refreshes_between_turns(toolsets: McpToolsets) -> None:
    rebuilt: list[int] = []
    toolsets.on_change(lambda: rebuilt.append(toolsets.version))
    kit = toolsets.toolkit()
    names = [t.name for t in kit]
    version = toolsets.version
    assert "n__grow" in names and "n__sprout" not in names
    assert toolsets.stale is False
    assert await toolsets.refresh() is False  # nothing reported: nothing listed
    listed = toolsets.stats()["notes"]["tools/list"]

    result = await _one(kit, "n__grow", {"name": "sprout"})
    assert result == Ok(call_id="c1", tool="n__grow", value={"result": "added sprout"})

    await _until_stale(toolsets)
    # Within the turn nothing changes: the same snapshot, no listing yet.
    assert toolsets.toolkit() is kit
    assert [t.name for t in toolsets.toolkit()] == names
    assert toolsets.version == version
    assert toolsets.stats()["notes"]["tools/list"] == listed
    unknown = await _one(toolsets.toolkit(), "n__sprout", {})
    assert isinstance(unknown, Failure) and unknown.kind == "unknown_tool"

    # Between turns: one listing, a new snapshot with the new tool, prefixed.
    assert await toolsets.refresh() is True
    assert toolsets.stale is False
    assert toolsets.stats()["notes"]["tools/list"] == listed + 1
    assert toolsets.stats()["notes"]["starts"] == 1  # same session
    assert rebuilt == [version + 1]
    fresh = toolsets.toolkit()
    assert fresh is not kit
    assert [t.name for t in fresh] == [*names, "n__sprout"]
    assert [t.name for t in kit] == names  # the old snapshot is untouched
    sprout = fresh.get("n__sprout")
    assert isinstance(sprout, Tool)
    assert sprout.descriptor().description == "Added at run time by grow('sprout')."
    assert sprout.annotations.read_only is True and sprout.needs_approval is False
    assert await _one(fresh, "n__sprout", {}) == Ok(
        call_id="c1", tool="n__sprout", value={"result": "grown sprout"}
    )

    # A second change is reported too (the subscription outlives the first event).
    assert isinstance(await _one(fresh, "n__grow", {"name": "bud"}), Ok)
    await _until_stale(toolsets)
    assert await toolsets.refresh() is True
    assert [t.name for t in toolsets.toolkit()][-2:] == ["n__sprout", "n__bud"]
