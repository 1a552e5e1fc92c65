"""OpenAI strict-mode ("structured outputs") rules for tool parameter schemas.

OpenAI accepts `strict: true` only for schemas inside a subset of JSON Schema
(OpenAI API docs, "Structured Outputs — Supported schemas"): the root is an
object; every object sets `additionalProperties: false` and lists every
property in `required` (optional fields are expressed as a union with null);
`allOf`, `oneOf`, `not`, `if`/`then`/`else`, `dependentRequired`,
`dependentSchemas`, `patternProperties` and `unevaluatedProperties` are not
supported; nesting is limited to 10 levels. durable-tools never rewrites a
schema to fit: it reports each broken rule with its JSON path.
"""

from __future__ import annotations

from typing import Any, Final, cast

__all__ = ["strict_mode_violations"]

_UNSUPPORTED: Final[tuple[str, ...]] = (
    "allOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "patternProperties",
    "unevaluatedProperties",
)
_MAX_NESTING: Final[int] = 10
# Keywords whose value maps names to subschemas (not a schema itself).
_SCHEMA_MAPPINGS: Final[tuple[str, ...]] = ("properties", "$defs", "definitions")
# Keywords whose value is data, not a schema.
_DATA_KEYWORDS: Final[tuple[str, ...]] = ("enum", "const", "default", "examples")


def _mapping(value: Any) -> dict[str, Any]:
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _is_object_schema(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if isinstance(kind, list):
        return "object" in cast(list[Any], kind) or "properties" in node
    return kind == "object" or "properties" in node


def strict_mode_violations(schema: dict[str, Any]) -> list[str]:
    """List the OpenAI strict-mode rules a parameters schema breaks.

    Args:
        schema: A JSON Schema document (the root of a tool's parameters).

    Returns:
        One message per broken rule, each starting with the JSON path where
        it is broken (e.g. `$.properties.limit: not listed in 'required'`);
        an empty list when the schema is strict-compatible.
    """
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("$: the root must be {'type': 'object'}")
    if "anyOf" in schema:
        problems.append("$: the root must not be 'anyOf'")

    def visit(node: Any, path: str, depth: int) -> None:
        if isinstance(node, list):
            for i, item in enumerate(cast(list[Any], node)):
                visit(item, f"{path}[{i}]", depth)
            return
        if not isinstance(node, dict):
            return
        obj = cast(dict[str, Any], node)
        if depth > _MAX_NESTING:
            problems.append(f"{path}: nested deeper than {_MAX_NESTING} levels")
            return
        for key in _UNSUPPORTED:
            if key in obj:
                problems.append(f"{path}: keyword {key!r} is not supported in strict mode")
        if _is_object_schema(obj):
            if obj.get("additionalProperties") is not False:
                problems.append(f"{path}: objects must set 'additionalProperties': false")
            props = _mapping(obj.get("properties"))
            required = obj.get("required")
            listed = set(cast(list[Any], required)) if isinstance(required, list) else set[Any]()
            for name in props:
                if name not in listed:
                    problems.append(
                        f"{path}.properties.{name}: not listed in 'required' (strict mode "
                        "needs every property required; make it optional with a null union)"
                    )
        for key, value in obj.items():
            child_depth = depth + 1 if key in ("properties", "items", "$defs", "anyOf") else depth
            if key in _SCHEMA_MAPPINGS:
                for name, sub in _mapping(value).items():
                    visit(sub, f"{path}.{key}.{name}", child_depth)
            elif isinstance(value, dict | list) and key not in _DATA_KEYWORDS:
                visit(value, f"{path}.{key}", child_depth)

    visit(schema, "$", 1)
    return problems
