"""OpenAI Chat Completions wire format (`POST /v1/chat/completions`).

| durable-tools | Chat Completions |
|---|---|
| descriptor (any kind but `provider`) | `{"type": "function", "function": {…}}` |
| descriptor (`provider`) | left out: Chat Completions has no provider-executed tools in `tools` |
| `UserMessage` | `{"role": "user", "content": as_model_text()}` (an operator's note marked) |
| `AssistantMessage` | `{"role": "assistant", "content": text or "", "tool_calls": [...]}` |
| `ToolCallOutput` | `{"role": "tool", "tool_call_id": call_id, "content": content}` |
| instructions | a leading `{"role": "system", "content": instructions}` |

A function is `{name, description, parameters, strict}`. Failures reach the
model as the error JSON in `content` (`{"error": kind, "reason": …}`); Chat
Completions has no error flag on tool messages.

An assistant message that only calls tools is sent with `"content": ""`,
never `null`: OpenAI accepts both, but OpenAI-compatible servers render the
messages through the model's chat template, and templates that check the
content's type (Gemma 3's raises "Invalid content type") fail on `null`:
llama-cpp-python's server answers such a request with HTTP 500.

Example:
    ```python
    body = {"model": "gpt-4.1", **render_transcript(history, instructions=system)}
    if tools := render_tools(descriptors):
        body["tools"] = tools  # OpenAI rejects an empty `tools` array
    turn = parse_response(completion_json)
    ```
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from durable_tools.descriptor import ToolDescriptor
from durable_tools.providers._wire import (
    arguments_text,
    as_list,
    as_object,
    function_fields,
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

__all__ = ["parse_response", "render_tools", "render_transcript"]


def render_tools(descriptors: Iterable[ToolDescriptor]) -> list[dict[str, Any]]:
    """Render descriptors as Chat Completions `tools`.

    Every descriptor except `provider` ones becomes a function tool; its
    parameters schema is copied unchanged (`$ref`, `$defs` included) and
    `strict` is always sent, `False` included, so the request says what it means.

    Args:
        descriptors: The tools the model may call, in the order it sees them.

    Returns:
        A list of `{"type": "function", "function": {...}}` dicts; empty when
        there is no function tool (leave `tools` out of the request then).

    Raises:
        StrictModeError: A descriptor has `strict=True` and its schema breaks an
            OpenAI strict-mode rule; the message names the tool and each rule.
    """
    tools: list[dict[str, Any]] = []
    for descriptor in descriptors:
        if descriptor.kind == "provider":
            continue
        tools.append({"type": "function", "function": function_fields(descriptor)})
    return tools


def render_transcript(
    transcript: Iterable[TranscriptItem], *, instructions: str | None = None
) -> dict[str, Any]:
    """Render a transcript as the `messages` of a Chat Completions request.

    Items keep their transcript order, so each tool output follows the
    assistant message that made its call. An assistant message with no text,
    calls or provider items is left out. `provider_items` are not sent: Chat
    Completions has no provider-executed tool items.

    Args:
        transcript: The (reconciled) transcript.
        instructions: System instructions, sent as a leading `system` message;
            `None` or empty sends none.

    Returns:
        `{"messages": [...]}`, ready to merge into the request body.
    """
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for item in transcript:
        if isinstance(item, ContextSummary):
            messages.append({"role": "user", "content": item.as_user_text()})
        elif isinstance(item, UserMessage):
            messages.append({"role": "user", "content": item.as_model_text()})
        elif isinstance(item, AssistantMessage):
            if not (item.text or item.tool_calls):
                continue
            # "" rather than null: see the module docstring (chat templates).
            message: dict[str, Any] = {"role": "assistant", "content": item.text}
            if item.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in item.tool_calls
                ]
            messages.append(message)
        else:
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.content})
    return {"messages": messages}


# `finish_reason` values with a name in `AssistantMessage.stop_reason`; others
# (`content_filter`, a compatible server's own) are kept as sent.
_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "max_tokens",
}


def _stop_reason_of(choice: Mapping[str, Any], *, refused: bool, calls: bool) -> str:
    finish = choice.get("finish_reason")
    if refused:
        return "refusal"
    if not isinstance(finish, str):
        return ""
    if finish == "stop" and calls:
        return "tool_calls"  # some compatible servers say "stop" for a tool-call turn
    return _STOP_REASONS.get(finish, finish)


def _is_refusal(message: Mapping[str, Any]) -> bool:
    refusal = message.get("refusal")
    return isinstance(refusal, str) and bool(refusal) and _text_of(message) == refusal


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        # Not what OpenAI sends, but some compatible servers answer with parts.
        parts = [as_object(p, "choices[0].message.content[]") for p in as_list(content, "content")]
        text = "".join(p["text"] for p in parts if isinstance(p.get("text"), str))
    else:
        text = ""
    refusal = message.get("refusal")
    if not text and isinstance(refusal, str):
        return refusal
    return text


def parse_response(response: Mapping[str, Any]) -> AssistantMessage:
    """Read a Chat Completions response (`choices[0].message`) as one model turn.

    Argument strings are kept exactly as sent, even when they are not valid
    JSON: the executor answers those calls with an `input_validation_error`.
    A refusal (`message.refusal`) becomes the text when there is no content.
    Tool calls of a type other than `function` are kept in `provider_items`.

    `usage` is read from `usage` (`prompt_tokens`, `completion_tokens`,
    `prompt_tokens_details.cached_tokens`; `None` when the body has none).
    `stop_reason` is `finish_reason` normalized: `stop` → `"end_turn"` (or
    `"tool_calls"` when the message has calls: some compatible servers say
    `stop` then), `tool_calls` → `"tool_calls"`, `length` → `"max_tokens"`,
    a refusal → `"refusal"`; any other value as sent, `""` when missing.

    Args:
        response: The decoded JSON body of a `chat.completion`.

    Returns:
        An `AssistantMessage` with the text, the tool calls in order, the
        usage and the stop reason.

    Raises:
        ValueError: The response has no `choices`, or a message or tool call
            lacks a required key (`id`, `function.name`).
    """
    choices = as_list(require(response, "choices", "chat completion"), "choices")
    if not choices:
        raise ValueError("chat completion: 'choices' is empty")
    choice = as_object(choices[0], "choices[0]")
    message = as_object(require(choice, "message", "choices[0]"), "choices[0].message")
    calls: list[ToolCall] = []
    others: list[dict[str, Any]] = []
    raw_calls: Any = message.get("tool_calls") or []
    for i, raw in enumerate(as_list(raw_calls, "choices[0].message.tool_calls")):
        where = f"choices[0].message.tool_calls[{i}]"
        entry = as_object(raw, where)
        if entry.get("type", "function") != "function":
            others.append(entry)
            continue
        function = as_object(require(entry, "function", where), f"{where}.function")
        calls.append(
            ToolCall(
                call_id=require_str(entry, "id", where),
                name=require_str(function, "name", f"{where}.function"),
                arguments=arguments_text(function.get("arguments")),
            )
        )
    return AssistantMessage(
        text=_text_of(message),
        tool_calls=tuple(calls),
        provider_items=tuple(others),
        usage=openai_usage(
            response,
            input_key="prompt_tokens",
            output_key="completion_tokens",
            details_key="prompt_tokens_details",
        ),
        stop_reason=_stop_reason_of(choice, refused=_is_refusal(message), calls=bool(calls)),
    )
