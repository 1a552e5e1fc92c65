"""durable-tools as the client of the MCP conformance suite's client scenarios.

    conformance client --command "python tests/mcp/conformance_client.py" --suite auth
    conformance client --command "python tests/mcp/conformance_client.py" --scenario tools_call

The suite starts an authorization server and an MCP server per scenario and
runs this command with the server's URL (and `MCP_CONFORMANCE_SCENARIO`,
`MCP_CONFORMANCE_CONTEXT` in the environment). For an `auth/` scenario it
does what an operator does: `durable-tools mcp login` (the browser is an
httpx client that follows the suite's authorization page, which approves at
once). Then what a worker does: connect (with the stored token), list the
tools and call each one, its required arguments filled by type. The suite's
servers speak 2025-11-25 and elicit mid-call, so the server is configured
with `mid_call_elicitation = "defaults"`. Tokens go to a temporary directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

import httpx

from durable_tools.mcp import McpOAuth, McpServerConfig, McpToolsets
from durable_tools.mcp.oauth_login import login
from durable_tools.results import ToolCall

CIMD = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document URL the suite's CIMD scenario expects."""


def _follow(url: str) -> None:
    """The person's browser: open the page and follow its redirects back to the listener."""

    def browse() -> None:
        with httpx.Client(follow_redirects=True, timeout=20) as browser:
            browser.get(url)

    threading.Thread(target=browse, daemon=True).start()


def _oauth(tokens: str) -> McpOAuth:
    """The OAuth settings: a pre-registered client when the scenario gives one."""
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    client_id = context.get("client_id") if isinstance(context, dict) else None
    if not isinstance(client_id, str):
        return McpOAuth(token_dir=tokens, login_timeout=20, client_metadata_url=CIMD)
    secret = context.get("client_secret")
    if isinstance(secret, str):
        os.environ["DT_CONFORMANCE_CLIENT_SECRET"] = secret
    return McpOAuth(
        token_dir=tokens,
        login_timeout=20,
        client_id=client_id,
        client_secret_env="DT_CONFORMANCE_CLIENT_SECRET" if isinstance(secret, str) else None,
    )


def _arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for a tool the suite offers: each required property, 1 or "x" by its type."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required: list[str] = schema.get("required") or []
    values: dict[str, Any] = {}
    for name in required:
        field: Mapping[str, Any] = properties.get(name) or {}
        kind = field.get("type")
        values[name] = 1 if kind in ("number", "integer") else True if kind == "boolean" else "x"
    return values


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    with tempfile.TemporaryDirectory() as tokens:
        authorizing = scenario.startswith("auth/")
        config = McpServerConfig(
            name="conformance",
            url=url,
            oauth=_oauth(tokens) if authorizing else None,
            needs_approval=False,
            # The suite's servers speak 2025-11-25 and ask mid-call; a
            # confirmation of defaults needs no one (SEP-1034).
            mid_call_elicitation="defaults",
        )
        if authorizing:
            result = await login(config, show_url=_follow)
            print(f"logged in: issuer {result.issuer}, {result.tools} tool(s)", flush=True)
        toolsets = McpToolsets([config])
        await toolsets.start()
        try:
            if toolsets.skipped:
                print(f"skipped: {toolsets.skipped}", file=sys.stderr)
                return 1
            kit = toolsets.toolkit()
            for tool in kit:
                arguments = json.dumps(_arguments(tool.descriptor().parameters))
                call = ToolCall(call_id=tool.name, name=tool.name, arguments=arguments)
                async for event in kit.run([call]):
                    print(f"{tool.name}: {json.dumps(str(event))[:200]}", flush=True)
        finally:
            await toolsets.aclose()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1])))
