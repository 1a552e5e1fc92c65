"""Test helpers: a scripted model adapter that needs no provider.

`ScriptedModel` plays the model's side of a conversation from a function of
the request (or a fixed list of turns), so tests and demos exercise the real
loop, the real Temporal server and the real tools without a paid API.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from durable_tools.conversation import ModelRequest
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage

__all__ = ["ModelAdapter", "ScriptedModel", "call", "last_user_text", "outputs_since_last_turn"]

ModelAdapter = Callable[[ModelRequest], Awaitable[AssistantMessage]]
"""A model: `await adapter(request)` returns the model's turn."""


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    """Build a tool call with JSON-encoded keyword arguments.

    Example:
        `call("c1", "get_weather", city="Paris")`
    """
    return ToolCall(call_id=call_id, name=name, arguments=json.dumps(arguments))


def last_user_text(request: ModelRequest) -> str:
    """The text of the latest user message in the request's transcript ("" if none)."""
    for item in reversed(request.transcript):
        if isinstance(item, UserMessage):
            return item.text
    return ""


def outputs_since_last_turn(request: ModelRequest) -> list[ToolCallOutput]:
    """Tool outputs that follow the latest assistant message."""
    found: list[ToolCallOutput] = []
    for item in reversed(request.transcript):
        if isinstance(item, ToolCallOutput):
            found.append(item)
        elif isinstance(item, AssistantMessage):
            break
    return list(reversed(found))


class ScriptedModel:
    """A model adapter driven by a script instead of a provider.

    Args:
        script: Either a function `script(request) -> AssistantMessage`
            (sync or async), or a sequence of turns played in order; once the
            sequence is exhausted the model answers with text `"done"`.

    Example:
        ```python
        model = ScriptedModel([
            AssistantMessage(tool_calls=(call("c1", "get_weather", city="Paris"),)),
            AssistantMessage(text="It is sunny."),
        ])
        ```
    """

    def __init__(
        self,
        script: Callable[[ModelRequest], AssistantMessage | Awaitable[AssistantMessage]]
        | Sequence[AssistantMessage],
    ) -> None:
        self._script = script
        self.requests: list[ModelRequest] = []

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Answer one model request (records it in `requests`)."""
        self.requests.append(request)
        if callable(self._script):
            result = self._script(request)
            if isinstance(result, AssistantMessage):
                return result
            return await result
        turns = list(self._script)
        index = request.turn - 1
        return turns[index] if 0 <= index < len(turns) else AssistantMessage(text="done")
