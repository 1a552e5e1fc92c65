"""Dynamic tools: the unit tests of the dynamic-tools design (section 11), ported.

The design (`shared/seeds/effect-ai-dynamic-tools-design.md`) leaves validation of
raw JSON Schema arguments open; here such arguments ARE validated, with format
checking on, so the last group of tests checks the rejections.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, PlainSerializer

from durable_tools import (
    Failure,
    InvalidSchema,
    Ok,
    Output,
    ToolCall,
    ToolContext,
    Toolkit,
    dynamic_tool,
    interaction_tool,
    is_dynamic,
    provider_tool,
    signal_tool,
    tool,
)


class Search(BaseModel):
    query: str
    limit: int


class SearchOptional(BaseModel):
    query: str
    limit: float | None = None


EpochMillis = Annotated[
    datetime, PlainSerializer(lambda d: round(d.timestamp() * 1000), return_type=int)
]


class Stamped(BaseModel):
    timestamp: EpochMillis


class Event(BaseModel):
    at: datetime


async def run_one(kit: Toolkit, name: str, arguments: Any) -> Ok | Failure:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    events = [e async for e in kit.run([ToolCall(call_id="c1", name=name, arguments=text)])]
    outputs = [e for e in events if isinstance(e, Output)]
    assert len(outputs) == 1
    return outputs[0].result


def ok_value(result: Ok | Failure) -> Any:
    assert isinstance(result, Ok), result
    return result.value


def failure(result: Ok | Failure, kind: str) -> Failure:
    assert isinstance(result, Failure), result
    assert result.kind == kind, result
    return result


# 11.1 type guard ---------------------------------------------------------------


def test_is_dynamic_true_for_dynamic_tool_with_pydantic_parameters() -> None:
    t = dynamic_tool("TestTool", parameters=Search, run=lambda p: p)
    assert is_dynamic(t)


def test_is_dynamic_true_for_dynamic_tool_with_json_schema_parameters() -> None:
    t = dynamic_tool("TestTool", parameters={"type": "object", "properties": {}}, run=lambda p: p)
    assert is_dynamic(t)


def test_is_dynamic_false_for_user_defined_tools() -> None:
    @tool
    def TestTool(query: str) -> str:  # the design's tool name
        """Echo."""
        return query

    assert not is_dynamic(TestTool)


def test_is_dynamic_false_for_provider_signal_and_interaction_tools() -> None:
    assert not is_dynamic(provider_tool("ProviderTool", provider="openai", config={"type": "x"}))
    assert not is_dynamic(signal_tool("SignalTool"))
    assert not is_dynamic(interaction_tool("InteractionTool"))


@pytest.mark.parametrize(
    "value", [None, {}, {"name": "fake"}, "TestTool", 1, type("Fake", (), {"dynamic": True})()]
)
def test_is_dynamic_false_for_non_tool_values(value: object) -> None:
    assert not is_dynamic(value)


# 11.2 JSON Schema generation ---------------------------------------------------


def test_json_schema_derived_from_pydantic_parameters() -> None:
    t = dynamic_tool("TestTool", parameters=SearchOptional, run=lambda p: p)
    schema = t.descriptor().parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert set(schema["properties"]) == {"query", "limit"}


def test_json_schema_returned_exactly_as_given() -> None:
    input_schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Search query"},
            "limit": {"type": "number", "minimum": 1, "maximum": 100},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    t = dynamic_tool("TestTool", parameters=input_schema, run=lambda p: p)
    assert t.descriptor().parameters == input_schema


def test_json_schema_preserves_ref_and_one_of() -> None:
    input_schema = {
        "type": "object",
        "properties": {
            "value": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "item": {"$ref": "#/$defs/Item"},
        },
        "$defs": {"Item": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    expected = json.loads(json.dumps(input_schema))
    t = dynamic_tool("TestTool", parameters=input_schema, run=lambda p: p)
    assert t.descriptor().parameters == expected
    # and the toolkit shows the model the same document
    assert Toolkit(t).descriptors()[0].parameters == expected


def test_no_parameters_means_an_empty_object_schema() -> None:
    t = dynamic_tool("TestTool", run=lambda: "done")
    assert t.descriptor().parameters == {"type": "object", "properties": {}}


# 11.3 handler execution ---------------------------------------------------------


async def test_parameters_decoded_with_pydantic_before_the_run() -> None:
    seen: list[object] = []

    def run(params: Search) -> list[str]:
        seen.append(params)
        return [f"{params.query}-{i}" for i in range(params.limit)]

    t = dynamic_tool("SearchTool", parameters=Search, output=list[str], run=run)
    result = await run_one(Toolkit(t), "SearchTool", {"query": "test", "limit": 3})
    assert ok_value(result) == ["test-0", "test-1", "test-2"]
    assert seen == [Search(query="test", limit=3)]


async def test_parameters_passed_through_as_a_dict_with_json_schema() -> None:
    seen: list[object] = []

    async def run(params: dict[str, Any]) -> list[str]:
        seen.append(params)
        return [f"{params['query']}-{i}" for i in range(params["limit"])]

    t = dynamic_tool(
        "SearchTool",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        },
        output=list[str],
        run=run,
    )
    result = await run_one(Toolkit(t), "SearchTool", {"query": "test", "limit": 3})
    assert ok_value(result) == ["test-0", "test-1", "test-2"]
    assert seen == [{"query": "test", "limit": 3}]


async def test_success_schema_encodes_the_result() -> None:
    t = dynamic_tool(
        "TestTool",
        parameters={"type": "object", "properties": {}},
        output=Stamped,
        run=lambda: {"timestamp": datetime.fromtimestamp(1, tz=UTC)},
    )
    # the run itself returns a datetime; the output the model sees is encoded
    raw = await t.run({}, lambda _: None, _context())
    assert isinstance(raw["timestamp"], datetime)
    result = await run_one(Toolkit(t), "TestTool", {})
    assert ok_value(result) == {"timestamp": 1000}


async def test_success_schema_encodes_a_datetime_as_iso_text() -> None:
    t = dynamic_tool(
        "TestTool", output=Event, run=lambda: Event(at=datetime(2024, 5, 1, 12, 0, tzinfo=UTC))
    )
    assert ok_value(await run_one(Toolkit(t), "TestTool", {})) == {"at": "2024-05-01T12:00:00Z"}


async def test_output_violating_the_success_schema_is_a_failure() -> None:
    t = dynamic_tool(
        "TestTool",
        output={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        run=lambda: {"n": "three"},
    )
    result = failure(await run_one(Toolkit(t), "TestTool", {}), "output_validation_error")
    assert "$.n" in result.reason


async def test_unserializable_output_under_a_raw_success_schema_is_a_failure() -> None:
    t = dynamic_tool("TestTool", output={"type": "object"}, run=lambda: object())
    failure(await run_one(Toolkit(t), "TestTool", {}), "output_validation_error")


# raw-schema arguments ARE validated ----------------------------------------------

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        "contact": {"type": "string", "format": "email"},
        "value": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        "item": {"$ref": "#/$defs/Item"},
    },
    "required": ["query"],
    "additionalProperties": False,
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        }
    },
}


@pytest.fixture
def search_kit() -> Toolkit:
    return Toolkit(dynamic_tool("search", parameters=SEARCH_SCHEMA, run=lambda p: p))


async def test_valid_raw_schema_arguments_reach_the_run_unchanged(search_kit: Toolkit) -> None:
    args = {
        "query": "q",
        "limit": 5,
        "contact": "ada@example.com",
        "value": 2.5,
        "item": {"name": "x"},
    }
    assert ok_value(await run_one(search_kit, "search", args)) == args


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({}, "$"),  # required property missing
        ({"query": 3}, "$.query"),
        ({"query": ""}, "$.query"),
        ({"query": "q", "limit": 0}, "$.limit"),
        ({"query": "q", "limit": 1.5}, "$.limit"),
        ({"query": "q", "extra": 1}, "$"),  # additionalProperties: false
        ({"query": "q", "value": [1]}, "$.value"),  # oneOf
        ({"query": "q", "item": {}}, "$.item"),  # through $ref
        ({"query": "q", "item": {"name": 1}}, "$.item.name"),
    ],
)
async def test_raw_schema_violations_are_input_validation_errors(
    search_kit: Toolkit, arguments: dict[str, Any], path: str
) -> None:
    result = failure(await run_one(search_kit, "search", arguments), "input_validation_error")
    assert f"{path}:" in result.reason


async def test_format_checking_is_on_for_raw_schemas(search_kit: Toolkit) -> None:
    result = failure(
        await run_one(search_kit, "search", {"query": "q", "contact": "not an e-mail"}),
        "input_validation_error",
    )
    assert "$.contact" in result.reason
    assert "email" in result.reason


def test_an_invalid_raw_schema_is_rejected_at_construction() -> None:
    with pytest.raises(InvalidSchema, match="not a valid JSON Schema"):
        dynamic_tool("bad", parameters={"type": "objekt"}, run=lambda p: p)
    with pytest.raises(InvalidSchema, match="output schema"):
        dynamic_tool("bad", output={"minimum": "zero"}, run=lambda p: p)


def _context() -> ToolContext:
    return ToolContext(call_id="c1", tool="TestTool", idempotency_key="k")
