r"""Making a model's turn safe to record, at the model activity's boundary.

A model's output is untrusted text: provider JSON decoded by `json.loads`
can hold unpaired UTF-16 surrogates (`"\ud800"`), which cannot be encoded as
UTF-8, so Temporal's JSON payload converter cannot serialize the activity's
result (the activity would be retried forever, and the model would never see
a Failure). Names and call ids can also hold control characters (NUL) or be
10 KB long.

`safe_turn` returns a turn in which every string is UTF-8 encodable, and the
problems it found, one per tool call it had to change. The model activity
answers each such call with an `input_validation_error` Failure naming the
problem, so the model sees what was wrong and the conversation goes on:

- a tool name or call id with an unpaired surrogate or a control character,
  or longer than `MAX_NAME_CHARS`: those characters are escaped (`\ud800`,
  `\x00`) and the value cut; the call is answered `input_validation_error`;
- arguments with an unpaired surrogate: it is replaced by U+FFFD; the call is
  answered `input_validation_error`;
- text, the stop reason, provider items (keys and values): unpaired
  surrogates are replaced by U+FFFD (these are not calls).

Other characters (right-to-left marks, emoji, NUL inside JSON arguments) are
valid text and pass unchanged; the planner answers a name that names no tool
or arguments that are not valid JSON as it always does.
"""

from __future__ import annotations

import json
from typing import Any, Final, cast

from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage

__all__ = ["MAX_NAME_CHARS", "bound_arguments", "safe_text", "safe_turn"]

MAX_NAME_CHARS: Final[int] = 256
"""Longest tool name or call id kept, in characters. Tool names are at most 64
characters (`TOOL_NAME_PATTERN`); provider call ids are about 40."""

_PREVIEW_CHARS: Final[int] = 60


def _is_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udfff"


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def safe_text(text: str) -> str:
    """`text` with every unpaired UTF-16 surrogate replaced by U+FFFD.

    Args:
        text: Any string.

    Returns:
        A string that encodes as UTF-8 (`text` itself when it already does).
    """
    if _encodable(text):
        return text
    return "".join("\ufffd" if _is_surrogate(c) else c for c in text)


def _escaped(text: str) -> str:
    r"""Surrogates and control characters as Python escapes (`\ud800`, `\x00`)."""
    out: list[str] = []
    for char in text:
        if _is_surrogate(char) or not char.isprintable() and char != " ":
            out.append(repr(char)[1:-1])
        else:
            out.append(char)
    return "".join(out)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _name_problem(value: str, what: str) -> str | None:
    """Why a tool name or call id cannot be kept as it is (`None`: it can)."""
    for index, char in enumerate(value):
        if _is_surrogate(char):
            return (
                f"the {what} contains an unpaired UTF-16 surrogate (U+{ord(char):04X}) "
                f"at character {index}"
            )
        if ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0:
            code = f"U+{ord(char):04X}"
            return f"the {what} contains the control character {code} at character {index}"
    if len(value) > MAX_NAME_CHARS:
        return f"the {what} is {len(value)} characters long, over the limit of {MAX_NAME_CHARS}"
    return None


def _safe_name(value: str) -> str:
    return _cut(_escaped(value), MAX_NAME_CHARS)


def _safe_json(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        items = cast(dict[Any, Any], value).items()
        return {safe_text(k) if isinstance(k, str) else k: _safe_json(v) for k, v in items}
    if isinstance(value, list | tuple):
        return [_safe_json(v) for v in cast(list[Any], value)]
    return value


def _safe_call(call: ToolCall) -> tuple[ToolCall, str | None]:
    problems: list[str] = []
    update: dict[str, str] = {}
    for field, what in (("name", "tool name"), ("call_id", "call id")):
        value: str = getattr(call, field)
        problem = _name_problem(value, what)
        if problem is not None:
            problems.append(problem)
            update[field] = _safe_name(value)
    if not _encodable(call.arguments):
        problems.append(
            "the arguments contain an unpaired UTF-16 surrogate (e.g. \\ud800), "
            "which is not valid text"
        )
        update["arguments"] = safe_text(call.arguments)
    if not problems:
        return call, None
    shown = _cut(_escaped(call.name), _PREVIEW_CHARS)
    reason = f"tool call {shown!r} cannot be run: {'; '.join(problems)}; send valid text"
    return call.model_copy(update=update), reason


def safe_turn(message: AssistantMessage) -> tuple[AssistantMessage, list[str | None]]:
    """A copy of `message` whose every string is UTF-8 encodable, and its calls' problems.

    Args:
        message: The turn a model adapter returned.

    Returns:
        The safe turn (`message` itself when nothing changed) and, for each of
        its tool calls in order, the reason it must be answered with an
        `input_validation_error` Failure, or `None`.
    """
    calls: list[ToolCall] = []
    problems: list[str | None] = []
    for call in message.tool_calls:
        safe, problem = _safe_call(call)
        calls.append(safe)
        problems.append(problem)
    update: dict[str, Any] = {}
    if any(p is not None for p in problems):
        update["tool_calls"] = tuple(calls)
    text, stop_reason = safe_text(message.text), safe_text(message.stop_reason)
    if text is not message.text:
        update["text"] = text
    if stop_reason is not message.stop_reason:
        update["stop_reason"] = stop_reason
    if message.provider_items:
        items = tuple(cast(dict[str, Any], _safe_json(i)) for i in message.provider_items)
        if items != message.provider_items:
            update["provider_items"] = items
    return (message.model_copy(update=update) if update else message), problems


def bound_arguments(message: AssistantMessage, limit: int) -> AssistantMessage:
    """Keep a turn's argument text under `limit` bytes by blanking the largest arguments.

    The limit is Temporal's payload limit (`PAYLOAD_BUDGET_BYTES`), or the
    worker's maximum payload size with external storage.

    A blanked call keeps its id and name; its arguments become a JSON string
    the executor rejects as `input_validation_error` with the original size.
    """
    sizes = sorted(
        ((len(c.arguments.encode()), i) for i, c in enumerate(message.tool_calls)), reverse=True
    )
    total = sum(s for s, _ in sizes)
    if total <= limit:
        return message
    calls = list(message.tool_calls)
    for size, i in sizes:
        if total <= limit:
            break
        marker = json.dumps(f"arguments of {size} bytes dropped: over the turn limit")
        calls[i] = calls[i].model_copy(update={"arguments": marker})
        total -= size
    return message.model_copy(update={"tool_calls": tuple(calls)})
