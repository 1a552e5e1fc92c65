"""`durable-tools inbox`: serves the app against an existing server, with the chosen auth."""

from __future__ import annotations

import asyncio
import base64
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cli_process import Running, cli
from temporalio.testing import WorkflowEnvironment

import durable_tools.worker.inbox.server as inbox_server
from durable_tools.client import Conversations
from durable_tools.errors import ConfigurationError
from durable_tools.worker.dev_server import free_port
from durable_tools.worker.inbox import build_auth, serve_inbox


def _status(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_inbox_serves_with_tokens_and_stops_on_sigint(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    address = dev_env.client.service_client.config.target_host
    tokens = tmp_path / "tokens"
    tokens.write_text("ana:ana-secret:approvers\n")
    key = tmp_path / "decision-key"
    key.write_text("k1:" + base64.b64encode(b"k" * 32).decode() + "\n")
    port = free_port()
    inbox = await Running.start(
        "inbox",
        "--address",
        address,
        "--port",
        str(port),
        "--tokens-file",
        str(tokens),
        "--decision-key-file",
        str(key),
        env={"DURABLE_TOOLS_INBOX_SECRET": "s" * 32},
    )
    try:
        line = await inbox.wait_for_line("Inbox: ", timeout=30)
        assert line == f"Inbox: http://127.0.0.1:{port}/"
        url = f"http://127.0.0.1:{port}/api/pending"
        assert await asyncio.to_thread(_status, url, {}) == 401
        ok = await asyncio.to_thread(_status, url, {"Authorization": "Bearer ana-secret"})
        assert ok == 200
        inbox.send_signal(signal.SIGINT)
        done = await inbox.finish(timeout=30)
        assert done.code == 0, done.stdout + done.stderr
        assert "inbox stopped" in done.stdout
        assert "decisions signed with key k1" in done.stdout
        assert "Traceback" not in done.stderr
    finally:
        await inbox.kill()


async def test_inbox_refuses_dev_mode_off_localhost() -> None:
    done = await cli("inbox", "--host", "0.0.0.0", "--dev-user", "ana")
    assert done.code == 2
    assert "127.0.0.1" in done.error_line()


async def test_inbox_refuses_a_malformed_decision_key_file(tmp_path: Path) -> None:
    key = tmp_path / "decision-key"
    key.write_text("k1:not base64!\n")
    done = await cli("inbox", "--dev-user", "ana", "--decision-key-file", str(key))
    assert done.code == 2
    assert str(key) in done.error_line() and "KEY_ID:BASE64" in done.error_line()
    done = await cli("inbox", "--dev-user", "ana", "--decision-key-file", str(tmp_path / "none"))
    assert done.code == 2
    assert "cannot read" in done.error_line()


async def test_inbox_whose_port_is_taken_at_bind_is_a_configuration_error(
    dev_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port is taken after serve_inbox's check and before uvicorn binds (two
    `dev`s starting at once): uvicorn calls sys.exit(3), which ended `dev` with
    status 3 and no `error:` line; serve_inbox raises ConfigurationError instead."""
    monkeypatch.setattr(inbox_server, "port_in_use", lambda host, port: False)
    conversations = Conversations(dev_env.client, task_queue="agents")
    auth = build_auth(host="127.0.0.1", dev_user="ana")

    def serve(port: int) -> BaseException | None:
        # Its own event loop: a SystemExit leaves the loop it is raised in.
        try:
            asyncio.run(serve_inbox(conversations, auth, port=port))
        except BaseException as exc:
            return exc
        return None

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        raised = await asyncio.to_thread(serve, port)
    assert isinstance(raised, ConfigurationError), repr(raised)
    assert str(raised).startswith(f"the inbox could not listen on 127.0.0.1:{port} (")
    assert "address already in use" in str(raised)
