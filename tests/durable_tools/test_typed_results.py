"""Typed results: `finish_tool(output_type=...)` gives the schema, invalid outputs go back
to the model as `input_validation_error`, `result(output_type=...)` returns the type."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, field_validator
from temporalio.testing import WorkflowEnvironment

from durable_tools import ConfigurationError, NoFinalOutput, Toolkit
from durable_tools.conversation import ConversationOptions
from durable_tools.signals import finish_tool
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call
from durable_tools.transcript import ToolCallOutput


class Line(BaseModel):
    sku: str
    quantity: int


class Refund(BaseModel):
    order_id: str
    amount_cents: int
    lines: list[Line] = []

    @field_validator("amount_cents")
    @classmethod
    def positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be positive")
        return value


kit = Toolkit(finish_tool(output_type=Refund))


def test_schema_comes_from_the_output_type() -> None:
    (descriptor,) = kit.descriptors()
    output = descriptor.parameters["properties"]["output"]
    assert output["required"] == ["order_id", "amount_cents"]
    assert output["properties"]["lines"]["items"] == {"$ref": "#/$defs/Line"}
    assert "Line" in descriptor.parameters["$defs"]
    with pytest.raises(ConfigurationError, match="not both"):
        finish_tool({"type": "object"}, output_type=Refund)


async def test_invalid_outputs_retry_then_typed_result(time_env: WorkflowEnvironment) -> None:
    model = ScriptedModel(
        [
            [call("f1", "finish", output={"order_id": "A-1", "amount_cents": "lots"})],
            [call("f2", "finish", output={"order_id": "A-1", "amount_cents": -5})],
            [
                call(
                    "f3",
                    "finish",
                    output={
                        "order_id": "A-1",
                        "amount_cents": 1290,
                        "lines": [{"sku": "S", "quantity": 1}],
                    },
                )
            ],
        ]
    )
    async with AgentTestEnvironment.start(toolkit=kit, model=model, env=time_env) as env:
        chat = await env.start_conversation("Refund A-1")
        refund = await env.conversations.result(chat, output_type=Refund)
        assert refund == Refund(
            order_id="A-1", amount_cents=1290, lines=[Line(sku="S", quantity=1)]
        )
        untyped = await env.conversations.result(chat)
        assert untyped.status == "finished" and untyped.output["amount_cents"] == 1290
        outputs = await env.tool_outputs(chat)
    # The schema violation and the validator's verdict went back to the model.
    assert outputs["f1"].failure_kind == "input_validation_error"
    assert outputs["f2"].failure_kind == "input_validation_error"
    assert "amount_cents" in outputs["f2"].content and "must be positive" in outputs["f2"].content
    seen = [i for i in model.requests[2].transcript if isinstance(i, ToolCallOutput)]
    assert [o.call_id for o in seen] == ["f1", "f2"]


async def test_typed_result_of_a_conversation_that_did_not_finish(
    time_env: WorkflowEnvironment,
) -> None:
    model = ScriptedModel(["No refund for you."])
    async with AgentTestEnvironment.start(toolkit=kit, model=model, env=time_env) as env:
        chat = await env.start_conversation("Refund?", options=ConversationOptions(idle_timeout=60))
        await env.result(chat)  # lets the time-skipping server skip the idle timeout
        with pytest.raises(NoFinalOutput, match="idle_timeout") as raised:
            await env.conversations.result(chat, output_type=Refund)
        assert raised.value.result.output == "No refund for you."
