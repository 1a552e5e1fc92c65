"""Temporal's codec server protocol, so the Web UI shows decoded payloads.

The Temporal Web UI (and `temporal workflow show --codec-endpoint`) sends the
payloads it displays to `POST {endpoint}/decode` as JSON,
`{"payloads": [{"metadata": {"encoding": "<base64>"}, "data": "<base64>"}]}`
(the protobuf JSON form of `temporal.api.common.v1.Payloads`), with the
`X-Namespace` header, from the UI's origin; the answer has the same shape.
`/encode` is the reverse, served only when asked (`encode=True`,
`--encode`): an encryption oracle is rarely needed (the UI's "encode" step
is for sending signals with encrypted input). Only origins in `origins` get
CORS headers, so a page from any other site cannot read decoded payloads
through a person's browser.

Whoever can reach it can decrypt, so:

- With `auth` (the inbox's `Authenticators`: a tokens file), every request
  but a CORS preflight needs credentials they accept, else 401. The Web UI
  sends the user's `Authorization` header when its codec settings pass the
  access token ("Pass the user access token"; `TEMPORAL_CODEC_PASS_ACCESS_TOKEN`);
  a script sends `Authorization: Bearer TOKEN`.
- On a loopback address it answers only loopback `Host` names (400
  otherwise), so a DNS-rebinding page cannot use it as same-origin.
- `serve` refuses a non-loopback address without `auth`.

Served with Starlette and uvicorn (dependencies of the `mcp` SDK).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

from durable_tools.errors import ConfigurationError
from durable_tools.worker.inbox.auth import Authenticators, Rejected
from durable_tools.worker.loopback import LoopbackHostOnly, is_loopback_address

__all__ = ["DEFAULT_ORIGINS", "TOKENS_ENV", "codec_app", "serve"]

TOKENS_ENV = "DURABLE_TOOLS_CODEC_TOKENS"
"""Environment variable with the codec server's credential lines `NAME:SECRET[:GROUPS]`."""

DEFAULT_ORIGINS: tuple[str, ...] = ("http://localhost:8233", "http://127.0.0.1:8233")
"""The Web UI of `temporal server start-dev` / `durable-tools dev` (port 8233)."""

MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest request body accepted (bytes): a history page of 4 MB gRPC messages."""


def codec_app(
    codec: PayloadCodec,
    *,
    origins: Sequence[str] = DEFAULT_ORIGINS,
    auth: Authenticators | None = None,
    encode: bool = False,
    loopback_hosts: bool = True,
) -> Starlette:
    """A Starlette app serving `POST /decode` (and `POST /encode` when asked) with `codec`.

    Args:
        codec: The payload codec (the same one the workers and clients use).
        origins: Origins allowed by CORS (default `DEFAULT_ORIGINS`).
        auth: Who may call it (default `None`: anyone who reaches it).
        encode: Serve `/encode` too (default False: 404).
        loopback_hosts: Answer only loopback `Host` names (default True; for
            a server on a loopback address).

    Returns:
        The ASGI application. A malformed body is answered 400 with a one-line
        `{"error": ...}`; a codec failure (wrong key, tampered data) 422;
        missing or refused credentials 401; a non-loopback `Host` 400.
    """

    def endpoint(
        apply: Callable[[Sequence[Payload]], Awaitable[list[Payload]]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            if auth is not None:
                try:
                    identity = auth.authenticate(request)
                except Rejected as exc:
                    return _unauthorized(exc.reason)
                if identity is None:
                    return _unauthorized("send Authorization: Bearer TOKEN")
            body = await request.body()
            if len(body) > MAX_BODY_BYTES:
                return JSONResponse({"error": "body too large"}, status_code=413)
            try:
                payloads = json_format.Parse(body or b"{}", Payloads())
            except json_format.ParseError as exc:
                message = " ".join(str(exc).split())
                return JSONResponse({"error": f"not a Payloads JSON: {message}"}, 400)
            try:
                done = await apply(list(payloads.payloads))
            except Exception as exc:  # the codec's own error: wrong key, tampering
                return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, 422)
            answer: dict[str, Any] = json_format.MessageToDict(Payloads(payloads=done))
            return JSONResponse(answer)

        return handle

    routes = [Route("/decode", endpoint(codec.decode), methods=["POST"])]
    if encode:
        routes.append(Route("/encode", endpoint(codec.encode), methods=["POST"]))
    hosts = [Middleware(LoopbackHostOnly)] if loopback_hosts else []
    return Starlette(
        routes=routes,
        middleware=[
            *hosts,  # first: a rebinding page gets no CORS answer either
            Middleware(
                cast(Any, CORSMiddleware),
                allow_origins=list(origins),
                allow_methods=["POST", "OPTIONS"],
                allow_headers=["Content-Type", "X-Namespace", "Authorization"],
                allow_credentials=True,
            ),
        ],
    )


def _unauthorized(reason: str) -> Response:
    return JSONResponse(
        {"error": f"unauthenticated: {reason}"},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="durable-tools codec server"'},
    )


async def serve(
    codec: PayloadCodec,
    *,
    host: str = "127.0.0.1",
    port: int = 8081,
    origins: Sequence[str] = DEFAULT_ORIGINS,
    on_ready: Callable[[str], None] | None = None,
    auth: Authenticators | None = None,
    encode: bool = False,
) -> None:
    """Serve `codec_app(codec)` on `host:port` until cancelled or SIGINT/SIGTERM.

    On a loopback address only loopback `Host` names are answered; any other
    address needs `auth`.

    Args:
        codec: The payload codec.
        host: Address to bind (default loopback).
        port: Port (default 8081).
        origins: CORS origins (default the dev server's Web UI).
        on_ready: Called with the base URL once the server listens.
        auth: Who may call it (default `None`: anyone who reaches it; loopback only).
        encode: Serve `/encode` too (default False).

    Raises:
        ConfigurationError: A non-loopback `host` without `auth`.
        OSError: It could not listen on `host:port` (e.g. the port is taken).
    """
    import uvicorn

    loopback = is_loopback_address(host)
    if not loopback and auth is None:
        raise ConfigurationError(
            f"the codec server on {host} would decrypt for anyone who reaches it: give it "
            "--tokens-file (or $DURABLE_TOOLS_CODEC_TOKENS), or bind 127.0.0.1"
        )
    app = codec_app(codec, origins=origins, auth=auth, encode=encode, loopback_hosts=loopback)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.05)
    if not server.started:
        try:
            await task
        except SystemExit:  # uvicorn exits when it cannot bind
            pass
        raise OSError(f"the codec server could not listen on {host}:{port}")
    if on_ready is not None:
        on_ready(f"http://{host}:{port}")
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True  # close the listening socket and connections cleanly
        await task
        raise
