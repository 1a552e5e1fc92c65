"""What the MCP client answers by itself: roots from the configuration, server logs, refusals."""

from __future__ import annotations

import logging

import mcp_types as types
import pytest

from durable_tools.errors import ConfigurationError
from durable_tools.mcp import McpServerConfig
from durable_tools.mcp.client_side import (
    log_server_message,
    no_mid_call_elicitation,
    no_mid_call_sampling,
    roots_of,
)


def test_roots_come_from_the_configuration() -> None:
    config = McpServerConfig(name="n", command="x", roots=["/srv/data", "file:///home/ada/"])
    roots = roots_of(config).roots
    assert [str(r.uri) for r in roots] == ["file:///srv/data", "file:///home/ada/"]
    assert [r.name for r in roots] == ["data", "ada"]
    with pytest.raises(ValueError, match="absolute path"):
        McpServerConfig(name="n", command="x", roots=["relative/dir"])
    with pytest.raises((ValueError, ConfigurationError)):
        McpServerConfig(name="n", command="x", roots=["https://example.com/"])


def test_server_log_messages_reach_the_worker_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="durable_tools.mcp.server")
    log_server_message(
        "every", types.LoggingMessageNotificationParams(level="error", logger="db", data="x" * 5000)
    )
    log_server_message(
        "every", types.LoggingMessageNotificationParams(level="debug", data={"k": "\ud800"})
    )
    first, second = caplog.records
    assert first.levelno == logging.ERROR and "MCP server 'every' (db): " in first.getMessage()
    assert len(first.getMessage()) < 2100
    assert second.levelno == logging.DEBUG
    second.getMessage().encode("utf-8")  # a lone surrogate never reaches a handler


async def test_mid_call_requests_are_refused() -> None:
    form = types.ElicitRequestFormParams(message="m", requested_schema={"type": "object"})
    refused = await no_mid_call_elicitation(None, form)
    assert isinstance(refused, types.ErrorData) and "input-required" in refused.message
    sample = types.CreateMessageRequestParams(messages=[], max_tokens=1)
    refused = await no_mid_call_sampling(None, sample)
    assert isinstance(refused, types.ErrorData) and "input-required" in refused.message
