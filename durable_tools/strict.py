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

from typing import Any, Final

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
            for i, item in enumerate(node):  # type: ignore[arg-type]
                visit(item, f"{path}[{i}]", depth)
            return
        if not isinstance(node, dict):
            return
        if depth > _MAX_NESTING:
            problems.append(f"{path}: nested deeper than {_MAX_NESTING} levels")
            return
        for key in _UNSUPPORTED:
            if key in node:
                problems.append(f"{path}: keyword {key!r} is not supported in strict mode")
        is_object = node.get("type") == "object" or "properties" in node  # type: ignore[operator]
        if is_object:
            if node.get("additionalProperties") is not False:  # type: ignore[union-attr]
                problems.append(f"{path}: objects must set 'additionalProperties': false")
            props: dict[str, Any] = node.get("properties") or {}  # type: ignore[assignment]
            required = set(node.get("required") or [])  # type: ignore[arg-type]
            for name in props:
                if name not in required:
                    problems.append(
                        f"{path}.properties.{name}: not listed in 'required' (strict mode "
                        "needs every property required; make it optional with a null union)"
                    )
        for key, value in node.items():  # type: ignore[union-attr]
            child_depth = depth + 1 if key in ("properties", "items", "$defs", "anyOf") else depth
            if key in ("properties", "$defs"):
                for name, sub in (value or {}).items():  # type: ignore[union-attr]
                    visit(sub, f"{path}.{key}.{name}", child_depth)
            elif isinstance(value, dict | list) and key not in ("enum", "const", "default", "examples"):
                visit(value, f"{path}.{key}", child_depth)

    visit(schema, "$", 1)
    return problems
