"""MCP servers as durable tools (worker side).

Configure servers (`McpServerConfig`, or a TOML file read by
`load_mcp_config`), hand them to the worker (`run_worker(mcp_servers=...)`,
`DurableToolsPlugin(mcp_servers=...)`, or `durable-tools worker --mcp-config
FILE`), and their tools join every toolkit the worker serves as
`prefix__tool`. See `durable_tools.mcp.toolset` for discovery, validation and
policy, `durable_tools.mcp.connection` for the connection pool, and
`durable_tools.mcp.oauth` for servers that require OAuth (`McpOAuth`,
`TokenStore`, `durable-tools mcp login NAME`).

This package imports the `mcp` SDK; the workflow never imports it.
"""

import importlib
from typing import TYPE_CHECKING, Any

from durable_tools.mcp.config import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_HANDSHAKE_TIMEOUT,
    McpOAuth,
    McpServerConfig,
    McpToolPolicy,
    load_mcp_config,
    parse_mcp_config,
)

if TYPE_CHECKING:
    from durable_tools.mcp.connection import (
        CallTimedOut,
        ConnectionLost,
        McpConnection,
        McpStartError,
    )
    from durable_tools.mcp.token_store import FileTokenStore, IssuedTokens, TokenStore
    from durable_tools.mcp.toolset import (
        IDEMPOTENCY_KEY_META,
        McpPolicy,
        McpToolsets,
        mcp_policy,
        mcp_tool,
    )

# The connection and toolset modules import the `mcp` SDK (~1 s): load them on
# first use, so configuration and the CLI stay fast.
_LAZY = {
    "CallTimedOut": "connection",
    "ConnectionLost": "connection",
    "McpConnection": "connection",
    "McpStartError": "connection",
    "FileTokenStore": "token_store",
    "IssuedTokens": "token_store",
    "TokenStore": "token_store",
    "IDEMPOTENCY_KEY_META": "toolset",
    "McpPolicy": "toolset",
    "McpToolsets": "toolset",
    "mcp_policy": "toolset",
    "mcp_tool": "toolset",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"durable_tools.mcp.{module}"), name)


__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "IDEMPOTENCY_KEY_META",
    "CallTimedOut",
    "ConnectionLost",
    "FileTokenStore",
    "IssuedTokens",
    "McpConnection",
    "McpOAuth",
    "McpPolicy",
    "McpServerConfig",
    "McpStartError",
    "McpToolPolicy",
    "McpToolsets",
    "TokenStore",
    "load_mcp_config",
    "mcp_policy",
    "mcp_tool",
    "parse_mcp_config",
]
