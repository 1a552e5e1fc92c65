"""A question's answer schema as the fields a person fills in.

`durable-tools pending ID` lists what an answer takes (`worker/render.py`'s
`render_answer_schema`) instead of printing the JSON Schema: one
`AnswerField` per property, with its type, whether it is required, its
description and what else it must be (`enum`, `const`, `format`, `pattern`,
bounds, `default`). Pure functions over a JSON Schema given as a mapping.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

__all__ = ["MAX_FIELDS", "AnswerField", "answer_fields"]


@dataclass(frozen=True, kw_only=True)
class AnswerField:
    """One field of an answer, as `durable-tools pending` lists it.

    Attributes:
        name: Its path in the answer: `order_id`, `address.city`, `items[].sku`;
            `(answer)` when the answer is not an object.
        type: Its JSON type(s), e.g. `string`, `integer | null`, `array of string`.
        required: Whether the object holding it requires it.
        description: The schema's `description` (or `title`), at most 200 characters.
        constraints: What else the value must be, e.g. `one of "a", "b"`,
            `format date`, `pattern ^A-`, `≥ 0`; `""` when nothing.
    """

    name: str
    type: str
    required: bool
    description: str = ""
    constraints: str = ""


MAX_FIELDS: Final[int] = 50
"""Fields listed at most; the table of a longer schema says so (`--json` has all)."""

_MAX_DEPTH: Final[int] = 4
"""Nesting levels listed (objects in objects, arrays of objects, `$ref`s)."""

_MAX_TEXT: Final[int] = 200
"""Characters of a description or a constraint shown."""

_BOUNDS: Final[tuple[tuple[str, str], ...]] = (
    ("minimum", "≥"),
    ("exclusiveMinimum", ">"),
    ("maximum", "≤"),
    ("exclusiveMaximum", "<"),
    ("minLength", "min length"),
    ("maxLength", "max length"),
    ("minItems", "min items"),
    ("maxItems", "max items"),
    ("multipleOf", "multiple of"),
)


def answer_fields(schema: Mapping[str, Any]) -> list[AnswerField]:
    """The fields an answer to `schema` has, in the order the schema lists them.

    Nested objects and arrays of objects are listed with dotted paths
    (`address.city`, `items[].sku`), local `$ref`s (`#/$defs/...`) are
    followed, `anyOf`/`oneOf` options are joined (`string | null`). At most
    `MAX_FIELDS` (50) fields and `_MAX_DEPTH` (4) levels; anything the
    schema says that is not JSON Schema is ignored (a schema may come from
    an MCP server).

    Args:
        schema: A JSON Schema (an interaction tool's answer schema).

    Returns:
        One `AnswerField` per property; one field named `(answer)` when the
        answer is not an object with properties.
    """
    root = schema
    fields: list[AnswerField] = []
    _fields_of(root, root, "", fields, 0)
    if not fields:
        fields.append(
            AnswerField(
                name="(answer)",
                type=_type_of(root, root, 0),
                required=True,
                description=_description(root, ""),
                constraints=_constraints(root, root),
            )
        )
    return fields


def _fields_of(
    schema: Mapping[str, Any],
    root: Mapping[str, Any],
    prefix: str,
    out: list[AnswerField],
    depth: int,
) -> None:
    schema = _resolved(schema, root)
    properties = schema.get("properties")
    if depth >= _MAX_DEPTH or not isinstance(properties, Mapping):
        return
    required = schema.get("required")
    listed = cast(list[Any], required) if isinstance(required, list) else []
    needed = {name for name in listed if isinstance(name, str)}
    for name, raw in cast(Mapping[Any, Any], properties).items():
        if len(out) >= MAX_FIELDS:
            return
        if not isinstance(raw, Mapping):
            continue
        field = _resolved(cast(Mapping[str, Any], raw), root)
        path = f"{prefix}{name}"
        out.append(
            AnswerField(
                name=path,
                type=_type_of(field, root, depth),
                required=name in needed,
                description=_description(field, str(name)),
                constraints=_constraints(field, root),
            )
        )
        for shape in [field, *(_resolved(o, root) for o in _options(field))]:
            _fields_of(shape, root, f"{path}.", out, depth + 1)
            items = shape.get("items")
            if isinstance(items, Mapping):
                _fields_of(cast(Mapping[str, Any], items), root, f"{path}[].", out, depth + 1)


def _resolved(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """`schema`, or what its local `$ref` (`#/$defs/Name`, `#/definitions/Name`) names."""
    for _ in range(_MAX_DEPTH):
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        found: Any = root
        for part in ref[2:].split("/"):
            found = cast(Mapping[str, Any], found).get(part) if isinstance(found, Mapping) else None
        if not isinstance(found, Mapping):
            return schema
        schema = cast(Mapping[str, Any], found)
    return schema


def _options(schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            return [
                cast(Mapping[str, Any], o)
                for o in cast(list[Any], options)
                if isinstance(o, Mapping)
            ]
    return []


def _type_of(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> str:
    schema = _resolved(schema, root)
    options = _options(schema)
    if options and depth < _MAX_DEPTH:
        names = [_type_of(option, root, depth + 1) for option in options]
        return " | ".join(dict.fromkeys(n for n in names if n))
    kind = schema.get("type")
    listed = cast(list[Any], kind) if isinstance(kind, list) else []
    kinds = [k for k in listed if isinstance(k, str)]
    if isinstance(kind, str):
        kinds = [kind]
    enum = schema.get("enum")
    if not kinds and (isinstance(enum, list) or "const" in schema):
        values = cast(list[Any], enum) if isinstance(enum, list) else [schema.get("const")]
        kinds = list(dict.fromkeys(_json_type(v) for v in values))
    items = schema.get("items")
    if "array" in kinds and isinstance(items, Mapping) and depth < _MAX_DEPTH:
        inner = _type_of(cast(Mapping[str, Any], items), root, depth + 1)
        kinds = [f"array of {inner}" if k == "array" and inner != "any" else k for k in kinds]
    return " | ".join(kinds) or "any"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _description(schema: Mapping[str, Any], name: str) -> str:
    """The `description`, else a `title` that says more than the field's name."""
    text = schema.get("description")
    if not text:
        title = schema.get("title")
        # pydantic titles every field after its name: `order_id` -> "Order Id".
        same = str(title).lower().replace(" ", "_") == name.lower().replace(" ", "_")
        text = title if title and not same else ""
    return _cut(" ".join(str(text).split()))


def _constraints(schema: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for option in [schema, *(_resolved(o, root) for o in _options(schema))]:
        if isinstance(option.get("enum"), list):
            values = cast(list[Any], option["enum"])
            parts.append("one of " + ", ".join(_value(v) for v in values))
        if "const" in option:
            parts.append(f"= {_value(option['const'])}")
        for key in ("format", "pattern"):
            if isinstance(option.get(key), str):
                parts.append(f"{key} {option[key]}")
        for key, word in _BOUNDS:
            bound = option.get(key)
            if isinstance(bound, int | float) and not isinstance(bound, bool):
                parts.append(f"{word} {bound:g}")
    if "default" in schema:
        parts.append(f"default {_value(schema['default'])}")
    return _cut("; ".join(dict.fromkeys(parts)))


def _value(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"
