"""The session's streams, watched (transport end, requests by method); errors in one line."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, cast

import anyio
import mcp_types as types

__all__ = [
    "HTTP_STAND_INS",
    "CountingWrite",
    "WatchedRead",
    "describe_error",
    "http_status_text",
    "leaf_error",
]


def describe_error(exc: BaseException) -> str:
    """One line for an exception, unwrapping anyio's exception groups."""
    leaf = leaf_error(exc)  # nested exception groups: report the first leaf
    strerror: object = getattr(leaf, "strerror", None)
    if isinstance(strerror, str) and strerror:
        filename: object = getattr(leaf, "filename", None)
        return f"{strerror} {filename!r}" if filename else strerror
    name = type(leaf).__name__
    text = str(leaf).strip().splitlines()
    return f"{name}: {text[0]}" if text else name


HTTP_STAND_INS: Final = frozenset(
    {"Server returned an error response", "Not Found", "Session terminated"}
)
"""What the MCP SDK's streamable HTTP client says in place of an HTTP error status."""


def leaf_error(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (`exc` itself when it is none)."""
    leaf = exc
    for _ in range(100):
        inner: object = getattr(leaf, "exceptions", None)
        if not isinstance(inner, tuple) or not inner:
            break
        first: object = cast(tuple[object, ...], inner)[0]
        if not isinstance(first, BaseException):
            break
        leaf = first
    return leaf


def http_status_text(status: int, reason: str) -> str:
    """What an MCP server's HTTP error status says, e.g. `it answered HTTP 401 Unauthorized`.

    A 401 or 403 adds where the credentials come from (`token_env`, `headers`).
    """
    text = f"it answered HTTP {status} {reason}".rstrip()
    if status in (401, 403):
        text += " (check its token_env, token or headers)"
    return text


class WatchedRead:
    """A read stream that reports the end of the transport (server gone)."""

    def __init__(self, inner: Any, lost: asyncio.Event) -> None:
        self._inner = inner
        self._lost = lost

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._lost.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> WatchedRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class CountingWrite:
    """A write stream that counts the requests it sends, by method."""

    def __init__(self, inner: Any, on_request: Callable[[str], None]) -> None:
        self._inner = inner
        self._on_request = on_request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send(self, item: Any, /) -> None:
        message = getattr(item, "message", None)
        method = getattr(message, "method", None)
        if isinstance(message, types.JSONRPCRequest) and isinstance(method, str):
            self._on_request(method)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> CountingWrite:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
