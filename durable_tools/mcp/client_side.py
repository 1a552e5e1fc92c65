"""What the MCP client answers by itself: capabilities, mid-call requests, roots, server logs.

The client (`connection.py`) declares elicitation (form and URL) and
sampling, so servers offer the tools that need them, and roots when the
server's configuration lists some (`McpServerConfig.roots`). At MCP
2026-07-28 a server asks inside an input-required result, which the loop
answers durably (`input_required.py`); a server at an older protocol that
asks mid-call (a server-initiated `elicitation/create` or
`sampling/createMessage`) is refused here, because answering would hold
the tool activity, and its worker slot, while a person or a model decides.
One exception, opted in per server (`McpServerConfig.mid_call_elicitation
= "defaults"`): a form elicitation whose schema gives a default for every
field it requires is accepted at once with those defaults (SEP-1034), since
no one decides anything (`mid_call_elicitation`). `roots/list` is answered
from the configuration at once.

Server log messages (`notifications/message`, opted in at level `info`)
become records of the worker's logger `durable_tools.mcp.server`, cut at
2,000 characters; the worker's log redaction scrubs them like any record.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Final, cast

import mcp_types as types

from durable_tools.handler_input import clean_text
from durable_tools.input_requests import with_defaults
from durable_tools.mcp.config import McpServerConfig

__all__ = [
    "log_server_message",
    "mid_call_elicitation",
    "no_mid_call_elicitation",
    "no_mid_call_sampling",
    "roots_of",
]

_server_log = logging.getLogger("durable_tools.mcp.server")
_MAX_LOG_CHARS: Final[int] = 2000
_LOG_LEVELS: Final[dict[str, int]] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}


def log_server_message(server: str, params: types.LoggingMessageNotificationParams) -> None:
    """Write a server's log message to the worker's log, at the matching level.

    Args:
        server: The server's configured name.
        params: The notification (level, optional logger name, any JSON data).
    """
    level = _LOG_LEVELS.get(params.level, logging.INFO)
    data: Any = params.data
    text = data if isinstance(data, str) else repr(data)
    _server_log.log(
        level,
        "MCP server %r%s: %s",
        server,
        f" ({clean_text(params.logger, 200)})" if params.logger else "",
        clean_text(text, _MAX_LOG_CHARS),
    )


async def no_mid_call_elicitation(
    context: Any, params: types.ElicitRequestParams
) -> types.ElicitResult | types.ErrorData:
    """A server at a protocol before 2026-07-28 asking mid-call: not answered.

    Answering would hold the tool activity (and its worker slot) while a
    person decides; only input-required results become durable questions.
    """
    return types.ErrorData(
        code=types.INVALID_REQUEST,
        message="durable-tools answers elicitation only in input-required results "
        "(MCP 2026-07-28), not mid-call",
    )


def mid_call_elicitation(config: McpServerConfig) -> Any:
    """The elicitation callback for `config`'s server: refuse, or accept with the defaults.

    Args:
        config: The server's configuration (`mid_call_elicitation`).

    Returns:
        `no_mid_call_elicitation` unless the server is set to `"defaults"`;
        then a callback that accepts a form elicitation with the requested
        schema's defaults (`with_defaults`) when every required field has
        one, logs what it sent, and refuses anything else (a URL
        elicitation, a required field without a default) as
        `no_mid_call_elicitation` does, naming the field.
    """
    if config.mid_call_elicitation != "defaults":
        return no_mid_call_elicitation
    server = config.name

    async def accept_defaults(
        context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        if not isinstance(params, types.ElicitRequestFormParams):
            return await no_mid_call_elicitation(context, params)
        schema = params.requested_schema
        values = with_defaults(schema, None)
        required: Any = schema.get("required")
        names: list[Any] = cast(list[Any], required) if isinstance(required, list) else []
        missing = [name for name in names if isinstance(name, str) and name not in values]
        if missing:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"durable-tools answers mid-call elicitation only with the schema's "
                f"defaults, and {clean_text(missing[0], 100)!r} has none; at MCP 2026-07-28 "
                "a person answers in an input-required result",
            )
        _server_log.info(
            "MCP server %r asked mid-call (%s); accepted with the schema's defaults: %s",
            server,
            clean_text(params.message, 200),
            clean_text(", ".join(sorted(values)), 500) or "no fields",
        )
        return types.ElicitResult(action="accept", content=values)

    return accept_defaults


async def no_mid_call_sampling(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult | types.ErrorData:
    """A server at a protocol before 2026-07-28 sampling mid-call: not answered (as elicitation)."""
    return types.ErrorData(
        code=types.INVALID_REQUEST,
        message="durable-tools answers sampling only in input-required results "
        "(MCP 2026-07-28), not mid-call",
    )


def roots_of(config: McpServerConfig) -> types.ListRootsResult:
    """A server's configured roots as MCP roots (a path becomes a `file://` URI).

    Args:
        config: The server's configuration.

    Returns:
        One root per entry of `config.roots`, named after its last part.
    """
    roots: list[types.Root] = []
    for entry in config.roots:
        uri = entry if "://" in entry else Path(entry).absolute().as_uri()
        name = uri.rstrip("/").rsplit("/", 1)[-1] or uri
        roots.append(types.Root.model_validate({"uri": uri, "name": name}))
    return types.ListRootsResult(roots=roots)
