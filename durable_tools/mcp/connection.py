"""One pooled connection to one MCP server, per worker process.

`McpConnection` keeps a single MCP client session open for every call the
worker makes to the server, so N calls cost one handshake (`initialize`, or
`server/discover` on 2026-07-28 servers) and one `tools/list`. Peers that open
a session per turn or per call pay that handshake every time.

* A server that dies (its transport ends) is restarted by the next call, after
  a backoff that doubles with each consecutive failure (0.5 s up to 10 s).
* A call that outlives its timeout ends with `CallTimedOut`; a call whose
  caller is cancelled (the tool activity is cancelled) re-raises the
  cancellation. Either way only that request ends: the MCP SDK, when the task
  awaiting the request is cancelled, cancels it at the server (it sends
  `notifications/cancelled` with the request id; over streamable HTTP at
  protocol 2026-07-28 it closes that request's response stream) and drops
  it, so a late answer is discarded. The session, and every other call in
  flight on it, go on; a session is replaced only when its transport ends.
* A call whose connection is lost raises `ConnectionLost`, with `sent=True`
  when the request may have reached the server (the caller decides whether
  retrying is safe: only for idempotent tools).

Everything runs on the worker's event loop; the session's context managers
live in one owner task per connection, as anyio requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, cast

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from durable_tools.mcp._streams import (
    HTTP_STAND_INS,
    CountingWrite,
    WatchedRead,
    describe_error,
    http_status_text,
    leaf_error,
)
from durable_tools.mcp.client_side import (
    log_server_message,
    mid_call_elicitation,
    no_mid_call_sampling,
    roots_of,
)
from durable_tools.mcp.config import McpServerConfig
from durable_tools.mcp.oauth import OAUTH_REQUEST, oauth_auth, oauth_status_text
from durable_tools.mcp.tasks import (
    CancelTaskRequest,
    CreateTaskResult,
    GetTaskRequest,
    RawResult,
    TasksExtension,
    UpdateTaskRequest,
)
from durable_tools.tool_tasks import TASKS_EXTENSION

__all__ = ["CallTimedOut", "ConnectionLost", "McpConnection", "McpStartError"]

_log = logging.getLogger("durable_tools.mcp")

_HANDSHAKE_METHODS: Final[frozenset[str]] = frozenset({"initialize", "server/discover"})
_BACKOFF_FIRST: Final[float] = 0.5
_BACKOFF_MAX: Final[float] = 10.0
_CLOSE_GRACE: Final[float] = 5.0
# Bound on ending one abandoned request: the SDK writes `notifications/cancelled`
# within its own 2 s bound; past this the request task is left to finish alone.
_ABANDON_GRACE: Final[float] = 5.0


class McpStartError(Exception):
    """The server did not start or did not finish its handshake (nothing was sent)."""


class ConnectionLost(Exception):
    """The connection ended during a call.

    Attributes:
        sent: True when the request may have reached the server.
    """

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class CallTimedOut(Exception):
    """A call outlived its timeout; its request was cancelled (the session goes on)."""


@dataclass(eq=False)
class _Live:
    """One open session and the task that owns its context managers."""

    lost: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    task: asyncio.Task[None] | None = None

    async def close(self) -> None:
        self.closing.set()
        task = self.task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), _CLOSE_GRACE)
        except (TimeoutError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def abort(self) -> None:
        """Stop a session that never finished its handshake: no grace period.

        The owner task is still inside the handshake, where it does not watch
        `closing`; waiting for it would add `_CLOSE_GRACE` to every timeout.
        """
        self.closing.set()
        task = self.task
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


class McpConnection:
    """The worker's one connection to one MCP server.

    Args:
        config: The server's configuration (secrets are resolved here, on the worker).
        on_tools_changed: Called with the server name when the server reports
            that its tool list changed (`notifications/tools/list_changed`).

    Attributes:
        requests: Requests sent to the server, by JSON-RPC method
            (`initialize`, `server/discover`, `tools/list`, `tools/call`, ...).
        starts: Connections opened, including restarts.
    """

    def __init__(
        self,
        config: McpServerConfig,
        *,
        on_tools_changed: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.requests: Counter[str] = Counter()
        self.starts = 0
        self._on_tools_changed = on_tools_changed
        self._live: _Live | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        # The latest HTTP error status a request of this connection got
        # (streamable HTTP): the SDK reports it as a generic JSON-RPC error.
        self._http_status: tuple[int, str] | None = None

    # ----------------------------------------------------------- lifecycle

    async def open(self) -> Client:
        """Connect now (or return the live session).

        Returns:
            The connected `mcp.Client`.

        Raises:
            McpStartError: The server did not start or finish its handshake
                within `handshake_timeout` seconds.
        """
        async with self._lock:
            live = self._live
            if live is not None and live.client is not None and not live.lost.is_set():
                return live.client
            if live is not None:  # it died while idle: a crash, back off
                self._live = None
                self._note_failure()
                await live.close()
            loop = asyncio.get_running_loop()
            delay = self._retry_at - loop.time()
            if delay > 0:
                _log.info("MCP server %r: restarting in %.1f s", self.config.name, delay)
                await asyncio.sleep(delay)
            try:
                live = await self._start()
            except McpStartError:
                self._note_failure()
                raise
            self._live = live
            assert live.client is not None
            return live.client

    async def close(self) -> None:
        """Close the session (a stdio server process is stopped)."""
        async with self._lock:
            live, self._live = self._live, None
        if live is not None:
            await live.close()

    async def recycle(self) -> None:
        """Close the current session; the next call opens a new one."""
        await self.close()

    def _note_failure(self) -> None:
        self._failures += 1
        delay = min(_BACKOFF_FIRST * 2 ** (self._failures - 1), _BACKOFF_MAX)
        self._retry_at = asyncio.get_running_loop().time() + delay

    @property
    def handshakes(self) -> int:
        """Handshake requests sent (`initialize` plus `server/discover` probes)."""
        return sum(self.requests[m] for m in _HANDSHAKE_METHODS)

    def _count_request(self, method: str) -> None:
        self.requests[method] += 1

    @asynccontextmanager
    async def _transport(self, live: _Live) -> AsyncGenerator[Any]:
        config = self.config
        async with contextlib.AsyncExitStack() as stack:
            if config.command is not None:
                params = StdioServerParameters(
                    command=config.command,
                    args=list(config.args),
                    env={**get_default_environment(), **config.env},
                    cwd=config.cwd,
                )
                streams = await stack.enter_async_context(stdio_client(params))
            else:
                assert config.url is not None
                headers = dict(config.headers)
                token = config.bearer_token()
                if token:
                    headers["Authorization"] = f"Bearer {token}"
                http = await stack.enter_async_context(
                    create_mcp_http_client(headers=headers, auth=oauth_auth(config))
                )
                http.event_hooks["response"].append(self._note_status)
                streams = await stack.enter_async_context(
                    streamable_http_client(config.url, http_client=http)
                )
            read, write = streams
            try:
                yield WatchedRead(read, live.lost), CountingWrite(write, self._count_request)
            finally:
                live.lost.set()

    async def _note_status(self, response: Any) -> None:
        """Keep the HTTP error status of a request (POST) for `_with_status`.

        A GET (the optional server-to-client stream; 405 is a normal answer)
        and the DELETE that ends a session say nothing about a request.
        """
        if OAUTH_REQUEST in response.request.extensions:  # the OAuth flow's own requests
            return
        if response.request.method == "POST" and response.status_code >= 400:
            self._http_status = (int(response.status_code), str(response.reason_phrase))

    def _with_status(self, exc: BaseException) -> BaseException:
        """`exc`, or an `MCPError` naming the HTTP status the SDK reported generically."""
        leaf = leaf_error(exc)
        if (
            isinstance(leaf, MCPError)
            and leaf.message in HTTP_STAND_INS
            and self._http_status is not None
        ):
            text = http_status_text(*self._http_status)
            if self.config.oauth is not None:  # a 401 or 403 says how to log in
                text = oauth_status_text(self.config.name, *self._http_status) or text
            return MCPError(leaf.code, text, leaf.data)
        return exc

    def _describe(self, exc: BaseException) -> str:
        """`describe_error(exc)`; an HTTP error status as `http_status_text` says it."""
        described = self._with_status(exc)
        if described is not exc:
            return str(described)
        return describe_error(exc)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._tools_changed()
        elif isinstance(message, Exception):
            _log.debug("MCP server %r transport error: %s", self.config.name, message)

    async def _roots(self, context: Any) -> types.ListRootsResult:
        """The roots the worker's configuration gives this server (`McpServerConfig.roots`)."""
        return roots_of(self.config)

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        log_server_message(self.config.name, params)

    def _tools_changed(self) -> None:
        if self._on_tools_changed is not None:
            self._on_tools_changed(self.config.name)

    async def _own(self, live: _Live, ready: asyncio.Future[Client]) -> None:
        try:
            async with Client(
                cast(Any, self._transport(live)),
                message_handler=self._on_message,
                # Declares elicitation (form and URL) and sampling: MCP
                # 2026-07-28 servers ask inside input-required results, which
                # the loop answers durably. Mid-call requests (older
                # protocols): `client_side`. Roots: from the config.
                elicitation_callback=mid_call_elicitation(self.config),
                sampling_callback=no_mid_call_sampling,
                list_roots_callback=self._roots if self.config.roots else None,
                logging_callback=self._on_log,
                log_level="info",
                client_info=types.Implementation(name="durable-tools", version="0"),
                cache=None,
                # MCP Tasks, declared in each request's capabilities (2026-07-28).
                extensions=[TasksExtension()],
            ) as client:
                live.client = client
                async with anyio.create_task_group() as group:
                    if self._wants_list_changed(client):
                        group.start_soon(self._listen, client)
                    if not ready.done():
                        ready.set_result(client)
                    await live.closing.wait()
                    group.cancel_scope.cancel()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(McpStartError(self._describe(exc)))
                ready.exception()  # retrieved here too: no "never retrieved" warning
            if isinstance(exc, asyncio.CancelledError):
                raise
            if ready.done() and not live.closing.is_set():
                _log.warning(
                    "MCP server %r: connection ended: %s", self.config.name, self._describe(exc)
                )
        finally:
            live.lost.set()

    @staticmethod
    def _wants_list_changed(client: Client) -> bool:
        session = client.session
        caps = session.server_capabilities
        return bool(
            caps is not None
            and caps.tools is not None
            and caps.tools.list_changed
            and session.protocol_version in MODERN_PROTOCOL_VERSIONS
        )

    async def _listen(self, client: Client) -> None:
        """2026-07-28 servers send list changes only on a `subscriptions/listen` stream."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._tools_changed()
        except Exception as exc:  # the stream is optional: calls keep working without it
            _log.info(
                "MCP server %r: no tool list subscription: %s",
                self.config.name,
                describe_error(exc),
            )

    async def _start(self) -> _Live:
        config = self.config
        live = _Live()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        live.task = asyncio.create_task(self._own(live, ready), name=f"mcp-server:{config.name}")
        self.starts += 1
        try:
            await asyncio.wait_for(asyncio.shield(ready), config.handshake_timeout)
        except TimeoutError:
            await live.abort()
            raise McpStartError(
                f"no handshake within {config.handshake_timeout:g} s (handshake_timeout)"
            ) from None
        except McpStartError:
            await live.close()
            raise
        self._failures = 0
        return live

    # ----------------------------------------------------------- requests

    async def list_tools(self) -> list[types.Tool]:
        """All tools the server offers (following pagination).

        Raises:
            McpStartError: The server could not be reached (an HTTP error
                status is named: `it answered HTTP 401 Unauthorized`).
            MCPError: The server answered `tools/list` with an error (an HTTP
                error status, named as above).
        """
        client = await self.open()
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(1000):  # bounded: a server that pages forever is cut off
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                page = await client.session.list_tools(params=params)
            except MCPError as exc:
                raise self._with_status(exc) from exc
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float,
        meta: Mapping[str, Any] | None = None,
        progress: Callable[[float, float | None, str | None], Any] | None = None,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult | CreateTaskResult:
        """Call one tool on the pooled session.

        An input-required result (MCP 2026-07-28) is returned, not answered
        here: the caller records it and retries with `input_responses` and
        the exact `request_state` (`allow_input_required=True`).

        Args:
            name: The server's own tool name (not the prefixed one).
            arguments: Arguments already validated against the input schema.
            timeout: Seconds the call may take.
            meta: The request's `_meta` (the idempotency key travels here).
            progress: `progress(progress, total, message)` for each progress
                notification the server sends for this call.
            input_responses: Answers to an earlier input-required result, by
                request key (`ElicitResult`s).
            request_state: That result's `requestState`, byte for byte.

        Returns:
            The server's `CallToolResult` (`is_error` may be true), its
            `InputRequiredResult`, or its task handle (`CreateTaskResult`,
            MCP Tasks).

        Raises:
            McpStartError: The server could not be (re)started: nothing was sent.
            ConnectionLost: The connection ended during the call (`sent=True`:
                the call may have reached the server).
            CallTimedOut: No answer within `timeout`; the request was cancelled
                at the server, the session left open.
            MCPError: The server answered with a JSON-RPC error.
            RuntimeError: The SDK rejected the result (e.g. structured content
                that violates the tool's output schema).
        """
        client = await self.open()
        live = self._live
        assert live is not None
        callback = _forwarding(progress) if progress is not None else None

        request = asyncio.ensure_future(
            client.session.call_tool(
                name,
                dict(arguments),
                progress_callback=callback,
                meta=cast(Any, dict(meta)) if meta else None,
                input_responses=cast(Any, dict(input_responses)) if input_responses else None,
                request_state=request_state,
                allow_input_required=True,
                # A task handle (MCP Tasks) is returned to the loop, which polls it.
                allow_claimed=True,
            )
        )
        return cast(
            "types.CallToolResult | types.InputRequiredResult | CreateTaskResult",
            await self._answer(live, request, timeout),
        )

    async def task_request(
        self,
        request: GetTaskRequest | UpdateTaskRequest | CancelTaskRequest,
        *,
        timeout: float,
        progress: Callable[[float, float | None, str | None], Any] | None = None,
    ) -> dict[str, Any]:
        """Send one request of the MCP Tasks extension on the pooled session.

        Args:
            request: `tasks/get`, `tasks/update` or `tasks/cancel`.
            timeout: Seconds it may take.
            progress: `progress(progress, total, message)` for each progress
                notification the server sends while it answers.

        Returns:
            The answer's JSON object, unchecked (`tasks.task_state_of` checks it).

        Raises:
            McpStartError, ConnectionLost, CallTimedOut, MCPError: As `call_tool`.
        """
        client = await self.open()
        live = self._live
        assert live is not None
        sent = asyncio.ensure_future(
            client.session.send_request(
                request,
                RawResult,
                progress_callback=_forwarding(progress) if progress is not None else None,
            )
        )
        answer: RawResult = await self._answer(live, sent, timeout)
        return dict(answer.model_extra or {})

    @property
    def supports_tasks(self) -> bool:
        """Whether its calls may run as tasks: it speaks 2026-07-28 and declares MCP Tasks."""
        live = self._live
        client = live.client if live is not None else None
        if client is None or client.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False
        caps = client.session.server_capabilities
        return caps is not None and TASKS_EXTENSION in (caps.extensions or {})

    async def _answer(self, live: _Live, request: asyncio.Future[Any], timeout: float) -> Any:
        """`request`'s answer within `timeout`, ended at the server otherwise (see `call_tool`)."""
        lost = asyncio.ensure_future(live.lost.wait())
        try:
            done, _ = await asyncio.wait(
                {request, lost}, timeout=timeout, return_when="FIRST_COMPLETED"
            )
        except BaseException:  # our caller was cancelled: end this request, then go
            await _abandon(request)
            raise
        finally:
            lost.cancel()
        if request in done:
            try:
                return request.result()
            except MCPError as exc:
                if exc.error.code == types.CONNECTION_CLOSED:
                    await self._lost(live)
                    raise ConnectionLost(
                        "the connection to the server ended during the call", sent=True
                    ) from exc
                raise self._with_status(exc) from exc
        await _abandon(request)
        if not done:
            raise CallTimedOut(f"no answer within {timeout:g} s; the request was cancelled")
        await self._lost(live)
        raise ConnectionLost("the server's connection ended during the call", sent=True)

    async def _lost(self, live: _Live) -> None:
        """Forget a dead session and back off before the next start."""
        async with self._lock:
            if self._live is live:
                self._live = None
                self._note_failure()
        await live.close()


def _forwarding(report: Callable[[float, float | None, str | None], Any]) -> ProgressFnT:
    """The SDK's progress callback for `report` (called from the session's reader task)."""

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        report(progress, total, message)

    return forward


async def _abandon(request: asyncio.Future[Any]) -> None:
    """End one request: cancel the task awaiting it and let it say so to the server.

    Cancelling the task that awaits `ClientSession.call_tool` makes the SDK
    cancel the request at the server (`notifications/cancelled`, or closing
    its HTTP response stream) and drop its waiter.
    Waiting for that is bounded, and a cancellation of our own caller during
    the wait is held until the request has ended, then re-raised.
    """
    if request.done():
        return
    request.cancel()
    waiting = asyncio.ensure_future(asyncio.wait({request}, timeout=_ABANDON_GRACE))
    cancelled = False
    while not waiting.done():
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            cancelled = True
    if request.done() and not request.cancelled():
        request.exception()  # retrieved: no "never retrieved" warning
    if cancelled:
        raise asyncio.CancelledError
