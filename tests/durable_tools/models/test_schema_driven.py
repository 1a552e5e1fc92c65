"""The `test` model: schema-driven arguments, one call per tool, a summary turn."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from pydantic import BaseModel, Field

from durable_tools import Toolkit, finish_tool, interaction_tool, pause_tool, tool
from durable_tools.descriptor import ToolDescriptor
from durable_tools.models.base import ModelRequest
from durable_tools.models.schema_driven import SchemaDrivenModel, example_arguments
from durable_tools.results import Ok, failed
from durable_tools.transcript import AssistantMessage, TranscriptItem, UserMessage
from durable_tools.transcript import to_tool_call_output as wire

OBJECT_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 3}, "n": {"type": "integer"}},
        "required": ["name", "n"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green"]},
            "mode": {"const": "fast"},
            "level": {"type": "integer", "minimum": 5, "maximum": 9, "multipleOf": 3},
        },
        "required": ["color", "mode", "level"],
    },
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "email": {"type": "string", "format": "email"},
            "id": {"type": "string", "format": "uuid"},
            "site": {"type": "string", "format": "uri"},
            "ip": {"type": "string", "format": "ipv4"},
            "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
        },
        "required": ["when", "day", "email", "id", "site", "ip", "code"],
    },
    {
        "type": "object",
        "properties": {
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "geo": {
                        "type": "object",
                        "properties": {"lat": {"type": "number", "minimum": -90}},
                        "required": ["lat"],
                    },
                },
                "required": ["street", "geo"],
            },
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "pairs": {
                "type": "array",
                "items": {"type": "integer", "minimum": 1},
                "minItems": 3,
                "uniqueItems": True,
            },
        },
        "required": ["address", "tags", "pairs"],
    },
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"q": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]}},
        "required": ["q"],
    },
]


class Address(BaseModel):
    street: str
    zip_code: str = Field(pattern=r"^\d{5}$")


class Priority(StrEnum):
    low = "low"
    high = "high"


@tool
async def book(
    when: datetime,
    day: date,
    ref: UUID,
    address: Address,
    priority: Priority,
    guests: Annotated[list[str], Field(min_length=1)],
    mode: Literal["a", "b"] = "a",
    note: str | None = None,
) -> str:
    """Book a table.

    Args:
        when: Arrival.
        day: The day.
        ref: Reference.
        address: Where.
        priority: How urgent.
        guests: Who.
        mode: Mode.
        note: Note.
    """
    return "booked"


def _valid(schema: dict[str, Any], value: Any) -> bool:
    dialect = Draft7Validator if "draft-07" in schema.get("$schema", "") else Draft202012Validator
    return dialect(schema, format_checker=dialect.FORMAT_CHECKER).is_valid(value)


@pytest.mark.parametrize("schema", OBJECT_SCHEMAS)
def test_generated_arguments_validate_against_the_schema(schema: dict[str, Any]) -> None:
    value = example_arguments(schema)
    assert value is not None
    assert _valid(schema, value), value


def test_formats_required_fields_and_min_items_are_honoured() -> None:
    value = example_arguments(OBJECT_SCHEMAS[3])
    assert value is not None
    datetime.fromisoformat(value["when"].replace("Z", "+00:00"))
    date.fromisoformat(value["day"])
    UUID(value["id"])
    assert "@" in value["email"]
    nested = example_arguments(OBJECT_SCHEMAS[4])
    assert nested is not None
    assert len(nested["tags"]) >= 2 and len(set(nested["pairs"])) >= 3
    assert "lat" in nested["address"]["geo"]


def test_typed_tool_schemas_with_refs_enums_and_formats() -> None:
    (descriptor,) = Toolkit(book).descriptors()
    value = example_arguments(descriptor.parameters)
    assert value is not None
    assert _valid(descriptor.parameters, value), value
    # and the tool's own validation accepts them
    assert Toolkit(book).get("book").decode(json.dumps(value))


def test_unsupported_or_unsatisfiable_schemas_give_none() -> None:
    recursive = {
        "type": "object",
        "properties": {"t": {"$ref": "#/$defs/Tree"}},
        "required": ["t"],
        "$defs": {"Tree": {"type": "object", "properties": {"kids": {"items": {"$ref": "#"}}}}},
    }
    assert example_arguments(recursive) is None
    impossible = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 1}},
        "required": ["n"],
    }  # noqa: E501
    assert example_arguments(impossible) is None


def test_generation_is_deterministic_across_processes() -> None:
    here = [example_arguments(s) for s in OBJECT_SCHEMAS]
    assert here == [example_arguments(s) for s in OBJECT_SCHEMAS]
    code = (
        "import json, sys\n"
        "from durable_tools.models.schema_driven import example_arguments\n"
        "print(json.dumps([example_arguments(s) for s in json.load(sys.stdin)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(OBJECT_SCHEMAS),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(proc.stdout) == here


def _descriptors() -> list[ToolDescriptor]:
    ask = interaction_tool(
        "ask",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    )
    kit = Toolkit(book, ask, finish_tool(), pause_tool(), label="t")
    web = ToolDescriptor(name="web_search", kind="provider", provider="openai")
    return [*kit.descriptors(), web]


def _request(
    turn: int, transcript: list[TranscriptItem], tools: list[ToolDescriptor]
) -> ModelRequest:  # noqa: E501
    return ModelRequest(model="test", transcript=transcript, tools=tools, turn=turn)


async def test_first_turn_calls_local_tools_only_then_summarizes() -> None:
    tools = _descriptors()
    model = SchemaDrivenModel()
    history: list[TranscriptItem] = [UserMessage(text="go")]
    first = await model(_request(1, history, tools))
    assert [c.name for c in first.tool_calls] == ["book"]
    assert first.tool_calls[0].call_id == "t1c1"
    assert _valid(tools[0].parameters, json.loads(first.tool_calls[0].arguments))

    history += [first, wire(Ok(call_id="t1c1", tool="book", value="booked"))]
    second = await model(_request(2, history, tools))
    assert second.tool_calls == ()
    assert second.text == "Called 1 tool: 1 ok, 0 failed.\n- book: ok"

    # a new user message starts another round
    history += [second, UserMessage(text="again")]
    assert [c.call_id for c in (await model(_request(3, history, tools))).tool_calls] == ["t3c1"]


async def test_interaction_tools_are_called_when_asked_and_failures_are_summarized() -> None:
    tools = _descriptors()
    model = SchemaDrivenModel(include_interactions=True)
    history: list[TranscriptItem] = [UserMessage(text="go")]
    first = await model(_request(1, history, tools))
    assert [c.name for c in first.tool_calls] == ["book", "ask"]
    long_reason = "the field 'x' is wrong " * 20
    history += [
        first,
        wire(failed(first.tool_calls[0], "input_validation_error", long_reason)),
        wire(Ok(call_id=first.tool_calls[1].call_id, tool="ask", value={"answer": "yes"})),
    ]
    text = (await model(_request(2, history, tools))).text
    head, book_line, ask_line = text.split("\n")
    assert head == "Called 2 tools: 1 ok, 1 failed."
    assert book_line.startswith("- book: failed (input_validation_error: the field 'x' is wrong")
    assert book_line.endswith("…)") and len(book_line) < 180
    assert ask_line == "- ask: ok"


async def test_no_callable_tools_answers_with_text() -> None:
    only_signals = Toolkit(finish_tool(), label="s").descriptors()
    message = await SchemaDrivenModel()(_request(1, [UserMessage(text="go")], only_signals))
    assert message == AssistantMessage(text="There are no tools to call.", stop_reason="end_turn")
