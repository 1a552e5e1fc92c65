"""What the MCP client answers by itself: roots from the configuration, server logs, refusals."""

from __future__ import annotations

import logging

import mcp_types as types
import pytest

from durable_tools.errors import ConfigurationError
from durable_tools.input_requests import with_defaults
from durable_tools.mcp import McpServerConfig
from durable_tools.mcp.client_side import (
    log_server_message,
    mid_call_elicitation,
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


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "tags": {"type": "array", "items": {"type": "string"}, "default": ["a", "b"]},
        "weird": {"type": "object", "default": {"nested": True}},  # not a form value
        "odd": {"type": "number", "default": float("inf")},  # not JSON
        "note": {"type": "string"},
    },
    "required": ["name"],
}


def test_an_answer_takes_the_schema_s_defaults_for_the_fields_it_leaves_out() -> None:
    assert with_defaults(SCHEMA, {"name": "Ada", "note": "hi"}) == {
        "name": "Ada",  # the person's own value wins
        "note": "hi",
        "age": 30,
        "tags": ["a", "b"],
    }
    assert with_defaults({"properties": [1]}, {"x": 1}) == {"x": 1}
    assert with_defaults("not a schema", None) == {}
    assert with_defaults({"properties": {"a": "not a field"}}, None) == {}


async def test_a_server_set_to_defaults_gets_them_mid_call_and_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="durable_tools.mcp.server")
    refusing = mid_call_elicitation(McpServerConfig(name="n", command="x"))
    assert refusing is no_mid_call_elicitation  # the default
    answer = mid_call_elicitation(
        McpServerConfig(name="n", command="x", mid_call_elicitation="defaults")
    )
    form = types.ElicitRequestFormParams(message="confirm?", requested_schema=SCHEMA)
    accepted = await answer(None, form)
    assert isinstance(accepted, types.ElicitResult) and accepted.action == "accept"
    assert accepted.content == {"name": "John Doe", "age": 30, "tags": ["a", "b"]}
    assert "accepted with the schema's defaults: age, name, tags" in caplog.text
    needs_a_person = {**SCHEMA, "required": ["name", "note"]}
    form = types.ElicitRequestFormParams(message="m", requested_schema=needs_a_person)
    refused = await answer(None, form)
    assert isinstance(refused, types.ErrorData) and "'note' has none" in refused.message
    link = types.ElicitRequestURLParams(
        message="m", url="https://example.com/x", elicitation_id="e1"
    )
    refused = await answer(None, link)
    assert isinstance(refused, types.ErrorData) and "input-required" in refused.message
    with pytest.raises(ValueError):
        McpServerConfig(name="n", command="x", mid_call_elicitation="always")  # type: ignore[arg-type]
