"""A question's answer schema shown as fields (issue 25, item 5): `durable-tools pending ID`."""

from __future__ import annotations

import io
from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from rich.console import Console

from durable_tools.worker.answer_fields import MAX_FIELDS, AnswerField, answer_fields
from durable_tools.worker.render import render_answer_schema


class Address(BaseModel):
    city: str = Field(description="City name.")
    zip: str | None = None


class Item(BaseModel):
    sku: str


class Answer(BaseModel):
    order_id: str = Field(pattern=r"^[A-Z]-\d+$", description="The order, as on the receipt.")
    decision: Literal["refund", "replace"]
    count: int = Field(ge=1, le=10, default=1)
    when: str = Field(json_schema_extra={"format": "date"})
    address: Address | None = None
    items: list[Item] = []


def test_a_pydantic_answer_lists_every_field_with_type_requirement_and_constraints() -> None:
    fields = answer_fields(Answer.model_json_schema())
    assert fields == [
        AnswerField(
            name="order_id",
            type="string",
            required=True,
            description="The order, as on the receipt.",
            constraints=r"pattern ^[A-Z]-\d+$",
        ),
        AnswerField(
            name="decision",
            type="string",
            required=True,
            constraints='one of "refund", "replace"',
        ),
        AnswerField(
            name="count", type="integer", required=False, constraints="≥ 1; ≤ 10; default 1"
        ),
        AnswerField(name="when", type="string", required=True, constraints="format date"),
        AnswerField(
            name="address", type="object | null", required=False, constraints="default null"
        ),
        AnswerField(name="address.city", type="string", required=True, description="City name."),
        AnswerField(
            name="address.zip", type="string | null", required=False, constraints="default null"
        ),
        AnswerField(name="items", type="array of object", required=False, constraints="default []"),
        AnswerField(name="items[].sku", type="string", required=True),
    ]


def test_an_answer_that_is_not_an_object_is_one_field() -> None:
    schema = {"type": "string", "enum": ["yes", "no"], "description": "Go ahead?"}
    assert answer_fields(schema) == [
        AnswerField(
            name="(answer)",
            type="string",
            required=True,
            description="Go ahead?",
            constraints='one of "yes", "no"',
        )
    ]


def _text(renderable: object, width: int = 100) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_the_table_names_the_question_and_holds_no_schema_json() -> None:
    text = _text(render_answer_schema("call_7", Answer.model_json_schema()))
    assert text.startswith("Answer to call_7")
    assert "items[].sku" in text and "format date" in text
    assert '"properties"' not in text and "$defs" not in text
    assert _text(render_answer_schema("call_8", None)).strip() == (
        "answer to call_8: any JSON value"
    )


def test_a_large_schema_is_cut_and_says_so() -> None:
    schema = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(80)}}
    assert len(answer_fields(schema)) == MAX_FIELDS
    assert "the first 50 fields" in _text(render_answer_schema("c", schema))


def test_recursive_references_end() -> None:
    schema: dict[str, Any] = {
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        "$ref": "#/$defs/Node",
    }
    assert [f.name for f in answer_fields(schema)] == [
        "next",
        "next.next",
        "next.next.next",
        "next.next.next.next",
    ]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=30,
)
_KEYS = st.sampled_from(
    ["type", "properties", "required", "items", "anyOf", "oneOf", "$ref", "enum", "const"]
    + ["format", "pattern", "minimum", "default", "description", "title", "$defs"]
)
_SCHEMA = st.recursive(
    st.dictionaries(_KEYS, _JSON, max_size=5),
    lambda inner: st.dictionaries(_KEYS, inner | st.dictionaries(st.text(max_size=5), inner)),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(_SCHEMA)
def test_any_schema_shape_renders(schema: dict[str, Any]) -> None:
    """A schema may come from an MCP server: whatever its shape, it renders."""
    fields = answer_fields(schema)
    assert 1 <= len(fields) <= MAX_FIELDS
    _text(render_answer_schema("c", schema))
