"""Encryption end to end: the plugin keeps the client's payload codec, nothing secret
lands in history in plaintext, and the codec server decodes it the way the Web UI asks.

The codec is AES-GCM from the `cryptography` package, as Temporal's encryption
samples write it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import PayloadCodec
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_tools import Toolkit, tool
from durable_tools.client import Conversations
from durable_tools.codec import data_converter, load_codec, with_pydantic_payloads
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.testing import ScriptedModel, call
from durable_tools.worker.codec_server import serve
from durable_tools.worker.dev_server import find_temporal_cli, free_port
from durable_tools.worker.plugin import DurableToolsPlugin

KEY = bytes(range(32))  # a fixed test key, the same in the CLI subprocess
ENCODING = b"binary/encrypted"


class AesGcmCodec(PayloadCodec):
    """Each payload serialized, encrypted with AES-256-GCM and a random nonce."""

    def __init__(self, key: bytes = KEY) -> None:
        self.aes = AESGCM(key)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out: list[Payload] = []
        for payload in payloads:
            nonce = os.urandom(12)
            sealed = nonce + self.aes.encrypt(nonce, payload.SerializeToString(), None)
            out.append(Payload(metadata={"encoding": ENCODING}, data=sealed))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out: list[Payload] = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                out.append(payload)
                continue
            plain = self_decrypt(self.aes, payload.data)
            out.append(Payload.FromString(plain))
        return out


def self_decrypt(aes: AESGCM, data: bytes) -> bytes:
    return aes.decrypt(data[:12], data[12:], None)


codec = AesGcmCodec()  # `load_codec("test_codec:codec")` finds it

SECRETS = ("sesame-MSG", "sesame-ARG", "sesame-REASON", "sesame-OUT", "sesame-TEXT")


@tool(needs_approval=True)
async def open_vault(code: str) -> dict[str, str]:
    """Open the vault; a person approves.

    Args:
        code: The vault code.
    """
    return {"opened": f"sesame-OUT for {code}"}


def _payloads(node: Any) -> Iterator[dict[str, Any]]:
    """Every protobuf-JSON `Payload` object in a history JSON (has `data` or `metadata`)."""
    if isinstance(node, dict):
        if (
            "metadata" in node
            and isinstance(node.get("metadata"), dict)
            and ("encoding" in node["metadata"])
        ):
            yield node
        for value in node.values():
            yield from _payloads(value)
    elif isinstance(node, list):
        for value in node:
            yield from _payloads(value)


async def _show_json(env: WorkflowEnvironment, workflow_id: str) -> Any:
    process = await asyncio.create_subprocess_exec(
        find_temporal_cli(),
        "workflow",
        "show",
        "-w",
        workflow_id,
        "--address",
        env.client.service_client.config.target_host,
        "--namespace",
        env.client.namespace,
        "-o",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


def _plain_text_of(history: Any) -> str:
    """The history JSON plus every payload's bytes, base64-decoded, as one text."""
    blobs = [json.dumps(history)]
    for payload in _payloads(history):
        blobs.append(base64.b64decode(payload.get("data", "")).decode("utf-8", "replace"))
        for value in payload["metadata"].values():
            blobs.append(base64.b64decode(value).decode("utf-8", "replace"))
    return "\n".join(blobs)


async def test_encrypted_conversation_keeps_secrets_out_of_history(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    model = ScriptedModel([[call("c1", "open_vault", code="sesame-ARG")], "sesame-TEXT done"])
    plugin = DurableToolsPlugin(toolkits={"vault": Toolkit(open_vault)}, models={"m": model})
    config = dev_env.client.config()
    config["data_converter"] = data_converter(codec)
    config["plugins"] = [plugin]
    client = Client(**config)
    # The plugin swapped only the payload converter: the codec is still there.
    assert client.data_converter.payload_codec is codec
    conversations = Conversations(client, task_queue=task_queue)
    workflow_id = f"vault-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue):
        handle = await conversations.start(
            workflow_id,
            agent=AgentConfig(model="m", toolkit="vault"),
            message="sesame-MSG: open it",
            options=ConversationOptions(search_attributes=True, idle_timeout=1),
        )
        for _ in range(200):
            pending = await conversations.pending(workflow_id)
            if pending.approvals:
                break
            await asyncio.sleep(0.05)
        (approval,) = pending.approvals
        await conversations.approve(
            workflow_id,
            approval.call_id,
            arguments_hash=approval.arguments_hash,
            decided_by="ana",
            reason="sesame-REASON",
        )
        result = await asyncio.wait_for(handle.result(), 30)
        history = await conversations.history(workflow_id)
    assert "sesame-TEXT" in json.dumps(result.model_dump(mode="json")) or any(
        "sesame-TEXT" in str(item) for item in history
    )
    assert any("sesame-OUT" in str(item) for item in history)  # decoded for the client

    shown = await _show_json(dev_env, workflow_id)
    plain = _plain_text_of(shown)
    leaked = [secret for secret in SECRETS if secret in plain]
    assert not leaked, f"in plaintext in `temporal workflow show -o json`: {leaked}"
    encrypted = [
        p for p in _payloads(shown) if p["metadata"]["encoding"] == "YmluYXJ5L2VuY3J5cHRlZA=="
    ]
    assert len(encrypted) >= 5

    # The codec server decodes them as the Web UI asks (JSON Payloads, X-Namespace, CORS).
    port = free_port()
    ready = asyncio.Event()
    server = asyncio.create_task(
        serve(codec, port=port, encode=True, on_ready=lambda _url: ready.set())
    )
    try:
        await asyncio.wait_for(ready.wait(), 10)
        base = f"http://127.0.0.1:{port}"
        ui = {"X-Namespace": "default", "Origin": "http://localhost:8233"}
        status, headers, body = await _http(base + "/decode", {"payloads": encrypted}, ui)
        assert status == 200, body
        assert headers["access-control-allow-origin"] == "http://localhost:8233"
        decoded = _plain_text_of(json.loads(body))
        for secret in SECRETS:
            assert secret in decoded, secret
        # Round trip through /encode then /decode.
        _, _, sealed = await _http(base + "/encode", json.loads(body), ui)
        _, _, again = await _http(base + "/decode", json.loads(sealed), ui)
        assert json.loads(again) == json.loads(body)
        # A page from another origin gets no CORS grant; a preflight from the UI does.
        evil = {"Origin": "http://evil.example"}
        _, headers, _ = await _http(base + "/decode", {"payloads": encrypted[:1]}, evil)
        assert "access-control-allow-origin" not in headers
        status, headers, _ = await _http(
            base + "/decode",
            None,
            {
                "Origin": "http://localhost:8233",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
            method="OPTIONS",
        )
        assert status == 200
        assert "x-namespace" in headers["access-control-allow-headers"].lower()
        # Garbage in: one clear error, never a stack trace.
        status, _, body = await _http(base + "/decode", b"{not json", ui)
        assert status == 400 and "not a Payloads JSON" in json.loads(body)["error"]
        tampered = dict(encrypted[0], data=base64.b64encode(b"x" * 40).decode())
        status, _, _ = await _http(base + "/decode", {"payloads": [tampered]}, ui)
        assert status == 422
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


async def _http(
    url: str, body: Any, headers: dict[str, str], *, method: str = "POST"
) -> tuple[int, dict[str, str], str]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    for name, value in headers.items():
        request.add_header(name, value)

    def send() -> tuple[int, dict[str, str], str]:
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                found = {k.lower(): v for k, v in response.headers.items()}
                return response.status, found, response.read().decode()
        except urllib.error.HTTPError as exc:
            found = {k.lower(): v for k, v in exc.headers.items()}
            return exc.code, found, exc.read().decode()

    return await asyncio.to_thread(send)


def test_with_pydantic_payloads_keeps_codec_and_failure_converter() -> None:
    from temporalio.contrib.pydantic import PydanticPayloadConverter
    from temporalio.converter import DataConverter, DefaultFailureConverter

    class MyFailures(DefaultFailureConverter):
        pass

    mine = DataConverter(payload_codec=codec, failure_converter_class=MyFailures)
    swapped = with_pydantic_payloads(mine)
    assert swapped.payload_codec is codec
    assert swapped.failure_converter_class is MyFailures
    assert swapped.payload_converter_class is PydanticPayloadConverter


def test_load_codec_specs() -> None:
    import pytest

    from durable_tools.errors import ConfigurationError

    assert load_codec("test_codec:codec") is codec
    assert isinstance(load_codec("test_codec:AesGcmCodec"), AesGcmCodec)  # a factory
    for spec, problem in [
        ("nope", "module:attribute"),
        ("no_such_module_xyz:codec", "cannot import"),
        ("test_codec:missing", "no attribute"),
        ("test_codec:SECRETS", "not a temporalio PayloadCodec"),
    ]:
        with pytest.raises(ConfigurationError, match=problem):
            load_codec(spec)


async def test_cli_codec_option_and_codec_server_command() -> None:
    from cli_process import Running, cli

    bad = await cli("--codec", "no_such_module_xyz:codec", "status", "some-id")
    assert "cannot import the codec module 'no_such_module_xyz'" in bad.error_line()
    assert bad.code == 2

    port = free_port()
    server = await Running.start("codec-server", "test_codec:codec", "--port", str(port))
    try:
        line = await server.wait_for_line("Codec server: ", timeout=30)
        assert f"http://127.0.0.1:{port}" in line
        sealed = (
            await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"hi"')])
        )[0]
        from google.protobuf import json_format

        status, _, body = await _http(
            f"http://127.0.0.1:{port}/decode",
            {"payloads": [json_format.MessageToDict(sealed)]},
            {"X-Namespace": "default"},
        )
        assert status == 200
        assert base64.b64decode(json.loads(body)["payloads"][0]["data"]) == b'"hi"'
    finally:
        await server.kill()
