"""Shared helpers of the MCP tests (tests/mcp/): start toolsets, run the test server."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from durable_tools.mcp import McpServerConfig, McpToolsets


@asynccontextmanager
async def started(*servers: McpServerConfig, timeout: float = 30) -> AsyncIterator[McpToolsets]:
    """`McpToolsets` of `servers`, started (every server up, none skipped), closed on exit."""
    toolsets = McpToolsets(list(servers))
    async with asyncio.timeout(timeout):
        await toolsets.start()
    try:
        assert toolsets.skipped == {}
        yield toolsets
    finally:
        await toolsets.aclose()


TEST_SERVER = Path(__file__).resolve().parent / "mcp" / "mcp_test_server.py"
"""The project's MCP test server (`tests/mcp/mcp_test_server.py`)."""


def stdio_test_server(log: Path, name: str = "notes", **fields: Any) -> McpServerConfig:
    """The test server as a stdio server, logging to `log` (JSON lines)."""
    return McpServerConfig(
        name=name,
        command=sys.executable,
        args=[str(TEST_SERVER), "stdio", "--log", str(log)],
        **fields,
    )


@contextmanager
def http_test_server(log: Path, token_env: str) -> Iterator[str]:
    """The test server over streamable HTTP on 127.0.0.1 (token from `token_env`); its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    process = subprocess.Popen(
        [sys.executable, str(TEST_SERVER), "http", "--port", str(port)]
        + ["--token-env", token_env, "--log", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError("the HTTP test server exited") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("the HTTP test server did not listen within 20 s") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)
