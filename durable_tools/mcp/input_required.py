"""An MCP input-required result, checked for the loop, and the answers sent back.

A server's `InputRequiredResult` (MCP 2026-07-28) is untrusted: its
messages and schemas are bounded and checked here, on the worker, before
they become the tool activity's result (`InputRequired`), so nothing a
server sends can fail that result's serialization or a workflow task
(DESIGN.md invariant 7). What the loop cannot ask yet becomes a
`ToolFailure` the model reads: a URL elicitation, a sampling or roots
request.

`requestState` is passed through byte for byte and never inspected or
logged; one that could not cross Temporal (over `MAX_STATE_CHARS`, or not
encodable as UTF-8) fails the call instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, cast

import mcp_types as types
from pydantic import ValidationError

from durable_tools.errors import InvalidSchema
from durable_tools.handler_input import clean_text
from durable_tools.input_requests import InputRequest, InputRequired, InputResume
from durable_tools.schema import compile_schema
from durable_tools.tools import ToolFailure

__all__ = [
    "MAX_REQUESTS",
    "MAX_SCHEMA_BYTES",
    "MAX_STATE_CHARS",
    "input_required_of",
    "input_responses_of",
]

MAX_REQUESTS: Final[int] = 16
"""Input requests one result may carry."""

MAX_SCHEMA_BYTES: Final[int] = 64 * 1024
"""JSON bytes of one requested schema."""

MAX_STATE_CHARS: Final[int] = 256 * 1024
"""Characters of a `requestState` kept (it is recorded in history twice per round)."""

_MAX_KEY_CHARS: Final[int] = 200
_MAX_MESSAGE_CHARS: Final[int] = 2000


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no payload could hold it
        return False
    return True


def _unusable(server: str, what: str) -> ToolFailure:
    return ToolFailure(
        "invalid_input_request", f"MCP server {server!r} asked for input with {what}"
    )


def _form_request(server: str, key: str, request: types.ElicitRequest) -> InputRequest:
    params = request.params
    if not isinstance(params, types.ElicitRequestFormParams):
        raise ToolFailure(
            "unsupported_input_request",
            f"MCP server {server!r} asked the user to open a URL (URL elicitation), "
            "which this worker does not support yet; the call was not completed",
        )
    schema: Any = params.requested_schema  # a raw dict: the SDK does not model it
    try:
        size = len(json.dumps(schema, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError):
        raise _unusable(server, "a requested schema that is not JSON") from None
    if size > MAX_SCHEMA_BYTES:
        raise _unusable(server, f"a requested schema of {size} bytes (over {MAX_SCHEMA_BYTES})")
    if not isinstance(schema, dict):
        raise _unusable(server, "a requested schema that is not an object schema")
    checked: dict[str, Any] = dict(cast(dict[str, Any], schema))
    if checked.get("type", "object") != "object":
        raise _unusable(server, "a requested schema that is not an object schema")
    try:
        compile_schema(checked, what="requested schema")
    except InvalidSchema as exc:
        raise _unusable(server, f"an invalid requested schema ({exc})") from None
    return InputRequest(
        key=key,
        message=clean_text(params.message, _MAX_MESSAGE_CHARS),
        answer_schema=checked,
    )


def input_required_of(server: str, result: types.InputRequiredResult) -> InputRequired:
    """What the loop asks for one input-required result.

    Args:
        server: The server's configured name.
        result: What the server answered.

    Returns:
        The checked requests (form elicitations) and the exact `requestState`.

    Raises:
        ToolFailure: `unsupported_input_request` (a URL elicitation, a
            sampling or roots request), `invalid_input_request` (no
            requests, too many, a bad key, schema or state).
    """
    requests = result.input_requests or {}
    if not requests:
        raise _unusable(server, "no input requests")
    if len(requests) > MAX_REQUESTS:
        raise _unusable(server, f"{len(requests)} input requests (over {MAX_REQUESTS})")
    state = result.request_state
    if state is not None and (len(state) > MAX_STATE_CHARS or not _encodable(state)):
        raise _unusable(server, "a requestState that cannot be kept (too long or not UTF-8)")
    checked: list[InputRequest] = []
    for key, request in requests.items():
        if not key or len(key) > _MAX_KEY_CHARS or not _encodable(key):
            raise _unusable(server, "an input request key that cannot be kept")
        if isinstance(request, types.ElicitRequest):
            checked.append(_form_request(server, key, request))
            continue
        what = "a sampling request" if request.method == "sampling/createMessage" else "its roots"
        raise ToolFailure(
            "unsupported_input_request",
            f"MCP server {server!r} asked for {what}, which this worker does not answer "
            "yet; the call was not completed",
        )
    return InputRequired(server=server, requests=checked, request_state=state)


def input_responses_of(server: str, resume: InputResume) -> dict[str, Any]:
    """The `inputResponses` of a retried call: one `ElicitResult` per answered key.

    Args:
        server: The server's configured name (for the error).
        resume: The answers the loop collected.

    Returns:
        `ElicitResult`s by request key (`content` only with `accept`).

    Raises:
        ToolFailure: `invalid_input_response`: an answer MCP cannot carry
            (form values must be strings, numbers, booleans, lists of
            strings or null).
    """
    responses: dict[str, Any] = {}
    for key, answer in resume.responses.items():
        content: Mapping[str, Any] | None = answer.content if answer.action == "accept" else None
        try:
            responses[key] = types.ElicitResult(
                action=answer.action, content=dict(content) if content is not None else None
            )
        except ValidationError:
            raise ToolFailure(
                "invalid_input_response",
                f"the answer to MCP server {server!r}'s question {key!r} cannot be sent: form "
                "values must be strings, numbers, booleans, lists of strings or null",
            ) from None
    return responses
