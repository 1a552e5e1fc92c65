"""`durable-tools mcp login NAME`: the authorization-code flow on a loopback redirect.

The person runs it on (or for) the worker, once per server and issuer:

1. A listener opens on `127.0.0.1` at an ephemeral port (RFC 8252 §7.3,
   loopback redirect for native apps); its `http://127.0.0.1:PORT/callback` is
   the redirect URI.
2. The `mcp` SDK's OAuth client connects to the server, is answered 401,
   discovers the authorization server, registers a client where the server
   offers dynamic registration, and builds the authorization URL (PKCE,
   `resource`, `state`). The URL is printed (and opened in a browser only when
   asked); it must be `https` or loopback (`check_oauth_url`).
3. The listener waits, bounded, for the redirect. Only one carrying the
   flow's own `state` counts: any other request is answered 400 and ignored.
   An `error` redirect ends the login with `LoginFailed`.
4. The SDK exchanges the code (with its PKCE verifier) for tokens, which the
   token store keeps; the server's tools are listed to show the login works.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast
from urllib.parse import parse_qs, urlsplit

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult

from durable_tools.errors import ConfigurationError
from durable_tools.mcp.config import McpServerConfig
from durable_tools.mcp.oauth import McpOAuthProvider, check_oauth_url, token_store_for
from durable_tools.mcp.token_store import TokenStore

__all__ = ["LoginFailed", "LoginResult", "login"]

_CALLBACK_PATH: Final = "/callback"
_MAX_REQUEST: Final = 16 * 1024
_PAGE: Final = (
    "<!doctype html><meta charset=utf-8><title>durable-tools</title>"
    "<p>{text}</p><p>You can close this tab.</p>"
)


class LoginFailed(Exception):
    """The login did not end with tokens (refused, timed out, or the flow failed)."""


@dataclass(frozen=True, kw_only=True)
class LoginResult:
    """What a login obtained.

    Attributes:
        server: The server's configured name.
        issuer: The authorization server the tokens are from.
        tools: How many tools the server listed with the new token.
    """

    server: str
    issuer: str
    tools: int


def _clean(text: str, limit: int = 200) -> str:
    """A server's text, printable and bounded, for a message."""
    kept = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return kept + ("…" if len(text) > limit else "")


class _Redirect:
    """The loopback listener that waits for the authorization server's redirect."""

    def __init__(self) -> None:
        self.expected_state: str | None = None
        self.result: asyncio.Future[AuthorizationCodeResult] = (
            asyncio.get_running_loop().create_future()
        )
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> _Redirect:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        if not self.result.done():
            self.result.cancel()

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{_CALLBACK_PATH}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
            status, text = self._handle(head[:_MAX_REQUEST])
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, text = 400, "Bad request."
        except Exception:
            status, text = 400, "Bad request."
        body = _PAGE.format(text=text).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
        with contextlib.suppress(Exception):
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/html; charset=utf-8\r\n"
                f"content-length: {len(body)}\r\ncache-control: no-store\r\n"
                "connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    def _handle(self, head: bytes) -> tuple[int, str]:
        line = head.split(b"\r\n", 1)[0].decode("ascii", "replace")
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "GET":
            return 400, "Bad request."
        target = urlsplit(parts[1])
        if target.path != _CALLBACK_PATH:
            return 404, "Not found."
        query = parse_qs(target.query, keep_blank_values=True)

        def one(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values and len(values) == 1 else None

        state, expected = one("state"), self.expected_state
        if (
            state is None
            or expected is None
            or not hmac.compare_digest(state.encode(), expected.encode())
        ):
            return 400, "This is not the redirect of the login in progress (state differs)."
        if self.result.done():
            return 400, "The login has already been answered."
        error = one("error")
        if error is not None:
            described = one("error_description")
            detail = f"{_clean(error, 80)}" + (f": {_clean(described)}" if described else "")
            self.result.set_exception(
                LoginFailed(f"the authorization server refused the login ({detail})")
            )
            return 200, "The login was refused."
        code = one("code")
        if not code:
            return 400, "The redirect carries no authorization code."
        self.result.set_result(AuthorizationCodeResult(code=code, state=state, iss=one("iss")))
        return 200, "Logged in: durable-tools has the authorization code."


async def login(
    config: McpServerConfig,
    *,
    store: TokenStore | None = None,
    show_url: Callable[[str], Any] = print,
    open_browser: bool = False,
    timeout: float | None = None,
) -> LoginResult:
    """Run the authorization-code flow for one server and store its tokens.

    Args:
        config: A streamable-HTTP server with `oauth` set.
        store: Where to keep the tokens (default: the server's `McpOAuth`
            store, as the worker reads it).
        show_url: Called with the authorization URL (default: `print`).
        open_browser: Also open the URL in the default browser.
        timeout: Seconds to wait for the redirect (default the server's
            `oauth.login_timeout`, 300).

    Returns:
        The issuer the tokens are from and the number of tools listed with them.

    Raises:
        ConfigurationError: The server is not an OAuth server.
        LoginFailed: Refused, timed out, or the flow failed (the message says
            why; it quotes no token, code or verifier).
    """
    if config.oauth is None or config.url is None:
        raise ConfigurationError(
            f"MCP server {config.name!r} has no `oauth` in its configuration: nothing to log in to"
        )
    wait = config.oauth.login_timeout if timeout is None else timeout
    store = store or token_store_for(config.oauth)
    async with _Redirect() as redirect:

        async def on_authorize(url: str) -> None:
            check_oauth_url(url, "authorization page")
            states = parse_qs(urlsplit(url).query).get("state") or [None]
            redirect.expected_state = states[0]
            show_url(url)
            if open_browser:
                await anyio.to_thread.run_sync(webbrowser.open, url)

        async def on_callback() -> AuthorizationCodeResult:
            try:
                return await asyncio.wait_for(asyncio.shield(redirect.result), wait)
            except TimeoutError:
                raise LoginFailed(
                    f"no redirect from the authorization server within {wait:g} s"
                ) from None

        provider = McpOAuthProvider(
            config,
            store,
            redirect_handler=on_authorize,
            callback_handler=on_callback,
            redirect_uri=redirect.uri,
        )
        try:
            with anyio.fail_after(wait + 120):  # the redirect, plus the requests around it
                async with (
                    create_mcp_http_client(auth=provider) as http,
                    Client(
                        cast(Any, streamable_http_client(config.url, http_client=http)),
                        client_info=types.Implementation(name="durable-tools", version="0"),
                    ) as client,
                ):
                    listed = await client.session.list_tools()
        except LoginFailed:
            raise
        except Exception as exc:
            failure = provider.failure or exc
            if isinstance(failure, LoginFailed):
                raise failure from None
            raise LoginFailed(
                f"the login to {config.name!r} failed: {_describe(failure)}"
            ) from None
    if provider.context.current_tokens is None:
        raise LoginFailed(f"the server {config.name!r} did not ask for authorization")
    return LoginResult(server=config.name, issuer=provider.issuer, tools=len(listed.tools))


def _leaves(exc: BaseException) -> list[BaseException]:
    inner: object = getattr(exc, "exceptions", None)
    if isinstance(inner, tuple):
        found: list[BaseException] = []
        for item in cast(tuple[BaseException, ...], inner):
            found.extend(_leaves(item))
        return found
    return [exc]


def _describe(exc: BaseException) -> str:
    leaf = _leaves(exc)[0]
    text = str(leaf).strip().splitlines()
    name = type(leaf).__name__
    return _clean(f"{name}: {text[0]}" if text else name, 300)
