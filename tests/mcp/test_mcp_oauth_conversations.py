"""OAuth end to end: `mcp login`, then conversations on the dev server call the protected tool.

The authorization server is authlib's (tests/mcp/oauth_test_servers.py), the MCP
server the SDK's with its bearer-auth middleware (token introspection,
protected resource metadata, tokens bound to the resource, RFC 8707). The
person in the browser is an httpx client that answers the consent form.
Then:

* a call works with the token `login` stored;
* the authorization server expires every access token: the next call
  refreshes (the server answered 401) and works, with the same `resource`;
* it revokes every token: the next call is a Failure naming
  `durable-tools mcp login notes`, not retried, and the conversation goes on;
* none of the secrets the servers issued or received (client secret, code,
  PKCE verifier, access and refresh tokens) is in the workflows' histories,
  their events, the spans or the log records (every logger at DEBUG).

A protected tool that asks (the servers' `--ask`: `open_notes`, a form) is
answered through the client API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_oauth_support import OAuthServers, consent, oauth_servers
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from tracing_support import RAW, tracer_provider
from workflow_helpers import payloads_of, running

from durable_tools.mcp.oauth_login import login
from durable_tools.mcp.token_store import FileTokenStore


class _Lines(logging.Handler):
    """Every record as printed, traceback included (the scripted browser's excepted)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(("httpx", "httpcore")) and threading.current_thread().name == (
            "browser"
        ):
            return
        self.lines.append(self.format(record))


@pytest.fixture
def every_log() -> Iterator[_Lines]:
    handler = _Lines()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[OAuthServers]:
    with oauth_servers(tmp_path) as running_servers:
        yield running_servers


def _browse(url: str) -> None:
    """The person: approve in a browser of their own (a thread, as a browser is another program)."""
    threading.Thread(target=consent, args=(url,), name="browser", daemon=True).start()


def _one_call(call_id: str) -> str:
    return json.dumps({"turns": [[[call_id, "notes__whoami", {}]]]})


async def test_login_then_calls_refresh_and_revocation(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    servers: OAuthServers,
    every_log: _Lines,
) -> None:
    tracer_provider()
    RAW.clear()
    config = servers.config(tmp_path, needs_approval=False)
    assert config.oauth is not None and config.oauth.token_dir is not None
    result = await login(config, show_url=_browse)
    assert result.issuer == servers.issuer and result.tools == 1
    (authorize,) = servers.events("authorize")
    assert authorize["resource"] == servers.url  # RFC 8707, from the protected resource metadata

    histories: list[str] = []
    async with running(dev_env, task_queue, tmp_path / "ledger.jsonl", mcp_servers=[config]) as h:
        first = await h.start(_one_call("c1"))
        ok = (await h.wait_outputs(first, "c1"))["c1"]
        assert not ok.is_error, ok
        assert "a client of the notes server" in ok.content

        servers.admin("expire")  # the server now answers 401 to the token the worker holds
        second = await h.start(_one_call("c2"))
        refreshed = (await h.wait_outputs(second, "c2"))["c2"]
        assert not refreshed.is_error, refreshed
        refreshes = [
            e for e in servers.events("token_request") if e["grant_type"] == "refresh_token"
        ]
        assert len(refreshes) == 1 and refreshes[0]["resource"] == servers.url

        servers.admin("revoke")  # the refresh token too: only a new login helps
        third = await h.start(_one_call("c3"))
        refused = (await h.wait_outputs(third, "c3"))["c3"]
        await h.wait_assistant_text(third, "done (directed)")  # the conversation goes on
        assert refused.is_error and refused.failure_kind == "execution_error", refused
        assert "needs `durable-tools mcp login notes`" in refused.content
        assert "401" in refused.content

        events: list[str] = []
        for workflow_id in (first, second, third):
            history = await h.client.get_workflow_handle(workflow_id).fetch_history()
            attempts = [
                e.activity_task_started_event_attributes.attempt
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            ]
            assert attempts and set(attempts) == {1}, attempts  # no activity was retried
            histories.append(history.to_json())
            histories.extend(
                payload.data.decode("utf-8", "replace")
                for event in history.events
                for payload in payloads_of(event)
            )
            retained, _ = await h.conversations.retained_events(workflow_id)
            events.extend(event.model_dump_json() for event in retained)

    # Two calls reached the tool; the refused one never did, and was not retried.
    assert len(servers.events("call")) == 2
    secrets = servers.secrets()
    kinds = {
        name
        for event in servers.events()
        for name in ("access_token", "refresh_token", "client_secret", "code", "code_verifier")
        if event.get(name)
    }
    assert kinds == {"access_token", "refresh_token", "client_secret", "code", "code_verifier"}
    assert len(secrets) >= 6
    places: dict[str, list[str]] = {
        "history": histories,
        "events": events,
        "spans": [span.to_json() for span in RAW.get_finished_spans()],
        "log": every_log.lines,
    }
    assert places["spans"] and places["log"], "nothing recorded: the scan would be vacuous"
    for place, texts in places.items():
        for secret in secrets:
            found = [text for text in texts if secret in text]
            assert not found, f"a secret is in the {place}: {found[0][:500]}"


async def test_an_expired_token_is_refreshed_before_it_is_sent(
    tmp_path: Path, servers: OAuthServers
) -> None:
    """A worker started after the token expired refreshes first (the store keeps `expires_at`)."""
    from mcp_support import started

    config = servers.config(tmp_path)
    await login(config, show_url=_browse)
    store = FileTokenStore(tmp_path / "tokens")
    stored = await store.get_tokens(servers.issuer, servers.url)
    assert stored is not None and stored.expires_at is not None and stored.refresh_token
    await store.set_tokens(servers.issuer, servers.url, stored.model_copy(update={"expires_at": 0}))

    async with started(config) as toolsets:
        assert [t.name for t in toolsets.toolkit()] == ["notes__whoami"]
    refreshes = [e for e in servers.events("token_request") if e["grant_type"] == "refresh_token"]
    assert len(refreshes) == 1
    renewed = await store.get_tokens(servers.issuer, servers.url)
    assert renewed is not None and renewed.access_token != stored.access_token
    assert renewed.refresh_token != stored.refresh_token  # rotated, and kept


async def test_a_worker_without_a_login_names_the_command(
    tmp_path: Path, servers: OAuthServers
) -> None:
    from durable_tools.errors import ConfigurationError
    from durable_tools.mcp import McpToolsets

    toolsets = McpToolsets([servers.config(tmp_path)])
    async with asyncio.timeout(30):
        await toolsets.start()
    try:
        assert "needs `durable-tools mcp login notes`" in toolsets.skipped["notes"]
    finally:
        await toolsets.aclose()
    listed = McpToolsets([servers.config(tmp_path, tools=["whoami"])])
    with pytest.raises(ConfigurationError, match="needs `durable-tools mcp login notes`"):
        async with asyncio.timeout(30):
            await listed.start()
    assert not servers.events("client")  # a worker never registers a client


async def test_a_protected_tools_question_is_answered_through_the_client_api(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """The server's `--ask` tool asks whose notes (a form) behind OAuth; the answer reaches it."""
    with oauth_servers(tmp_path, "--ask") as asking:
        config = asking.config(tmp_path, needs_approval=False)
        await login(config, show_url=_browse)
        async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[config]) as h:
            workflow_id = await h.start(json.dumps({"turns": [[["o", "notes__open_notes", {}]]]}))
            asked = await h.wait_interaction(workflow_id, "o")
            assert asked.input_request is not None
            assert asked.input_request.message == "Whose notes should I open?"
            await h.conversations.answer(
                workflow_id, "o", {"name": "Ada"}, arguments_hash=asked.arguments_hash, wait=True
            )
            outputs = await h.wait_outputs(workflow_id, "o")
        calls = asking.events("call")
    assert "the notes of Ada" in outputs["o"].content, outputs["o"]
    assert [c.get("owner") for c in calls] == ["Ada"]
