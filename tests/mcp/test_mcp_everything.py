"""MCP servers as tools, without Temporal: `@modelcontextprotocol/server-everything`
(npm, installed by `make`) and the SDK test server of `mcp_test_server.py`.

* annotations of a trusted server (`trust_annotations=True`, the default of
  these helpers) become policy (approval, retries, at-most-once), and the
  configuration's overrides flip it, on untrusted servers too;
* descriptors keep the server's schemas exactly (draft-07 `$schema` included);
* progress notifications arrive as `Progress` events before the `Output`;
* structured content is the `Ok` value; server-side errors are Failures with
  the server's text; schema violations never reach the server;
* allow-lists, servers that do not start or never finish their handshake,
  and two servers whose prefixed names collide.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import started

from durable_tools.errors import ConfigurationError, DuplicateToolName
from durable_tools.executor import ApprovalRequested, Output, Progress, ToolEvent
from durable_tools.mcp import McpConnection, McpServerConfig, McpToolPolicy, McpToolsets
from durable_tools.mcp.toolset import needs_tasks
from durable_tools.results import Failure, Ok, ToolCall
from durable_tools.toolkit import Toolkit
from durable_tools.tools import Tool

REPO = Path(__file__).resolve().parents[2]
EVERYTHING = REPO / "node_modules" / ".bin" / "mcp-server-everything"
SERVER = Path(__file__).with_name("mcp_test_server.py")


def _everything(name: str = "every", **fields: Any) -> McpServerConfig:
    """server-everything; trusted unless `trust_annotations=False` is given."""
    if not EVERYTHING.exists():
        pytest.fail(
            f"{EVERYTHING} is missing: run `make install` and `npm ci` (or `make test`, which "
            "installs the npm MCP servers of package-lock.json) before running these tests"
        )
    fields.setdefault("trust_annotations", True)
    return McpServerConfig(name=name, command=str(EVERYTHING), args=["stdio"], **fields)


def _notes(log: Path, name: str = "notes", **fields: Any) -> McpServerConfig:
    """The SDK test server; trusted unless `trust_annotations=False` is given."""
    fields.setdefault("trust_annotations", True)
    return McpServerConfig(
        name=name, command=sys.executable, args=[str(SERVER), "stdio", "--log", str(log)], **fields
    )


def _calls(log: Path, tool: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [e for e in events if e["event"] == "call" and e["tool"] == tool]


async def _run(kit: Toolkit, *calls: tuple[str, dict[str, Any]]) -> list[ToolEvent]:
    requests = [
        ToolCall(call_id=f"c{i}", name=name, arguments=json.dumps(args))
        for i, (name, args) in enumerate(calls)
    ]
    events: list[ToolEvent] = []
    async with asyncio.timeout(30):
        async for event in kit.run(requests):
            events.append(event)
    return events


async def _one(kit: Toolkit, name: str, args: dict[str, Any]) -> Ok | Failure:
    events = await _run(kit, (name, args))
    outputs = [e for e in events if isinstance(e, Output)]
    assert len(outputs) == 1, events
    return outputs[0].result


def _closed(connection: McpConnection) -> bool:
    """No session is open (start() closed it; a stdio server's process is stopped)."""
    return connection._live is None  # pyright: ignore[reportPrivateUsage]


def _tool(kit: Toolkit, name: str) -> Tool:
    tool = kit.get(name)
    assert isinstance(tool, Tool)
    return tool


@pytest.fixture(scope="module")
def notes_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("notes") / "notes.jsonl"


@pytest.fixture(scope="module")
async def servers(notes_log: Path) -> AsyncIterator[McpToolsets]:
    """server-everything as `every`, the SDK test server as `notes` (started once)."""
    async with started(_everything(), _notes(notes_log)) as toolsets:
        yield toolsets


@pytest.fixture
def kit(servers: McpToolsets) -> Toolkit:
    return servers.toolkit()


# ------------------------------------------------------------------ policy


async def _offered_specs(servers: McpToolsets) -> dict[str, Any]:
    """The server's tools a client without Tasks support is offered (`needs_tasks` left out)."""
    listed = await servers.connections["every"].list_tools()
    return {s.name: s for s in listed if not needs_tasks(s)}


async def test_annotations_become_policy(servers: McpToolsets, kit: Toolkit) -> None:
    specs = await _offered_specs(servers)
    assert {f"every__{name}" for name in specs} == {
        t.name for t in kit if t.name.startswith("every__")
    }
    checked = {"read-only": 0, "writes": 0}
    for name, spec in specs.items():
        tool = _tool(kit, f"every__{name}")
        ann = spec.annotations
        assert ann is not None, name
        if ann.read_only_hint:
            # Read-only: no approval, retried with backoff.
            assert tool.needs_approval is False, name
            assert tool.at_most_once is False, name
            assert tool.retry.max_attempts > 1, name
            checked["read-only"] += 1
        elif not ann.idempotent_hint:
            # Neither read-only nor idempotent: at most once.
            assert tool.at_most_once is True, name
            assert tool.retry.max_attempts == 1, name
            assert tool.needs_approval is bool(ann.destructive_hint), name
            checked["writes"] += 1
        assert tool.descriptor().annotations.read_only is bool(ann.read_only_hint)
        assert tool.descriptor().annotations.idempotent is bool(ann.idempotent_hint)
    assert checked["read-only"] >= 5 and checked["writes"] >= 1, checked

    # The example the spec names: toggle-simulated-logging writes, not idempotent.
    toggle = _tool(kit, "every__toggle-simulated-logging")
    assert toggle.annotations.read_only is False
    assert toggle.annotations.idempotent is False
    assert toggle.annotations.destructive is False
    assert (toggle.needs_approval, toggle.at_most_once, toggle.retry.max_attempts) == (
        False,
        True,
        1,
    )
    # Not read-only but idempotent: retried, no approval.
    gzip = _tool(kit, "every__gzip-file-as-resource")
    assert (gzip.annotations.read_only, gzip.annotations.idempotent) == (False, True)
    assert (gzip.needs_approval, gzip.at_most_once) == (False, False)
    assert gzip.retry.max_attempts > 1


async def test_destructive_tools_need_approval(kit: Toolkit, notes_log: Path) -> None:
    # server-everything has no destructive tool; the SDK test server has one.
    delete = _tool(kit, "notes__delete_note")
    assert delete.annotations.destructive is True
    assert delete.needs_approval is True
    assert delete.at_most_once is True

    events = await _run(kit, ("notes__delete_note", {"note": "n1"}))
    assert [type(e) for e in events] == [ApprovalRequested]
    assert _calls(notes_log, "delete_note") == []  # not run without a decision


async def test_overrides_flip_the_policy(tmp_path: Path) -> None:
    # Untrusted servers: the overrides alone decide, and they win.
    every = _everything(
        trust_annotations=False,
        needs_approval=True,  # server-wide
        tool_policy={
            "echo": McpToolPolicy(needs_approval=False),
            "toggle-simulated-logging": McpToolPolicy(idempotent=True),
            "get-sum": McpToolPolicy(idempotent=False, call_timeout=3),
        },
    )
    notes = _notes(
        tmp_path / "notes.jsonl",
        trust_annotations=False,
        idempotent=True,  # server-wide
        tool_policy={"delete_note": McpToolPolicy(needs_approval=False, idempotent=False)},
    )
    toolsets = McpToolsets([every, notes])
    async with asyncio.timeout(30):
        await toolsets.start()
    try:
        kit = toolsets.toolkit()
        # Server-wide approval for a read-only tool; per-tool waiver wins.
        assert _tool(kit, "every__get-env").needs_approval is True
        assert _tool(kit, "every__echo").needs_approval is False
        # A non-idempotent tool declared idempotent is retried.
        toggle = _tool(kit, "every__toggle-simulated-logging")
        assert (toggle.at_most_once, toggle.retry.max_attempts > 1) == (False, True)
        # A read-only tool declared not idempotent runs at most once.
        get_sum = _tool(kit, "every__get-sum")
        assert (get_sum.at_most_once, get_sum.retry.max_attempts) == (True, 1)
        # Server-wide idempotent: the writing tools of `notes` are retried.
        record = _tool(kit, "notes__record")
        assert (record.at_most_once, record.retry.max_attempts > 1) == (False, True)
        # Destructive tool, approval waived and idempotency withdrawn per tool.
        delete = _tool(kit, "notes__delete_note")
        assert (delete.needs_approval, delete.at_most_once) == (False, True)
        result = await _one(kit, "notes__delete_note", {"note": "n2"})
        assert result == Ok(call_id="c0", tool="notes__delete_note", value={"result": "deleted n2"})
    finally:
        await toolsets.aclose()


# ------------------------------------------------------------------ schemas


async def test_descriptors_keep_the_servers_schemas(servers: McpToolsets, kit: Toolkit) -> None:
    specs = await _offered_specs(servers)
    for name, spec in specs.items():
        tool = _tool(kit, f"every__{name}")
        descriptor = tool.descriptor()
        assert descriptor.parameters == spec.input_schema, name  # exactly, untouched
        assert descriptor.description == spec.description, name
        if spec.output_schema is None:
            assert tool.output is None, name
        else:
            assert tool.output is not None, name
            assert tool.output.json_schema == spec.output_schema, name

    get_sum = _tool(kit, "every__get-sum").descriptor().parameters
    assert get_sum["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert get_sum["properties"]["a"]["type"] == "number"
    structured = _tool(kit, "every__get-structured-content")
    assert structured.output is not None
    assert structured.output.json_schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert structured.output.json_schema["required"] == ["temperature", "conditions", "humidity"]


# ------------------------------------------------------------------ results


async def test_progress_arrives_before_the_output(kit: Toolkit) -> None:
    events = await _run(
        kit, ("every__trigger-long-running-operation", {"duration": 0.3, "steps": 3})
    )
    progress = [e for e in events if isinstance(e, Progress)]
    assert [(p.event["progress"], p.event["total"]) for p in progress] == [(1, 3), (2, 3), (3, 3)]
    assert all(p.tool == "every__trigger-long-running-operation" for p in progress)
    assert isinstance(events[-1], Output)
    assert [type(e) for e in events].count(Output) == 1
    result = events[-1].result
    assert isinstance(result, Ok), result
    assert "Steps: 3" in result.value


async def test_structured_content_is_the_value(kit: Toolkit) -> None:
    result = await _one(kit, "every__get-structured-content", {"location": "Chicago"})
    assert isinstance(result, Ok), result
    assert set(result.value) == {"temperature", "conditions", "humidity"}
    assert isinstance(result.value["temperature"], int | float)
    assert isinstance(result.value["conditions"], str)


async def test_text_content_is_the_value(kit: Toolkit) -> None:
    assert await _one(kit, "every__get-sum", {"a": 2, "b": 3.5}) == Ok(
        call_id="c0", tool="every__get-sum", value="The sum of 2 and 3.5 is 5.5."
    )
    assert await _one(kit, "every__echo", {"message": "héllo"}) == Ok(
        call_id="c0", tool="every__echo", value="Echo: héllo"
    )


async def test_schema_violation_never_reaches_the_server(
    servers: McpToolsets, kit: Toolkit
) -> None:
    before = servers.stats()["every"]
    for args in ({"a": "two", "b": 3}, {"a": 1}, {"location": "Chicago"}):
        result = await _one(kit, "every__get-sum", args)
        assert isinstance(result, Failure), result
        assert result.kind == "input_validation_error", result
    bad_enum = await _one(kit, "every__get-structured-content", {"location": "Paris"})
    assert isinstance(bad_enum, Failure) and bad_enum.kind == "input_validation_error"
    assert "$.location" in bad_enum.reason
    after = servers.stats()["every"]
    assert after.get("tools/call", 0) == before.get("tools/call", 0)
    assert after == before  # no request of any kind, no reconnection


async def test_server_side_errors_are_execution_errors(
    servers: McpToolsets, kit: Toolkit, notes_log: Path
) -> None:
    # server-everything: the tool throws, the TypeScript SDK answers isError.
    result = await _one(kit, "every__get-resource-reference", {"resourceId": 1.5})
    assert isinstance(result, Failure), result
    assert result.kind == "execution_error"
    assert "Invalid resourceId: 1.5" in result.reason

    # The Python SDK: a `ToolError` is `is_error` with the tool's text.
    result = await _one(kit, "notes__refuse", {"message": "quota exceeded for team-7"})
    assert isinstance(result, Failure), result
    assert result.kind == "execution_error"
    assert "quota exceeded for team-7" in result.reason
    assert len(_calls(notes_log, "refuse")) == 1

    # The connection survives: the next call works on the same session.
    assert isinstance(await _one(kit, "every__echo", {"message": "still here"}), Ok)
    assert servers.stats()["every"]["starts"] == 1
    assert servers.stats()["notes"]["starts"] == 1


# ------------------------------------------------------------------ allow-lists


async def test_allow_list_limits_the_tools() -> None:
    toolsets = McpToolsets([_everything("ev", tools=["get-sum", "echo"], prefix="e")])
    async with asyncio.timeout(30):
        await toolsets.start()
    try:
        kit = toolsets.toolkit()
        assert [t.name for t in kit] == ["e__get-sum", "e__echo"]  # in allow-list order
        assert await _one(kit, "e__echo", {"message": "x"}) == Ok(
            call_id="c0", tool="e__echo", value="Echo: x"
        )
        result = await _one(kit, "e__get-env", {})
        assert isinstance(result, Failure) and result.kind == "unknown_tool"
    finally:
        await toolsets.aclose()


async def test_allow_listed_tool_the_server_lacks_is_a_configuration_error() -> None:
    toolsets = McpToolsets([_everything("ev", tools=["echo", "launch-rockets"])])
    with pytest.raises(ConfigurationError) as info:
        async with asyncio.timeout(30):
            await toolsets.start()
    message = str(info.value)
    assert "MCP server 'ev'" in message
    assert "'launch-rockets'" in message
    assert "echo" in message  # what it offers
    assert _closed(toolsets.connections["ev"])  # closed by start()


# ------------------------------------------------------------------ start failures


async def test_server_that_does_not_start_is_skipped(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-mcp-server")
    toolsets = McpToolsets(
        [McpServerConfig(name="ghost", command=missing), _notes(tmp_path / "n.jsonl")]
    )
    async with asyncio.timeout(30):
        await toolsets.start()
    try:
        assert set(toolsets.skipped) == {"ghost"}
        assert "No such file or directory" in toolsets.skipped["ghost"]
        kit = toolsets.toolkit()
        assert kit.tools and all(t.name.startswith("notes__") for t in kit)
        assert await _one(kit, "notes__add", {"a": 1, "b": 2}) == Ok(
            call_id="c0", tool="notes__add", value={"result": 3}
        )
    finally:
        await toolsets.aclose()


async def test_allow_listed_server_that_does_not_start_stops_the_worker(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-mcp-server")
    toolsets = McpToolsets(
        [McpServerConfig(name="ghost", command=missing, tools=["x"]), _notes(tmp_path / "n.jsonl")]
    )
    with pytest.raises(ConfigurationError) as info:
        async with asyncio.timeout(30):
            await toolsets.start()
    message = str(info.value)
    assert "MCP server 'ghost' did not start" in message
    assert "allow-list" in message
    assert "\n" not in message
    assert _closed(toolsets.connections["notes"])  # the healthy one was closed too


async def test_server_that_never_finishes_its_handshake_is_skipped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    sleeper = McpServerConfig(
        name="sleepy",
        command=sys.executable,
        args=[
            "-c",
            "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)",
            str(pid_file),
        ],
        handshake_timeout=1,
    )
    toolsets = McpToolsets([sleeper])
    started = time.monotonic()
    async with asyncio.timeout(15):
        await toolsets.start()
    elapsed = time.monotonic() - started
    try:
        assert set(toolsets.skipped) == {"sleepy"}
        assert "handshake" in toolsets.skipped["sleepy"]
        assert "1 s" in toolsets.skipped["sleepy"]
        assert len(toolsets.toolkit()) == 0
        # 1 s of handshake plus the SDK's 2 s for a process that ignores EOF.
        assert elapsed < 5, elapsed
        pid = int(pid_file.read_text())
        with pytest.raises(ProcessLookupError):  # the process is gone, not left to sleep
            os.kill(pid, 0)
    finally:
        await toolsets.aclose()


# ------------------------------------------------------------------ collisions


async def test_colliding_prefixed_names_name_both_servers(tmp_path: Path) -> None:
    def twin(name: str) -> McpServerConfig:
        return _notes(tmp_path / f"{name}.jsonl", name=name, prefix="notes", tools=["add"])

    toolsets = McpToolsets([twin("a"), twin("b")])
    with pytest.raises(DuplicateToolName) as info:
        async with asyncio.timeout(30):
            await toolsets.start()
    assert info.value.name == "notes__add"
    assert info.value.sources == ("MCP server 'a'", "MCP server 'b'")
    assert "MCP server 'a'" in str(info.value) and "MCP server 'b'" in str(info.value)
    assert all(_closed(c) for c in toolsets.connections.values())  # both closed


def test_everything_is_installed() -> None:
    """Fails (never skips) when `make install`/`npm ci` has not been run."""
    _everything()
    assert os.access(EVERYTHING, os.X_OK)


# ------------------------------------------------------ client capabilities


async def test_every_tool_offered_works_or_fails_clearly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client declares elicitation, sampling and roots: server-everything 2026.8.31
    offers its conditional tools. Its task-only tool is left out with a log line; its
    mid-call sampling and elicitation (a 2025-11-25 server) fail with the reason;
    roots come from the configuration; its log messages reach the worker log."""
    import logging

    caplog.set_level(logging.INFO)
    config = _everything(roots=["/tmp"], needs_approval=False)
    async with started(config) as toolsets:
        offered = {name.removeprefix("every__") for name in toolsets.toolkit().tools}
        assert {
            "get-roots-list",
            "trigger-elicitation-request",
            "trigger-url-elicitation",
            "trigger-sampling-request",
        } <= offered
        assert "simulate-research-query" not in offered

        async def call(tool: str, args: dict[str, Any]) -> Ok | Failure:
            return await _one(toolsets.toolkit(), f"every__{tool}", args)

        roots = await call("get-roots-list", {})
        assert isinstance(roots, Ok) and "file:///tmp" in json.dumps(roots.value)
        for tool, args in (
            ("trigger-sampling-request", {"prompt": "hi", "maxTokens": 20}),
            ("trigger-elicitation-request", {}),
            ("trigger-url-elicitation", {"url": "https://example.com/sign-in"}),
        ):
            result = await call(tool, args)
            assert isinstance(result, Failure), tool
            assert result.kind == "execution_error", (tool, result)
            assert "only in input-required results" in result.reason, (tool, result)
    logged = [r.getMessage() for r in caplog.records]
    assert any("'simulate-research-query' left out" in m and "task" in m for m in logged)
