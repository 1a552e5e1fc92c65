"""Shared helper of the MCP tests (tests/mcp/): start toolsets, always close them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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
