"""The model call's `chat` span and metrics: tokens, duration, failures."""

from __future__ import annotations

from typing import Any

import pytest
from tracing_support import RAW, meter_provider, tracer_provider

from durable_tools.activities.model_activity import (
    traced_model_call,
)
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage, Usage


def points(name: str) -> list[Any]:
    data = meter_provider().get_metrics_data()
    found: list[Any] = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += list(metric.data.data_points)
    return found


async def test_chat_span_carries_usage_and_tokens_are_recorded() -> None:
    tracer_provider()
    meter_provider()
    model = ScriptedModel(
        lambda _: AssistantMessage(text="hi", usage=Usage(input_tokens=12, output_tokens=3))
    )
    request = ModelRequest(
        model="openai:gpt-4o-tokens", transcript=[], tools=[], workflow_id="wf-tokens"
    )
    await traced_model_call(model, request)

    [span] = [s for s in RAW.get_finished_spans() if s.name == "chat gpt-4o-tokens"]
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.usage.input_tokens"] == 12
    assert attributes["gen_ai.usage.output_tokens"] == 3
    assert attributes["gen_ai.conversation.id"] == "wf-tokens"
    tokens = {
        p.attributes["gen_ai.token.type"]: p.sum
        for p in points("gen_ai.client.token.usage")
        if p.attributes["gen_ai.request.model"] == "gpt-4o-tokens"
    }
    assert tokens == {"input": 12, "output": 3}


async def test_a_failed_model_call_is_counted_and_marked_on_its_span() -> None:
    tracer_provider()
    meter_provider()

    def down(_: ModelRequest) -> AssistantMessage:
        raise ConnectionError("provider down")

    request = ModelRequest(model="scripted-down", transcript=[], tools=[], workflow_id="wf-down")
    with pytest.raises(ConnectionError):
        await traced_model_call(ScriptedModel(down), request)
    [span] = [s for s in RAW.get_finished_spans() if s.name == "chat scripted-down"]
    assert dict(span.attributes or {})["error.type"] == "ConnectionError"
    failures = [
        p.value
        for p in points("durable_tools.model.failures")
        if p.attributes["gen_ai.request.model"] == "scripted-down"
    ]
    assert failures == [1]
