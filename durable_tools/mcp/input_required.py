"""An MCP input-required result, checked for the loop, and the answers sent back.

A server's `InputRequiredResult` (MCP 2026-07-28) is untrusted: its
messages and schemas are bounded and checked here, on the worker, before
they become the tool activity's result (`InputRequired`), so nothing a
server sends can fail that result's serialization or a workflow task
(DESIGN.md invariant 7). A form becomes a question; a URL elicitation a
question showing the link (`http`/`https` only: `javascript:`, `data:`,
`file:` and links with credentials are refused); a sampling request (text
only, bounded) a completion of the conversation's model, approved first
unless the server's configuration says `sampling = "allow"`. A roots
request (`roots/list`) is answered here, at once, from the server's
configuration (`McpServerConfig.roots`; an empty list when it lists none):
no one decides, so it is an answer of the round (`InputRequired.answered`),
not a question. A request the server's configuration refuses, or one the
worker cannot answer (a sampling request with tools or images), becomes a
`ToolFailure` the model reads.

`requestState` is passed through byte for byte and never inspected or
logged; one that could not cross Temporal (over `MAX_STATE_CHARS`, or not
encodable as UTF-8) fails the call instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, cast
from urllib.parse import urlsplit

import mcp_types as types
from pydantic import ValidationError

from durable_tools.errors import InvalidSchema
from durable_tools.handler_input import clean_text
from durable_tools.input_requests import (
    InputAnswer,
    InputRequest,
    InputRequired,
    InputResume,
    ListedRoot,
    SampledMessage,
    SamplingAsk,
)
from durable_tools.mcp.client_side import roots_of
from durable_tools.mcp.config import McpServerConfig
from durable_tools.schema import compile_schema
from durable_tools.tools import ToolFailure

__all__ = [
    "MAX_REQUESTS",
    "MAX_SAMPLING_CHARS",
    "MAX_SCHEMA_BYTES",
    "MAX_STATE_CHARS",
    "checked_url",
    "input_required_of",
    "input_responses_of",
    "roots_answer",
]

MAX_REQUESTS: Final[int] = 16
"""Input requests one result may carry."""

MAX_SCHEMA_BYTES: Final[int] = 64 * 1024
"""JSON bytes of one requested schema."""

MAX_STATE_CHARS: Final[int] = 256 * 1024
"""Characters of a `requestState` kept (it is recorded in history twice per round)."""

MAX_SAMPLING_CHARS: Final[int] = 64 * 1024
"""Characters of a sampling request's messages together (recorded in the model activity's input)."""

_MAX_KEY_CHARS: Final[int] = 200
_MAX_MESSAGE_CHARS: Final[int] = 2000
_MAX_URL_CHARS: Final[int] = 2048
_MAX_SAMPLING_MESSAGES: Final[int] = 64
_MAX_SYSTEM_PROMPT_CHARS: Final[int] = 8000
_MAX_SAMPLING_TOKENS: Final[int] = 32768
_MAX_STOPS: Final[int] = 8
_MAX_STOP_CHARS: Final[int] = 200


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


def _refused(server: str, what: str, setting: str) -> ToolFailure:
    return ToolFailure(
        "input_request_refused",
        f"MCP server {server!r} asked for {what}, which this worker's configuration "
        f'refuses ({setting} = "refuse"); the call was not completed',
    )


def _unsupported(server: str, what: str) -> ToolFailure:
    return ToolFailure(
        "unsupported_input_request",
        f"MCP server {server!r} asked for {what}, which this worker does not answer; "
        "the call was not completed",
    )


def checked_url(server: str, url: object) -> tuple[str, str]:
    """A URL elicitation's link, if a person may be shown it.

    Args:
        server: The server's configured name (for the error).
        url: The link the server sent.

    Returns:
        The link (unchanged) and its host (lowercase, IDNA as sent).

    Raises:
        ToolFailure: `invalid_input_request`: not a string, over 2,048
            characters, control or space characters, a scheme other than
            `http`/`https` (`javascript:`, `data:`, `file:`), no host, or
            credentials in the link (`https://user:pass@host/`).
    """
    if not isinstance(url, str) or not url or len(url) > _MAX_URL_CHARS:
        raise _unusable(server, "a link that cannot be shown (empty, or over 2,048 characters)")
    if not url.isascii() or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise _unusable(server, "a link with spaces, control or non-ASCII characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise _unusable(server, "a link that is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise _unusable(server, "a link that is not http or https")
    if not host:
        raise _unusable(server, "a link without a host")
    if parts.username is not None or parts.password is not None:
        raise _unusable(server, "a link carrying credentials")
    return url, host


def _url_request(
    server: str, key: str, params: types.ElicitRequestURLParams, config: McpServerConfig | None
) -> InputRequest:
    setting = config.url_elicitation if config is not None else "allow"
    if setting == "refuse":
        raise _refused(server, "a link to open (URL elicitation)", "url_elicitation")
    url, host = checked_url(server, params.url)
    return InputRequest(
        key=key,
        kind="url",
        message=clean_text(params.message, _MAX_MESSAGE_CHARS),
        url=url,
        host=host,
        approval="approve" if setting == "approver" else "",
    )


def _sampling_request(
    server: str, key: str, request: types.CreateMessageRequest, config: McpServerConfig | None
) -> InputRequest:
    setting = config.sampling if config is not None else "approve"
    if setting == "refuse":
        raise _refused(server, "a completion of the conversation's model (sampling)", "sampling")
    params = request.params
    if params.tools or params.tool_choice is not None:
        raise _unsupported(server, "a completion with tools (sampling with tools)")
    if not params.messages or len(params.messages) > _MAX_SAMPLING_MESSAGES:
        raise _unusable(
            server, f"a sampling request of {len(params.messages)} messages (1 to 64 allowed)"
        )
    messages: list[SampledMessage] = []
    total = 0
    for message in params.messages:
        texts: list[str] = []
        for block in message.content_as_list:
            if not isinstance(block, types.TextContent):
                raise _unsupported(server, f"a completion of {block.type} content (text only)")
            texts.append(block.text)
        text = "\n".join(texts)
        total += len(text)
        if total > MAX_SAMPLING_CHARS:
            raise _unusable(server, f"a sampling request over {MAX_SAMPLING_CHARS} characters")
        messages.append(
            SampledMessage(role=message.role, text=clean_text(text, MAX_SAMPLING_CHARS))
        )
    system = params.system_prompt
    if system is not None and len(system) > _MAX_SYSTEM_PROMPT_CHARS:
        raise _unusable(server, f"a system prompt over {_MAX_SYSTEM_PROMPT_CHARS} characters")
    stops = params.stop_sequences or []
    if len(stops) > _MAX_STOPS or any(len(s) > _MAX_STOP_CHARS for s in stops):
        raise _unusable(server, "too many or too long stop sequences")
    temperature = params.temperature
    if temperature is not None and not 0 <= temperature <= 2:
        raise _unusable(server, "a temperature outside 0 to 2")
    ask = SamplingAsk(
        messages=messages,
        system_prompt=clean_text(system, _MAX_SYSTEM_PROMPT_CHARS) if system else None,
        max_tokens=max(1, min(params.max_tokens, _MAX_SAMPLING_TOKENS)),
        temperature=temperature,
        stop_sequences=[clean_text(s, _MAX_STOP_CHARS) for s in stops],
    )
    return InputRequest(
        key=key,
        kind="sampling",
        message=clean_text(messages[-1].text, _MAX_MESSAGE_CHARS),
        sampling=ask,
        approval="approve" if setting == "approve" else "",
    )


def _form_request(
    server: str, key: str, request: types.ElicitRequest, config: McpServerConfig | None
) -> InputRequest:
    params = request.params
    if isinstance(params, types.ElicitRequestURLParams):
        return _url_request(server, key, params, config)
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


def roots_answer(config: McpServerConfig | None) -> InputAnswer:
    """The answer to a roots request: the server's configured roots (none without a configuration).

    A server whose configuration lists no roots was not told the client has
    roots (the capability is not declared); if it asks anyway it gets an
    empty list, the truth, rather than a failed call.
    """
    listed = roots_of(config).roots if config is not None else []
    return InputAnswer(
        kind="roots", roots=[ListedRoot(uri=str(root.uri), name=root.name) for root in listed]
    )


def input_required_of(
    server: str, result: types.InputRequiredResult, config: McpServerConfig | None = None
) -> InputRequired:
    """What the loop asks for one input-required result.

    Args:
        server: The server's configured name.
        result: What the server answered.
        config: The server's configuration (its `sampling` and
            `url_elicitation` settings); `None`: the defaults.

    Returns:
        The checked requests (forms, links, sampling requests), the answers
        to its roots requests (`answered`, from the configuration) and the
        exact `requestState`. `requests` is empty when every request was a
        roots request.

    Raises:
        ToolFailure: `input_request_refused` (the configuration refuses
            it), `unsupported_input_request` (a sampling request with tools
            or non-text content), `invalid_input_request`
            (no requests, too many, a bad key, schema, link, sampling
            request or state).
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
    answered: dict[str, InputAnswer] = {}
    for key, request in requests.items():
        if not key or len(key) > _MAX_KEY_CHARS or not _encodable(key):
            raise _unusable(server, "an input request key that cannot be kept")
        if isinstance(request, types.ElicitRequest):
            checked.append(_form_request(server, key, request, config))
        elif isinstance(request, types.CreateMessageRequest):
            checked.append(_sampling_request(server, key, request, config))
        else:  # a roots request (`roots/list`): the SDK's union has no other arm
            answered[key] = roots_answer(config)
    return InputRequired(server=server, requests=checked, request_state=state, answered=answered)


def input_responses_of(server: str, resume: InputResume) -> dict[str, Any]:
    """The `inputResponses` of a retried call: one `ElicitResult` per answered key.

    Args:
        server: The server's configured name (for the error).
        resume: The answers the loop collected.

    Returns:
        `ElicitResult`s by request key (`content` only with `accept`; none
        for a URL elicitation), `CreateMessageResult`s for sampling requests,
        `ListRootsResult`s for roots requests.

    Raises:
        ToolFailure: `invalid_input_response`: an answer MCP cannot carry
            (form values must be strings, numbers, booleans, lists of
            strings or null).
    """
    responses: dict[str, Any] = {}
    for key, answer in resume.responses.items():
        if answer.kind == "roots":
            responses[key] = _roots_result(server, answer)
            continue
        sampled = answer.sampled
        if answer.kind == "sampling" and sampled is not None:
            responses[key] = types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text=sampled.text),
                model=sampled.model,
                stop_reason=sampled.stop_reason,
            )
            continue
        if answer.kind == "url":
            responses[key] = types.ElicitResult(action=answer.action)
            continue
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


def _roots_result(server: str, answer: InputAnswer) -> types.ListRootsResult:
    try:
        return types.ListRootsResult(
            roots=[
                types.Root.model_validate({"uri": root.uri, "name": root.name})
                for root in answer.roots or []
            ]
        )
    except ValidationError:  # recorded from a configuration that checks them: not expected
        raise ToolFailure(
            "invalid_input_response",
            f"the roots for MCP server {server!r} cannot be sent: each must be a file:// URI",
        ) from None
