"""Loopback servers check `Host` (issue 23, item 4): the dev-mode inbox and the codec
server answer only 127.0.0.1, localhost and [::1], so a DNS-rebinding page cannot
act as the dev user or decrypt payloads; the codec server authenticates, serves
`/encode` only when asked, and refuses a public address without authentication."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from cli_process import cli
from hypothesis import example, given, settings
from hypothesis import strategies as st
from inbox_support import CREDENTIALS, basic, bearer
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec
from temporalio.testing import WorkflowEnvironment

from durable_tools.client import Conversations
from durable_tools.errors import ConfigurationError
from durable_tools.worker.codec_server import codec_app, serve
from durable_tools.worker.dev_server import free_port
from durable_tools.worker.inbox import Authenticators, TokenAuth, build_auth, serve_inbox
from durable_tools.worker.loopback import LoopbackHostOnly, is_loopback_host

REBINDING = ("evil.example", "evil.example:8234", "127.0.0.1.nip.io", "localhost.", "[::2]")


@asynccontextmanager
async def _dev_inbox(dev_env: WorkflowEnvironment) -> AsyncIterator[int]:
    """The inbox as `durable-tools dev` serves it (dev mode, 127.0.0.1); yields its port."""
    port, stop, ready = free_port(), asyncio.Event(), asyncio.Event()
    serving = asyncio.create_task(
        serve_inbox(
            Conversations(dev_env.client, task_queue="agents"),
            build_auth(host="127.0.0.1", dev_user="dev"),
            port=port,
            stop=stop,
            on_ready=lambda _url: ready.set(),
            refresh_seconds=0,
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield port
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)


async def test_dev_mode_inbox_refuses_a_rebinding_host(dev_env: WorkflowEnvironment) -> None:
    async with _dev_inbox(dev_env) as port, httpx.AsyncClient(timeout=10) as client:
        url = f"http://127.0.0.1:{port}"
        for host in REBINDING:
            response = await client.get(f"{url}/api/session", headers={"Host": host})
            assert response.status_code == 400, (host, response.text)
            assert "dev" not in response.text and "csrf" not in response.text
            response = await client.get(f"{url}/", headers={"Host": host})
            assert response.status_code == 400, host
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
            response = await client.get(f"{url}/api/session", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)
            assert response.json()["name"] == "dev"


@settings(max_examples=300, deadline=None)
@given(host=st.text(max_size=40) | st.from_regex(r"(127\.0\.0\.1|localhost|\[::1\])(:\d{0,6})?"))
@example(host="127.0.0.1")
@example(host="[::1]:8234")
@example(host="127.0.0.1:8234 evil.example")
@example(host="localhost@evil.example")
async def test_any_host_header_is_let_through_only_when_loopback(host: str) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    raw = host.encode("utf-8", "surrogatepass")
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [(b"host", raw)]}
    await LoopbackHostOnly(app)(scope, receive, send)
    loopback = is_loopback_host(raw.decode("latin-1"))
    assert statuses == [200 if loopback else 400]
    if loopback:  # and a URL parser agrees it names this machine
        assert urlsplit(f"http://{host}/").hostname in ("127.0.0.1", "localhost", "::1")


class _Reverse(PayloadCodec):
    """A codec that reverses the data (enough to see it ran)."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": b"reversed"}, data=p.data[::-1]) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": b"json/plain"}, data=p.data[::-1]) for p in payloads]


SEALED = {
    "payloads": [
        {"metadata": {"encoding": base64.b64encode(b"reversed").decode()}, "data": "ImloIg=="}
    ]
}
"""`"ih"`, which decodes to `"hi"`."""
UI = {"Origin": "http://localhost:8233", "X-Namespace": "default"}


@asynccontextmanager
async def _codec(base_url: str = "http://127.0.0.1:8081", **options: Any) -> Any:
    transport = httpx.ASGITransport(app=codec_app(_Reverse(), **options))
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
        yield client


async def test_codec_server_needs_credentials_when_configured() -> None:
    auth = Authenticators([TokenAuth.parse(CREDENTIALS)])
    async with _codec(auth=auth) as client:
        response = await client.post("/decode", json=SEALED, headers=UI)
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"].startswith("Bearer")
        # The Web UI can read the 401 (CORS), so it can tell the person to sign in.
        assert response.headers["access-control-allow-origin"] == "http://localhost:8233"
        wrong = await client.post("/decode", json=SEALED, headers={**UI, **bearer("nope")})
        assert wrong.status_code == 401
        # The Web UI passes its user's Authorization header through.
        ok = await client.post("/decode", json=SEALED, headers={**UI, **bearer("ana-secret")})
        assert ok.status_code == 200, ok.text
        assert base64.b64decode(ok.json()["payloads"][0]["data"]) == b'"hi"'
        also = await client.post("/decode", json=SEALED, headers=basic("bob", "bob-secret"))
        assert also.status_code == 200
        # A CORS preflight carries no credentials and needs none.
        preflight = await client.options(
            "/decode",
            headers={
                "Origin": "http://localhost:8233",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
            },
        )
        assert preflight.status_code == 200
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()


async def test_codec_server_serves_encode_only_when_asked() -> None:
    async with _codec() as client:
        assert (await client.post("/encode", json=SEALED)).status_code == 404
        assert (await client.post("/decode", json=SEALED)).status_code == 200
    async with _codec(encode=True) as client:
        response = await client.post("/encode", json=SEALED)
        assert response.status_code == 200, response.text


async def test_codec_server_refuses_a_rebinding_host() -> None:
    async with _codec() as client:
        for host in REBINDING:
            response = await client.post("/decode", json=SEALED, headers={**UI, "Host": host})
            assert response.status_code == 400, (host, response.text)
            assert "access-control-allow-origin" not in response.headers
        response = await client.post("/decode", json=SEALED, headers={"Host": "localhost:8081"})
        assert response.status_code == 200
    # Served over real HTTP, as `durable-tools codec-server` runs it.
    port, ready = free_port(), asyncio.Event()
    server = asyncio.create_task(serve(_Reverse(), port=port, on_ready=lambda _: ready.set()))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        async with httpx.AsyncClient(timeout=10) as client:
            url = f"http://127.0.0.1:{port}/decode"
            evil = await client.post(url, json=SEALED, headers={"Host": "evil.example"})
            assert evil.status_code == 400
            assert (await client.post(url, json=SEALED)).status_code == 200
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)


async def test_codec_server_refuses_a_public_address_without_authentication() -> None:
    with pytest.raises(ConfigurationError, match="--tokens-file"):
        await serve(_Reverse(), host="0.0.0.0", port=free_port())
    done = await cli("codec-server", "test_codec:codec", "--ip", "0.0.0.0", timeout=30)
    assert done.code == 2
    assert "would decrypt for anyone" in done.error_line()


async def test_codec_server_command_with_tokens(tmp_path: Any) -> None:
    from cli_process import Running

    tokens = tmp_path / "tokens"
    tokens.write_text(CREDENTIALS)
    port = free_port()
    server = await Running.start(
        "codec-server", "test_codec:codec", "--port", str(port), "--tokens-file", str(tokens)
    )
    try:
        await server.wait_for_line("authentication: tokens", timeout=30)
        async with httpx.AsyncClient(timeout=10) as client:
            url = f"http://127.0.0.1:{port}"
            assert (await client.post(f"{url}/decode", json={"payloads": []})).status_code == 401
            ok = await client.post(
                f"{url}/decode", json={"payloads": []}, headers=bearer("ana-secret")
            )
            assert ok.status_code == 200 and json.loads(ok.text) == {}
            assert (
                await client.post(f"{url}/encode", headers=bearer("ana-secret"))
            ).status_code == 404
    finally:
        await server.kill()
