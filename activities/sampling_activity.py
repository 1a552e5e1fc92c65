"""The activity `model.sample-v1`: an MCP server's sampling request, answered by the model.

A server that asks to sample (an input-required result carrying a
`sampling/createMessage` request, MCP 2026-07-28) is answered by the
conversation's own model, with the agent's settings, through this activity:
the loop runs it between the call's rounds (`workflows/input_sampling.py`),
records its `SampledReply` (so a replay reads it, never calls the model
again), adds its usage to the conversation's totals and retries the call
with it.

What the model sees is only the server's request: its messages as the
transcript, its system prompt as the instructions (never the agent's, which
stay private to the conversation), no tools. The agent's settings apply,
except those that only make sense with tools or an output format; the
server's `maxTokens`, temperature and stop sequences are given as
`max_tokens`, `temperature` and `stop`, unless the agent's settings fix them.

The request's messages are in this activity's input (history), bounded by
the worker's checks (`durable_tools/mcp/input_required.py`: 64 Ki
characters); the reply's text is cut at `MAX_SAMPLED_CHARS`.
"""

from __future__ import annotations

from typing import Any, Final, cast

from temporalio import activity

from durable_tools.activities.model_activity import ModelActivity, traced_model_call
from durable_tools.conversation import AgentConfig
from durable_tools.handler_input import clean_text
from durable_tools.input_requests import SAMPLE_ACTIVITY, SampledReply, SampleRequest
from durable_tools.models.base import ModelRequest
from durable_tools.transcript import AssistantMessage, TranscriptItem, UserMessage

__all__ = ["MAX_SAMPLED_CHARS", "SamplingActivity"]

MAX_SAMPLED_CHARS: Final[int] = 64 * 1024
"""Characters of a completion sent back to the server (and recorded in history)."""

# Settings that only make sense with tools or an output format.
_NOT_FOR_SAMPLING: Final = frozenset({"tool_choice", "parallel_tool_calls", "response_format"})


class _AgentRef:
    """What `ModelActivity._agent_config` reads of a request (a `ModelTurnRequest`'s fields)."""

    def __init__(self, request: SampleRequest) -> None:
        self.workflow_id = request.workflow_id
        self.run_id = request.run_id
        self.agent_name = request.agent_name
        self.agent: AgentConfig | None = (
            AgentConfig.model_validate(request.agent) if request.agent is not None else None
        )


class SamplingActivity(ModelActivity):
    """The `model.sample-v1` activity of `AgentActivities`."""

    @activity.defn(name=SAMPLE_ACTIVITY)
    async def model_sample(self, request: SampleRequest) -> SampledReply:
        """Answer one sampling request with the conversation's model.

        Args:
            request: The conversation, its agent (by name) and the request.

        Returns:
            The completion's text (at most `MAX_SAMPLED_CHARS`), the model's
            name, why it stopped (`endTurn` or `maxTokens`) and its usage.

        Raises:
            ApplicationError: As `model.turn` does: the agent is refused,
                the model is unknown, or the provider failed (retried by the
                loop's policy when the provider says so).
        """
        agent = self._resolve(await self._agent_config(cast(Any, _AgentRef(request))))
        ask = request.ask
        transcript: list[TranscriptItem] = [
            UserMessage(text=m.text) if m.role == "user" else AssistantMessage(text=m.text)
            for m in ask.messages
        ]
        settings: dict[str, Any] = {
            k: v for k, v in agent.settings.items() if k not in _NOT_FOR_SAMPLING
        }
        settings.setdefault("max_tokens", ask.max_tokens)
        if ask.temperature is not None:
            settings.setdefault("temperature", ask.temperature)
        if ask.stop_sequences:
            settings.setdefault("stop", list(ask.stop_sequences))
        message = await traced_model_call(
            self._model(agent.model),
            ModelRequest(
                model=agent.model,
                instructions=ask.system_prompt or "",
                transcript=transcript,
                tools=[],
                turn=request.turn,
                workflow_id=request.workflow_id,
                settings=settings,
                purpose="sampling",
            ),
        )
        activity.logger.info(
            "MCP server %r sampled %s for call %r (%s tokens out)",
            request.server,
            agent.model,
            request.call_id,
            message.usage.output_tokens if message.usage is not None else "?",
        )
        return SampledReply(
            text=clean_text(message.text, MAX_SAMPLED_CHARS),
            model=agent.model,
            stop_reason="maxTokens" if message.stop_reason == "max_tokens" else "endTurn",
            usage=message.usage,
        )
