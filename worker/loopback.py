"""Servers meant for this machine answer only loopback `Host` names (DNS rebinding).

Binding 127.0.0.1 keeps other machines out, not other web pages: a page on
`evil.example` whose DNS name is made to resolve to 127.0.0.1 after it loads
(DNS rebinding) is same-origin with whatever listens there, and its script
can read the answers and post forms. The browser still sends the page's own
name in `Host`, so a server for this machine refuses any `Host` but
`127.0.0.1`, `localhost` and `[::1]` (with any port): `LoopbackHostOnly`
answers 400 before the application sees the request. The dev-mode inbox
and the codec server on a loopback address use it.
"""

from __future__ import annotations

import ipaddress
import re

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LOOPBACK_HOST_NAMES", "LoopbackHostOnly", "is_loopback_address", "is_loopback_host"]

LOOPBACK_HOST_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""The `Host` names (before an optional `:PORT`) a loopback server answers."""

_HOST = re.compile(r"(127\.0\.0\.1|localhost|\[::1\])(?::[0-9]{1,5})?")


def is_loopback_host(value: str) -> bool:
    """Whether a `Host` header names this machine's loopback.

    The names are `127.0.0.1`, `localhost` and `[::1]`, each with an optional
    `:PORT`, in any case.

    Args:
        value: The header's value as sent (`""` when missing).

    Returns:
        True for those names only; anything else (another name, a trailing dot,
        user info, spaces, a port that is not 1 to 5 digits) is False.
    """
    return _HOST.fullmatch(value.lower()) is not None


def is_loopback_address(host: str) -> bool:
    """Whether a bind address is reachable only from this machine.

    Args:
        host: The address a server binds (`127.0.0.1`, `::1`, `localhost`, `0.0.0.0`...).

    Returns:
        True for `localhost` and any address in 127.0.0.0/8 or `::1`.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class LoopbackHostOnly:
    """ASGI middleware: 400 for any HTTP request whose `Host` is not a loopback name.

    A request with no `Host`, or more than one, is refused too. WebSocket
    connections are closed (403) under the same rule; other scopes pass.

    Args:
        app: The application behind it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse the request, or hand it on unchanged."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = [v for k, v in scope.get("headers", ()) if k.lower() == b"host"]
        if len(hosts) == 1 and is_loopback_host(hosts[0].decode("latin-1")):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = (
            b"Bad Host header: this server answers only 127.0.0.1, localhost and [::1] "
            b"(a defence against DNS rebinding).\n"
        )
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
