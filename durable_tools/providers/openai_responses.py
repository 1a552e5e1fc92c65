"""OpenAI Responses API wire format (`POST /v1/responses`).

| durable-tools | Responses API |
|---|---|
| descriptor (any kind but `provider`) | `{"type": "function", name, description, …}` |
| descriptor (`provider`, `provider="openai"`) | its `provider_config` (`{"type": "web_search"}`) |
| `UserMessage` | `{"type": "message", "role": "user", "content": as_model_text()}` |
| `AssistantMessage` | its `provider_items`, an assistant `message`, `function_call` items |
| `ToolCallOutput` | `{"type": "function_call_output", "call_id": …, "output": content}` |
| instructions | the top-level `instructions` field |

Reasoning models pair each `reasoning` item with the item that follows it by
item id (`fc_…`, `msg_…`); a `function_call` sent back without its id next to
its reasoning item is rejected with HTTP 400 ("… was provided without its
required following item"). So when a response holds a `reasoning` item,
`parse_response` keeps *every* output item verbatim in `provider_items` (the
text and calls are still read into `text` and `tool_calls`), and
`render_transcript` replays them in their original order. Otherwise
`provider_items` holds only the items that are neither `message` nor
`function_call` (e.g. `web_search_call`). Provider items are OpenAI's own
shapes: send them back to OpenAI only.

Example:
    ```python
    body = {"model": "gpt-5", **render_transcript(history, instructions=system)}
    if tools := render_tools(descriptors):
        body["tools"] = tools
    turn = parse_response(response_json)
    ```
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from durable_tools.descriptor import ToolDescriptor
from durable_tools.providers._wire import (
    arguments_text,
    as_list,
    as_object,
    config_of,
    function_fields,
    object_or_none,
    openai_usage,
    require,
    require_str,
)
from durable_tools.results import ToolCall
from durable_tools.transcript import (
    AssistantMessage,
    ContextSummary,
    TranscriptItem,
    UserMessage,
)

__all__ = ["PROVIDER", "parse_response", "render_tools", "render_transcript"]

PROVIDER = "openai"
"""The `ToolDescriptor.provider` whose provider tools this API runs."""


def render_tools(descriptors: Iterable[ToolDescriptor]) -> list[dict[str, Any]]:
    """Render descriptors as Responses API `tools`.

    Function tools carry their parameters schema unchanged (`$ref`, `$defs`
    included) and always an explicit `strict`: the Responses API defaults
    `strict` to true, so a non-strict tool must say `False`. Provider tools
    run by OpenAI are sent as their `provider_config` (`{"type": name}` when
    the config is empty); provider tools of other providers are left out.

    Args:
        descriptors: The tools the model may call, in the order it sees them.

    Returns:
        The tool dicts in descriptor order; empty when there are none (leave
        `tools` out of the request then).

    Raises:
        StrictModeError: A descriptor has `strict=True` and its schema breaks an
            OpenAI strict-mode rule; the message names the tool and each rule.
    """
    tools: list[dict[str, Any]] = []
    for descriptor in descriptors:
        if descriptor.kind == "provider":
            if descriptor.provider == PROVIDER:
                tools.append(config_of(descriptor) or {"type": descriptor.name})
            continue
        tools.append({"type": "function", **function_fields(descriptor)})
    return tools


def _function_call(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
    }


def _assistant_items(message: AssistantMessage) -> list[dict[str, Any]]:
    """The input items of one assistant turn: replayed provider items first."""
    call_ids = {call.call_id for call in message.tool_calls}
    items: list[dict[str, Any]] = []
    replayed_calls: set[str] = set()
    replayed_text = False
    for raw in message.provider_items:
        kind = raw.get("type")
        if kind == "function_call":
            call_id = raw.get("call_id")
            if call_id not in call_ids or call_id in replayed_calls:
                continue  # tool_calls is the source of truth for what was asked
            replayed_calls.add(str(call_id))
        elif kind == "message":
            replayed_text = True
        items.append(copy.deepcopy(raw))
    if message.text and not replayed_text:
        items.append({"type": "message", "role": "assistant", "content": message.text})
    items.extend(_function_call(c) for c in message.tool_calls if c.call_id not in replayed_calls)
    return items


def render_transcript(
    transcript: Iterable[TranscriptItem], *, instructions: str | None = None
) -> dict[str, Any]:
    """Render a transcript as the `input` of a Responses API request.

    Items keep their transcript order, so each `function_call_output` follows
    the `function_call` it answers. An assistant turn renders as its
    `provider_items` (verbatim, in order), then its text as an assistant
    `message`, then one `function_call` per tool call, leaving out whatever
    the replayed provider items already carry (see the module docstring).

    Args:
        transcript: The (reconciled) transcript.
        instructions: System instructions for the top-level `instructions`
            field; `None` or empty sends none.

    Returns:
        `{"input": [...]}` plus `"instructions"` when given, ready to merge
        into the request body.
    """
    items: list[dict[str, Any]] = []
    for item in transcript:
        if isinstance(item, ContextSummary):
            items.append({"type": "message", "role": "user", "content": item.as_user_text()})
        elif isinstance(item, UserMessage):
            items.append({"type": "message", "role": "user", "content": item.as_model_text()})
        elif isinstance(item, AssistantMessage):
            items.extend(_assistant_items(item))
        else:
            items.append(
                {"type": "function_call_output", "call_id": item.call_id, "output": item.content}
            )
    body: dict[str, Any] = {"input": items}
    if instructions:
        body["instructions"] = instructions
    return body


def _message_text(item: Mapping[str, Any], where: str) -> tuple[str, bool]:
    """The text of a `message` item, and whether any part of it is a refusal."""
    parts = as_list(item.get("content") or [], f"{where}.content")
    texts: list[str] = []
    refused = False
    for j, raw in enumerate(parts):
        part = as_object(raw, f"{where}.content[{j}]")
        if part.get("type") == "output_text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
            refused = True
    return "".join(texts), refused


def _stop_reason_of(response: Mapping[str, Any], *, refused: bool, calls: bool) -> str:
    status = response.get("status")
    if status == "incomplete":
        details = object_or_none(response.get("incomplete_details"))
        reason = details.get("reason") if details is not None else None
        if reason == "max_output_tokens":
            return "max_tokens"
        return reason if isinstance(reason, str) and reason else "incomplete"
    if refused:
        return "refusal"
    if calls:
        return "tool_calls"
    if status == "completed":
        return "end_turn"
    return status if isinstance(status, str) else ""


def parse_response(response: Mapping[str, Any]) -> AssistantMessage:
    """Read a Responses API response (`output` items) as one model turn.

    `message` items give the text (`output_text` parts, and `refusal` parts
    so a refusal is not silent; several messages are joined with a blank
    line); `function_call` items give the tool calls, their `arguments` kept
    exactly as sent even when not valid JSON (the executor answers those with
    an `input_validation_error`). Every other item (`web_search_call`,
    `reasoning`, `file_search_call`, …) is kept verbatim in `provider_items`,
    and with a `reasoning` item present every item is (see the module
    docstring).

    `usage` is read from `usage` (`input_tokens`, `output_tokens`,
    `input_tokens_details.cached_tokens`; `None` when the body has none).
    `stop_reason` comes from `status`: `incomplete` gives
    `incomplete_details.reason` (`max_output_tokens` → `"max_tokens"`,
    others such as `content_filter` as sent); otherwise a refusal part gives
    `"refusal"`, a function call `"tool_calls"`, `completed` `"end_turn"`,
    and any other status is kept as sent.

    Args:
        response: The decoded JSON body of a `response` object.

    Returns:
        An `AssistantMessage` with the usage and stop reason.

    Raises:
        ValueError: The response has no `output` array, an item is not an
            object, or a `function_call` lacks `call_id` or `name`.
    """
    output = as_list(require(response, "output", "response"), "response.output")
    items = [as_object(raw, f"output[{i}]") for i, raw in enumerate(output)]
    keep_all = any(item.get("type") == "reasoning" for item in items)
    texts: list[str] = []
    calls: list[ToolCall] = []
    provider_items: list[dict[str, Any]] = []
    refused = False
    for i, item in enumerate(items):
        where = f"output[{i}]"
        kind = item.get("type")
        if kind == "message":
            text, refusal = _message_text(item, where)
            refused = refused or refusal
            if text:
                texts.append(text)
        elif kind == "function_call":
            calls.append(
                ToolCall(
                    call_id=require_str(item, "call_id", where),
                    name=require_str(item, "name", where),
                    arguments=arguments_text(item.get("arguments")),
                )
            )
        if keep_all or kind not in ("message", "function_call"):
            provider_items.append(item)
    return AssistantMessage(
        text="\n\n".join(texts),
        tool_calls=tuple(calls),
        provider_items=tuple(provider_items),
        usage=openai_usage(
            response,
            input_key="input_tokens",
            output_key="output_tokens",
            details_key="input_tokens_details",
        ),
        stop_reason=_stop_reason_of(response, refused=refused, calls=bool(calls)),
    )
