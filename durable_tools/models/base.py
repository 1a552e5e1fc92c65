"""The model interface: a transcript, tool descriptors and settings in, a turn out.

A model is any object with `async def __call__(request: ModelRequest) ->
AssistantMessage`. It is only ever called inside the `model.turn` activity, so
it may do I/O, read clocks and use the network; the activity's retry policy
applies to what it raises (see `durable_tools.models.errors` for how provider
errors map to retryable and non-retryable failures).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field, ValidatorFunctionWrapHandler, field_validator

from durable_tools.descriptor import ToolDescriptor
from durable_tools.transcript import AssistantMessage, TranscriptItem, Usage
from durable_tools.transcript_digest import CheckedTranscript

__all__ = ["Model", "ModelRequest", "Usage"]


class ModelRequest(BaseModel):
    """What a model adapter receives.

    Attributes:
        model: The model name from the agent configuration.
        instructions: System instructions.
        transcript: The reconciled transcript. Read it, do not change it,
            and copy it to keep it past the call: the model activity passes
            the worker's cached list itself, which later turns extend.
        tools: The descriptors to offer.
        turn: The model turn number (from 1).
        workflow_id: The conversation's workflow id.
        settings: Provider settings from the agent configuration
            (`AgentConfig.settings`: temperature, max_tokens, ...).
        purpose: `"turn"` (default): the conversation's model turn;
            `"summary"`: the context policy's summarizing call (its
            transcript is one user message holding the text to summarize,
            and no tools are offered); `"sampling"`: an MCP server's sampling
            request (its messages as the transcript, its system prompt as the
            instructions, no tools; `activities/sampling_activity.py`).
    """

    model: str
    instructions: str = ""
    transcript: list[TranscriptItem]
    tools: list[ToolDescriptor]
    turn: int = 1
    workflow_id: str = ""
    settings: dict[str, Any] = Field(default_factory=dict[str, Any])
    purpose: Literal["turn", "summary", "sampling"] = "turn"

    @field_validator("transcript", mode="wrap")
    @classmethod
    def _checked_once(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # A transcript the activity read was validated when it was decoded:
        # validating thousands of items again each turn made turns grow; so
        # did copying them. The activity makes a new one for each request.
        if isinstance(value, CheckedTranscript):
            return value
        return handler(value)


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
