"""MCP servers as durable tools (worker side).

Configure servers (`McpServerConfig`, or a TOML file read by
`load_mcp_config`), hand them to the worker (`run_worker(mcp_servers=...)`,
`DurableToolsPlugin(mcp_servers=...)`, or `durable-tools worker --mcp-config
FILE`), and their tools join every toolkit the worker serves as
`prefix__tool`. See `durable_tools.mcp.toolset` for discovery, validation and
policy, and `durable_tools.mcp.connection` for the connection pool.

This package imports the `mcp` SDK; the workflow never imports it.
"""

from durable_tools.mcp.config import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_HANDSHAKE_TIMEOUT,
    McpServerConfig,
    McpToolPolicy,
    load_mcp_config,
    parse_mcp_config,
)
from durable_tools.mcp.connection import CallTimedOut, ConnectionLost, McpConnection, McpStartError
from durable_tools.mcp.toolset import IDEMPOTENCY_KEY_META, McpToolsets, mcp_tool

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "IDEMPOTENCY_KEY_META",
    "CallTimedOut",
    "ConnectionLost",
    "McpConnection",
    "McpServerConfig",
    "McpStartError",
    "McpToolPolicy",
    "McpToolsets",
    "load_mcp_config",
    "mcp_tool",
    "parse_mcp_config",
]
