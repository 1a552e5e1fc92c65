"""A call that times out or is cancelled ends only its own request.

Against the project's test server (`mcp_test_server.py`), over stdio and over
streamable HTTP: two calls in flight on one pooled session, one times out (or
its caller is cancelled, as a cancelled tool activity is); the server gets
the cancellation of that request id (its handler is interrupted and logs
it), the other call completes with its result, and the session, and for
stdio the server process, stay the same.

Over stdio the client sends `notifications/cancelled` (the server logs it);
over streamable HTTP at protocol 2026-07-28 a client cancels by closing that
request's response stream, and the server drops a posted notification, so
there the interrupted handler is the evidence.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_support import http_test_server, stdio_test_server

from durable_tools.mcp import McpServerConfig
from durable_tools.mcp.connection import CallTimedOut, McpConnection

TOKEN_ENV = "DT_TEST_CANCEL_TOKEN"


def _events(log: Path, event: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [e for e in lines if e["event"] == event]


async def _until(
    log: Path, event: str, count: int = 1, timeout: float = 20
) -> list[dict[str, Any]]:
    async with asyncio.timeout(timeout):
        while len(found := _events(log, event)) < count:
            await asyncio.sleep(0.05)
    return found


async def _notified(log: Path, config: McpServerConfig) -> list[str] | None:
    """Request ids of the `notifications/cancelled` the server got (stdio), or None (HTTP)."""
    if config.command is None:
        return None
    return [n["request_id"] for n in await _until(log, "notification")]


@pytest.fixture(params=["stdio", "http"])
def server(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[McpServerConfig, Path]]:
    log = tmp_path / "server.jsonl"
    if request.param == "stdio":
        yield stdio_test_server(log), log
        return
    monkeypatch.setenv(TOKEN_ENV, "tok-cancel")
    with http_test_server(log, TOKEN_ENV) as url:
        yield McpServerConfig(name="notes", url=url, token_env=TOKEN_ENV), log


@asynccontextmanager
async def _connected(config: McpServerConfig) -> AsyncIterator[McpConnection]:
    connection = McpConnection(config)
    try:
        async with asyncio.timeout(30):
            await connection.open()
        yield connection
    finally:
        await connection.close()


def _slow(note: str, seconds: float) -> dict[str, Any]:
    return {"note": note, "seconds": seconds}


async def test_a_timeout_cancels_only_its_own_request(
    server: tuple[McpServerConfig, Path],
) -> None:
    config, log = server
    async with _connected(config) as connection:
        other = asyncio.create_task(
            connection.call_tool("slow_record", _slow("other", 3.0), timeout=30)
        )
        await _until(log, "call")  # the other call is in flight first
        with pytest.raises(CallTimedOut):
            await connection.call_tool("slow_record", _slow("stuck", 600), timeout=1.0)
        result = await asyncio.wait_for(other, 20)
        assert result.structured_content == {"result": "recorded other slowly"}
        # The same session answers the next call.
        after = await connection.call_tool("add", {"a": 2, "b": 3}, timeout=10)
        assert after.structured_content == {"result": 5}
        (cancelled,) = await _until(log, "cancelled")
        notified = await _notified(log, config)
        starts, handshakes = connection.starts, connection.handshakes
    calls = {c["args"]["note"]: c for c in _events(log, "call") if c["tool"] == "slow_record"}
    stuck = calls["stuck"]["request_id"]
    assert stuck != calls["other"]["request_id"]
    assert cancelled["args"]["note"] == "stuck" and cancelled["request_id"] == stuck
    assert notified in ([stuck], None)  # (closing the session later cancels its `listen` stream)
    assert starts == 1 and handshakes == 1
    if config.command is not None:  # the stdio process was not restarted
        assert len(_events(log, "start")) == 1
        assert {c["pid"] for c in _events(log, "call")} == {calls["stuck"]["pid"]}


async def test_a_cancelled_caller_cancels_only_its_own_request(
    server: tuple[McpServerConfig, Path],
) -> None:
    config, log = server
    async with _connected(config) as connection:
        other = asyncio.create_task(
            connection.call_tool("slow_record", _slow("other", 2.0), timeout=30)
        )
        doomed = asyncio.create_task(
            connection.call_tool("slow_record", _slow("doomed", 600), timeout=600)
        )
        await _until(log, "call", count=2)
        doomed.cancel()  # as Temporal cancels a tool activity
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(doomed, 10)
        (cancelled,) = await _until(log, "cancelled")
        notified = await _notified(log, config)
        result = await asyncio.wait_for(other, 20)
        starts = connection.starts
    assert result.structured_content == {"result": "recorded other slowly"}
    assert cancelled["args"]["note"] == "doomed"
    assert notified in ([cancelled["request_id"]], None)
    assert starts == 1
    if config.command is not None:
        assert len(_events(log, "start")) == 1
