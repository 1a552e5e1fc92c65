"""Helpers shared by the provider wire formats: schema copies, strict checks, response reading.

Provider responses are JSON decoded into plain dicts; these helpers read them
with clear `ValueError`s when the *structure* is wrong (a missing key, a list
where an object belongs). What a model wrote inside a well-formed response is
never checked here: it travels on, raw, to the executor.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, cast

from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import StrictModeError
from durable_tools.strict import strict_mode_violations
from durable_tools.transcript import Usage

__all__ = [
    "arguments_text",
    "as_list",
    "as_object",
    "check_strict",
    "config_of",
    "count",
    "dump_arguments",
    "function_fields",
    "load_object",
    "object_or_none",
    "openai_usage",
    "parameters_of",
    "require",
    "require_str",
]


def parameters_of(descriptor: ToolDescriptor) -> dict[str, Any]:
    """A deep copy of the parameters schema (wire dicts never alias a descriptor)."""
    return copy.deepcopy(descriptor.parameters)


def config_of(descriptor: ToolDescriptor) -> dict[str, Any] | None:
    """A copy of a provider tool's `provider_config`, `None` when empty."""
    return copy.deepcopy(descriptor.provider_config) if descriptor.provider_config else None


def function_fields(descriptor: ToolDescriptor) -> dict[str, Any]:
    """An OpenAI function tool's fields: name, description, parameters and an explicit `strict`.

    Raises:
        StrictModeError: `strict=True` and the schema breaks an OpenAI strict-mode rule.
    """
    check_strict(descriptor)
    function: dict[str, Any] = {"name": descriptor.name}
    if descriptor.description:
        function["description"] = descriptor.description
    function["parameters"] = parameters_of(descriptor)
    function["strict"] = descriptor.strict
    return function


def check_strict(descriptor: ToolDescriptor) -> None:
    """Raise if a strict descriptor's schema breaks an OpenAI strict-mode rule.

    Args:
        descriptor: Any descriptor; non-strict ones always pass.

    Raises:
        StrictModeError: Naming the tool and every broken rule with its JSON path.
    """
    if not descriptor.strict:
        return
    problems = strict_mode_violations(descriptor.parameters)
    if problems:
        raise StrictModeError(
            f"tool {descriptor.name!r} asks for OpenAI strict mode but its parameters "
            f"schema breaks {len(problems)} rule(s): {'; '.join(problems)}. durable-tools "
            "never rewrites a schema: fix it, or build the tool with strict=False"
        )


def as_object(value: Any, where: str) -> dict[str, Any]:
    """Return `value` if it is a JSON object, else raise `ValueError` naming `where`."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return cast(dict[str, Any], value)


def as_list(value: Any, where: str) -> list[Any]:
    """Return `value` if it is a JSON array, else raise `ValueError` naming `where`."""
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a JSON array, got {type(value).__name__}")
    return cast(list[Any], value)


def require(obj: Mapping[str, Any], key: str, where: str) -> Any:
    """Return `obj[key]`, or raise `ValueError` saying which key is missing where."""
    if key not in obj or obj[key] is None:
        raise ValueError(f"{where}: missing {key!r}")
    return obj[key]


def require_str(obj: Mapping[str, Any], key: str, where: str) -> str:
    """Return `obj[key]` if it is a string, else raise `ValueError`."""
    value = require(obj, key, where)
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value


def count(obj: Mapping[str, Any] | None, key: str) -> int:
    """Read a token count: `obj[key]` if it is a non-negative integer, else 0.

    Usage blocks differ between providers and compatible servers (fields left
    out, `null`s), and a turn is never refused over a missing count.
    """
    value = obj.get(key) if obj is not None else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def object_or_none(value: Any) -> dict[str, Any] | None:
    """Return `value` if it is a JSON object, else `None` (for optional blocks)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def openai_usage(
    response: Mapping[str, Any], *, input_key: str, output_key: str, details_key: str
) -> Usage | None:
    """Read an OpenAI `usage` block: two counts and `cached_tokens` in a details block.

    Chat Completions and Responses name the same three numbers differently.

    Args:
        response: The decoded response body.
        input_key: The prompt's token count (`prompt_tokens`, `input_tokens`).
        output_key: The answer's token count (`completion_tokens`, `output_tokens`).
        details_key: The block holding `cached_tokens`.

    Returns:
        The `Usage`, or `None` when the body has no `usage` object.
    """
    usage = object_or_none(response.get("usage"))
    if usage is None:
        return None
    details = object_or_none(usage.get(details_key))
    return Usage(
        input_tokens=count(usage, input_key),
        output_tokens=count(usage, output_key),
        cached_input_tokens=count(details, "cached_tokens"),
    )


def arguments_text(arguments: Any) -> str:
    """An OpenAI function call's `arguments`: a string exactly as sent, else JSON text.

    Argument strings are kept even when they are not valid JSON (the executor
    answers those calls with an `input_validation_error`); a missing value is
    `""`, and a decoded object (some compatible servers send one) is encoded.
    """
    if isinstance(arguments, str):
        return arguments
    return "" if arguments is None else dump_arguments(arguments)


def dump_arguments(arguments: Any) -> str:
    """Encode decoded arguments (Anthropic `input`) as JSON text.

    Values decoded from a JSON response are always encodable; `default=str`
    only guards against callers handing in Python objects.
    """
    return json.dumps(arguments, ensure_ascii=False, default=str)


def load_object(arguments: str) -> dict[str, Any] | None:
    """Decode argument text into a JSON object, or `None` if it is not one."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return cast(dict[str, Any], value) if isinstance(value, dict) else None
