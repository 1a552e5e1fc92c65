"""An MCP server over HTTP that answers an HTTP error names its status (issue 25, item 5).

The MCP SDK's client reports a non-2xx answer without a JSON-RPC error body
as "Server returned an error response" (or "Not Found", "Session
terminated"); the connection keeps the status its HTTP client saw and says
`it answered HTTP 401 Unauthorized`. Real parts: the test MCP server over
HTTP on 127.0.0.1 (401 without its bearer token; its `gateway_error` tool
answered with any status, as by a gateway in front of it) and the dev server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_support import http_test_server
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import running

from durable_tools.mcp import McpServerConfig
from durable_tools.mcp.connection import McpConnection, McpStartError
from durable_tools.mcp.toolset import McpToolsets

TOKEN_ENV = "DT_TEST_HTTP_ERRORS_TOKEN"


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(TOKEN_ENV, "tok-http-errors")
    with http_test_server(tmp_path / "server.jsonl", TOKEN_ENV) as found:
        yield found


async def test_a_wrong_token_is_reported_as_http_401(url: str) -> None:
    connection = McpConnection(McpServerConfig(name="notes", url=url, token="tok-wrong"))
    try:
        with pytest.raises(McpStartError) as raised:
            await connection.list_tools()
    finally:
        await connection.close()
    assert str(raised.value) == (
        "it answered HTTP 401 Unauthorized (check its token_env, token or headers)"
    )

    toolsets = McpToolsets([McpServerConfig(name="notes", url=url, token="tok-wrong")])
    try:
        await toolsets.start()
    finally:
        await toolsets.aclose()
    assert toolsets.skipped["notes"].startswith("it answered HTTP 401 Unauthorized")


@pytest.mark.parametrize(
    ("status", "reason"),
    [(401, "Unauthorized"), (403, "Forbidden"), (404, "Not Found"), (500, "Internal Server Error")],
)
async def test_a_call_answered_with_an_http_error_names_it_to_the_model(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    url: str,
    status: int,
    reason: str,
) -> None:
    server = McpServerConfig(name="notes", url=url, token_env=TOKEN_ENV, trust_annotations=True)
    script = json.dumps(
        {
            "turns": [
                [
                    ["c1", "notes__gateway_error", {"status": status}],
                    ["c2", "notes__add", {"a": 1, "b": 2}],
                ]
            ]
        }
    )
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        workflow_id = await h.start(script)
        outputs = await h.wait_outputs(workflow_id, "c1", "c2")
    failed = outputs["c1"]
    assert failed.is_error and failed.failure_kind == "execution_error", failed
    said = json.loads(failed.content)["reason"]
    assert said.startswith(
        f"MCP server 'notes' refused the call: it answered HTTP {status} {reason}"
    ), said
    assert ("check its token_env" in said) == (status in (401, 403))
    assert not outputs["c2"].is_error  # the session goes on
