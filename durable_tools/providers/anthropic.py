"""Anthropic Messages API wire format (`POST /v1/messages`).

| durable-tools | Messages API |
|---|---|
| descriptor (`local`, `signal`, `interaction`) | `{name, description, input_schema}` |
| descriptor (`provider`, `provider="anthropic"`) | its `provider_config`, e.g. a server tool |
| `UserMessage` | a `user` message, a `text` block: `as_model_text()` (operator notes marked) |
| `AssistantMessage` | an `assistant` message: provider items, `text`, `tool_use` blocks |
| `ToolCallOutput` | a `tool_result` block `{tool_use_id, content, is_error}` in a `user` message |
| instructions | the top-level `system` field |

Consecutive user-side items (tool outputs, then any user message) are merged
into one `user` message, as Anthropic requires: all `tool_result` blocks for a
turn in the message right after it, before any text. `provider_items` hold the
blocks Anthropic produced that are neither `text` nor `tool_use`
(`server_tool_use`, `web_search_tool_result`, `thinking`, …); they are sent
back first in their assistant message, since thinking blocks must lead it.
They are Anthropic's own shapes: send them back to Anthropic only.

Example:
    ```python
    body = {"model": "claude-sonnet-4-5", "max_tokens": 4096,
            **render_transcript(history, instructions=system)}
    if tools := render_tools(descriptors):
        body["tools"] = tools
    turn = parse_response(message_json)
    ```
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import ConfigurationError
from durable_tools.providers._wire import (
    as_list,
    as_object,
    config_of,
    count,
    dump_arguments,
    load_object,
    object_or_none,
    parameters_of,
    require,
    require_str,
)
from durable_tools.results import ToolCall
from durable_tools.transcript import (
    AssistantMessage,
    ContextSummary,
    TranscriptItem,
    Usage,
    UserMessage,
)

__all__ = ["PROVIDER", "parse_response", "render_tools", "render_transcript"]

PROVIDER = "anthropic"
"""The `ToolDescriptor.provider` whose provider tools this API runs."""


def render_tools(descriptors: Iterable[ToolDescriptor]) -> list[dict[str, Any]]:
    """Render descriptors as Messages API `tools`.

    Function tools carry their parameters schema unchanged as `input_schema`
    (`$ref`, `$defs` included); `strict` is not sent. Provider tools run by
    Anthropic are sent as their `provider_config`; provider tools of other
    providers are left out.

    Args:
        descriptors: The tools the model may call, in the order it sees them.

    Returns:
        The tool dicts in descriptor order; empty when there are none.

    Raises:
        ConfigurationError: An Anthropic provider tool has no `provider_config`.
            Anthropic server tools are versioned (`web_search_20250305`), so
            there is no default to guess.
    """
    tools: list[dict[str, Any]] = []
    for descriptor in descriptors:
        if descriptor.kind == "provider":
            if descriptor.provider != PROVIDER:
                continue
            config = config_of(descriptor)
            if config is None:
                raise ConfigurationError(
                    f"provider tool {descriptor.name!r} has no config; give the Anthropic "
                    "server tool object, e.g. provider_tool('web_search', provider='anthropic', "
                    "config={'type': 'web_search_20250305', 'name': 'web_search'})"
                )
            tools.append(config)
            continue
        tool: dict[str, Any] = {"name": descriptor.name}
        if descriptor.description:
            tool["description"] = descriptor.description
        tool["input_schema"] = parameters_of(descriptor)
        tools.append(tool)
    return tools


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks = [copy.deepcopy(item) for item in message.provider_items]
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        # `input` must be an object. A call whose arguments are not one was
        # answered with an input_validation_error; send it with `{}`.
        arguments = load_object(call.arguments)
        blocks.append(
            {"type": "tool_use", "id": call.call_id, "name": call.name, "input": arguments or {}}
        )
    return blocks


def render_transcript(
    transcript: Iterable[TranscriptItem], *, instructions: str | None = None
) -> dict[str, Any]:
    """Render a transcript as the `messages` (and `system`) of a Messages request.

    Items keep their transcript order. Each tool output becomes a `tool_result`
    block with `is_error` set for failures (the content is the error JSON);
    consecutive tool outputs, and a user message right after them, share one
    `user` message. An assistant message with no text, calls or provider items
    is left out (Anthropic rejects empty content).

    Args:
        transcript: The (reconciled) transcript.
        instructions: System instructions for the top-level `system` field;
            `None` or empty sends none.

    Returns:
        `{"messages": [...]}` plus `"system"` when given, ready to merge into
        the request body.
    """
    messages: list[dict[str, Any]] = []

    def user_blocks() -> list[dict[str, Any]]:
        if messages and messages[-1]["role"] == "user":
            content: list[dict[str, Any]] = messages[-1]["content"]
            return content
        fresh: list[dict[str, Any]] = []
        messages.append({"role": "user", "content": fresh})
        return fresh

    for item in transcript:
        if isinstance(item, ContextSummary):
            user_blocks().append({"type": "text", "text": item.as_user_text()})
        elif isinstance(item, UserMessage):
            user_blocks().append({"type": "text", "text": item.as_model_text()})
        elif isinstance(item, AssistantMessage):
            blocks = _assistant_blocks(item)
            if blocks:
                messages.append({"role": "assistant", "content": blocks})
        else:
            user_blocks().append(
                {
                    "type": "tool_result",
                    "tool_use_id": item.call_id,
                    "content": item.content,
                    "is_error": item.is_error,
                }
            )
    body: dict[str, Any] = {"messages": messages}
    if instructions:
        body["system"] = instructions
    return body


# Anthropic `stop_reason`s with another name in `AssistantMessage.stop_reason`;
# the rest (`end_turn`, `max_tokens`, `stop_sequence`, `refusal`, `pause_turn`,
# ...) already use the normalized names or are kept as sent.
_STOP_REASONS = {"tool_use": "tool_calls"}


def _usage_of(response: Mapping[str, Any]) -> Usage | None:
    usage = object_or_none(response.get("usage"))
    if usage is None:
        return None
    # Anthropic counts cache reads and cache writes apart from `input_tokens`;
    # `Usage.input_tokens` is the whole prompt.
    cached = count(usage, "cache_read_input_tokens")
    written = count(usage, "cache_creation_input_tokens")
    return Usage(
        input_tokens=count(usage, "input_tokens") + cached + written,
        output_tokens=count(usage, "output_tokens"),
        cached_input_tokens=cached,
    )


def _stop_reason_of(response: Mapping[str, Any]) -> str:
    reason = response.get("stop_reason")
    if not isinstance(reason, str):
        return ""
    return _STOP_REASONS.get(reason, reason)


def parse_response(response: Mapping[str, Any]) -> AssistantMessage:
    """Read a Messages API response (`content` blocks) as one model turn.

    Adjacent `text` blocks are concatenated (Anthropic splits cited text into
    several blocks), and runs of text separated by other blocks are joined
    with a blank line; each `tool_use` block becomes a `ToolCall` whose `arguments` is
    `json.dumps(input)`; every other block (`server_tool_use`,
    `web_search_tool_result`, `thinking`, `redacted_thinking`, …) is kept
    verbatim in `provider_items`. An empty `content` (e.g. `stop_reason`
    `max_tokens` or `refusal`) gives an empty message.

    `usage.input_tokens` is the whole prompt: Anthropic's `input_tokens` plus
    `cache_read_input_tokens` and `cache_creation_input_tokens`;
    `cached_input_tokens` is `cache_read_input_tokens` (`usage` is `None`
    when the body has none). `stop_reason` is Anthropic's, with `tool_use`
    renamed `"tool_calls"` (`end_turn`, `max_tokens`, `stop_sequence`,
    `refusal` already carry the normalized names; others, e.g. `pause_turn`,
    are kept as sent).

    Args:
        response: The decoded JSON body of a `message`.

    Returns:
        An `AssistantMessage` with the usage and stop reason.

    Raises:
        ValueError: The response has no `content` array, a block is not an
            object, or a `tool_use` block lacks `id` or `name`.
    """
    content = as_list(require(response, "content", "message"), "message.content")
    paragraphs: list[list[str]] = []
    calls: list[ToolCall] = []
    provider_items: list[dict[str, Any]] = []
    follows_text = False
    for i, raw in enumerate(content):
        where = f"content[{i}]"
        block = as_object(raw, where)
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if not follows_text:
                paragraphs.append([])
            paragraphs[-1].append(text if isinstance(text, str) else "")
            follows_text = True
            continue
        follows_text = False
        if kind == "tool_use":
            calls.append(
                ToolCall(
                    call_id=require_str(block, "id", where),
                    name=require_str(block, "name", where),
                    arguments=dump_arguments(block.get("input", {})),
                )
            )
        else:
            provider_items.append(block)
    return AssistantMessage(
        text="\n\n".join(filter(None, ("".join(p) for p in paragraphs))),
        tool_calls=tuple(calls),
        provider_items=tuple(provider_items),
        usage=_usage_of(response),
        stop_reason=_stop_reason_of(response),
    )
