"""Bare Temporal doing a conversation's two activities per turn: the baseline.

A plain workflow calls a model activity (`model.turn`) and then a tool activity
(`tool.echo`) for each turn, with the same model and the same tool as the
durable-tools conversation in `long_conversation.py`, and continues as new
when the server suggests it (carrying only the turn number). It keeps no
transcript and plans nothing: what it costs is what Temporal costs for two
sequential activities per turn. Its own module so the workflow sandbox can
import it (`python bench/long_conversation.py` puts bench/ on the path).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from durable_tools.models.base import Model, ModelRequest
    from durable_tools.results import ToolCall
    from durable_tools.transcript import AssistantMessage

__all__ = ["BareActivities", "BareConversation", "BareInput", "BareTurn"]


class BareInput(BaseModel):
    """Input of a bare conversation run: the turns in all, the turns already done.

    `parallel`: a turn's calls run at once (as the durable loop runs them), not
    one after the other (`scale.py`'s fan-out turn).
    """

    turns: int
    done: int = 0
    parallel: bool = False


class BareTurn(BaseModel):
    """Input of the bare model activity."""

    workflow_id: str
    turn: int


class BareActivities:
    """The model activity (the model called with an empty transcript) and `echo`."""

    def __init__(self, model: Model) -> None:
        self.model = model

    @activity.defn(name="model.turn")
    async def model_turn(self, turn: BareTurn) -> AssistantMessage:
        """One model request."""
        request = ModelRequest(
            model="looping", transcript=[], tools=[], turn=turn.turn, workflow_id=turn.workflow_id
        )
        return await self.model(request)

    @activity.defn(name="tool.echo")
    async def echo(self, call: ToolCall) -> str:
        """The same output as the conversation's `echo` tool."""
        args = BareEchoArgs.model_validate_json(call.arguments)
        return f"{args.turn}:" + "y" * args.size


class BareEchoArgs(BaseModel):
    """`echo`'s arguments."""

    size: int
    turn: int


@workflow.defn(name="BareConversation")
class BareConversation:
    """Model turn, then each tool call, until `turns` model turns; then one last turn."""

    @workflow.run
    async def run(self, input: BareInput) -> int:
        """Run turns, continuing as new when the server suggests it."""
        done = input.done
        while done <= input.turns:  # the last turn answers "done"
            if done > input.done and workflow.info().is_continue_as_new_suggested():
                workflow.continue_as_new(input.model_copy(update={"done": done}))
            message = await workflow.execute_activity(
                "model.turn",
                BareTurn(workflow_id=workflow.info().workflow_id, turn=done + 1),
                result_type=AssistantMessage,
                start_to_close_timeout=timedelta(seconds=60),
            )
            done += 1
            calls = [
                workflow.execute_activity(
                    "tool.echo", call, result_type=str, start_to_close_timeout=timedelta(seconds=60)
                )
                for call in message.tool_calls
            ]
            if input.parallel:
                await asyncio.gather(*calls)
            else:
                for call in calls:
                    await call
        return done
