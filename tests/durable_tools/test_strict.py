"""OpenAI strict-mode checks: reported with JSON paths, never rewritten."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from durable_tools import StrictModeError, dynamic_tool, strict_mode_violations

STRICT_OK: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": ["string", "null"], "enum": ["C", "F", None]},
        "where": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            "required": ["lat", "lon"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
        "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["city", "unit", "where", "tags", "either"],
    "additionalProperties": False,
    "$defs": {
        "Tag": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        }
    },
}


def nested_objects(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        node = {
            "type": "object",
            "properties": {"n": node},
            "required": ["n"],
            "additionalProperties": False,
        }
    return node


def test_a_strict_compatible_schema_has_no_violations() -> None:
    assert strict_mode_violations(STRICT_OK) == []


def test_the_root_must_be_an_object() -> None:
    assert strict_mode_violations({"type": "string"}) == ["$: the root must be {'type': 'object'}"]


def test_the_root_must_not_be_any_of() -> None:
    problems = strict_mode_violations(
        {"type": "object", "anyOf": [{"type": "object"}], "additionalProperties": False}
    )
    assert "$: the root must not be 'anyOf'" in problems


def test_objects_need_additional_properties_false() -> None:
    schema = copy.deepcopy(STRICT_OK)
    del schema["properties"]["where"]["additionalProperties"]
    assert strict_mode_violations(schema) == [
        "$.properties.where: objects must set 'additionalProperties': false"
    ]


def test_nullable_object_types_are_checked_too() -> None:
    schema = copy.deepcopy(STRICT_OK)
    schema["properties"]["where"]["type"] = ["object", "null"]
    del schema["properties"]["where"]["additionalProperties"]
    assert strict_mode_violations(schema) == [
        "$.properties.where: objects must set 'additionalProperties': false"
    ]


def test_every_property_must_be_required() -> None:
    schema = copy.deepcopy(STRICT_OK)
    schema["required"].remove("unit")
    [problem] = strict_mode_violations(schema)
    assert problem.startswith("$.properties.unit: not listed in 'required'")
    assert "null union" in problem


def test_violations_inside_defs_name_their_path() -> None:
    schema = copy.deepcopy(STRICT_OK)
    schema["$defs"]["Tag"]["required"] = []
    assert strict_mode_violations(schema) == [
        "$.$defs.Tag.properties.name: not listed in 'required' (strict mode needs every "
        "property required; make it optional with a null union)"
    ]


@pytest.mark.parametrize(
    "keyword",
    ["allOf", "oneOf", "not", "if", "dependentRequired", "patternProperties"],
)
def test_unsupported_keywords_are_reported(keyword: str) -> None:
    schema = copy.deepcopy(STRICT_OK)
    schema["properties"]["city"][keyword] = [{"type": "string"}] if keyword.endswith("Of") else {}
    assert strict_mode_violations(schema) == [
        f"$.properties.city: keyword {keyword!r} is not supported in strict mode"
    ]


def test_enum_and_default_values_are_data_not_schemas() -> None:
    schema = copy.deepcopy(STRICT_OK)
    schema["properties"]["city"]["enum"] = [{"properties": {"x": {}}}]
    schema["properties"]["city"]["default"] = {"oneOf": []}
    assert strict_mode_violations(schema) == []


def test_nesting_is_limited_to_ten_levels() -> None:
    assert strict_mode_violations(nested_objects(9)) == []
    problems = strict_mode_violations(nested_objects(12))
    assert len(problems) == 1
    assert "nested deeper than 10 levels" in problems[0]


def test_a_strict_tool_with_a_broken_schema_is_rejected_at_construction() -> None:
    schema = copy.deepcopy(STRICT_OK)
    schema["required"].remove("city")
    with pytest.raises(StrictModeError) as info:
        dynamic_tool("weather", parameters=schema, strict=True, run=lambda p: p)
    assert "tool 'weather' is strict" in str(info.value)
    assert "$.properties.city: not listed in 'required'" in str(info.value)


def test_a_strict_tool_keeps_its_schema_exactly() -> None:
    t = dynamic_tool("weather", parameters=STRICT_OK, strict=True, run=lambda p: p)
    d = t.descriptor()
    assert d.strict is True
    assert d.parameters == STRICT_OK


def test_non_strict_tools_are_not_checked() -> None:
    t = dynamic_tool("loose", parameters={"type": "object", "properties": {"a": {}}}, run=print)
    assert t.descriptor().strict is False
