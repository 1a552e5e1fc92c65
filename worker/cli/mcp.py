"""`durable-tools mcp login NAME`: OAuth for an MCP server, run where the worker runs.

```sh
durable-tools mcp login notes --mcp-config mcp.toml          # prints the URL to open
durable-tools mcp login notes --mcp-config mcp.toml --open   # and opens a browser
```

The tokens go to the server's token store (`[servers.NAME.oauth]`: the file
store under `token_dir` by default), which the worker reads: run it as the
worker's user, or with the worker's `DURABLE_TOOLS_MCP_TOKENS`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer
from rich.markup import escape

from durable_tools.errors import ConfigurationError
from durable_tools.worker.cli.serving import AppSpec, McpConfig
from durable_tools.worker.cli.shared import EXIT_BAD_INPUT, fail, out

__all__ = ["mcp_app"]

mcp_app = typer.Typer(
    name="mcp",
    help="MCP servers: log in to servers that require OAuth (docs/mcp.md).",
    no_args_is_help=True,
)


@mcp_app.command("login")
def login_command(
    name: Annotated[str, typer.Argument(help="The server's name in the configuration.")],
    app_spec: AppSpec = None,
    mcp_config: McpConfig = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Also open the URL in the default browser.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to wait for the browser's redirect (default: the server's "
            "oauth.login_timeout, 300).",
            min=1,
        ),
    ] = None,
) -> None:
    """Authorize the worker at an MCP server (OAuth authorization code, PKCE).

    Prints the URL to open, waits for the redirect to 127.0.0.1, and keeps
    the tokens in the server's token store. Exits 2 when the server is not
    configured for OAuth, 1 when the login is refused or times out.
    """
    from durable_tools.mcp.oauth_login import LoginFailed, login
    from durable_tools.worker.toolkits import load_served

    try:
        served = load_served(app_spec, [], mcp_config)
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    servers = {server.name: server for server in served.mcp_servers}
    config = servers.get(name)
    if config is None:
        known = ", ".join(sorted(servers)) or "none"
        fail(f"no MCP server named {name!r} (configured: {known})", EXIT_BAD_INPUT)
    if config.oauth is None:
        fail(f"MCP server {name!r} has no `oauth` in its configuration", EXIT_BAD_INPUT)

    def show(url: str) -> None:
        out.print(f"Open this URL to authorize durable-tools at {escape(name)}:", soft_wrap=True)
        print(url, flush=True)  # alone on its line, unwrapped: copyable
        out.print("Waiting for the redirect to 127.0.0.1 ...", soft_wrap=True)

    # The SDK logs the flow's errors with their tracebacks; this command says
    # what failed in one line instead (a worker's log keeps them).
    logging.getLogger("mcp").addHandler(logging.NullHandler())
    try:
        result = asyncio.run(
            login(config, show_url=show, open_browser=open_browser, timeout=timeout)
        )
    except LoginFailed as exc:
        fail(str(exc))
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    out.print(
        f"Logged in to {escape(name)} (issuer {escape(result.issuer)}); "
        f"it lists {result.tools} tool(s).",
        soft_wrap=True,
    )
