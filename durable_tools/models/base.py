"""The model interface: a transcript, tool descriptors and settings in, a turn out.

A model is any object with `async def __call__(request: ModelRequest) ->
AssistantMessage`. It is only ever called inside the `model.turn` activity, so
it may do I/O, read clocks and use the network; the activity's retry policy
applies to what it raises (see `durable_tools.models.errors` for how provider
errors map to retryable and non-retryable failures).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from durable_tools.conversation import ModelRequest
from durable_tools.transcript import AssistantMessage, Usage

__all__ = ["Model", "ModelRequest", "Usage"]


@runtime_checkable
class Model(Protocol):
    """A model: `await model(request)` returns one turn.

    The request carries the model name, the instructions, the reconciled
    transcript, the tool descriptors and the provider settings; the returned
    `AssistantMessage` carries the text, the tool calls, the usage and the
    stop reason.
    """

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Answer one model request with one assistant turn."""
        ...
