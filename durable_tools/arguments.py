"""Hardened parsing of the argument text a model sends with a tool call.

Model output is untrusted input. Besides plain JSON errors, `parse_arguments`
rejects what a lenient parser would let through and a tool might trip on:
duplicate keys (which value wins differs between parsers), `NaN` / `Infinity`
(not JSON per RFC 8259), nesting deeper than 64 levels, text larger than a
size limit (default 1 MiB), and prototype-pollution keys (`__proto__`, and
`constructor` holding `prototype`) for tools that forward arguments to
JavaScript, as the reference parser in `secure-json-parse` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, NoReturn

__all__ = [
    "DEFAULT_MAX_ARGUMENT_BYTES",
    "DEFAULT_MAX_DEPTH",
    "ArgumentsError",
    "parse_arguments",
]

DEFAULT_MAX_ARGUMENT_BYTES: Final[int] = 1024 * 1024
"""Default size limit of an argument string, in bytes of UTF-8 (1 MiB)."""

DEFAULT_MAX_DEPTH: Final[int] = 64
"""Default limit of nested objects/arrays in arguments."""


class ArgumentsError(ValueError):
    """The argument text is not an acceptable JSON object.

    The message is phrased for the model (it becomes the reason of an
    `input_validation_error` Failure).
    """


def _fail(message: str) -> NoReturn:
    raise ArgumentsError(message)


def _object_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            _fail(f"duplicate key {key!r} in arguments; send each key once")
        if key == "__proto__":
            _fail("the key '__proto__' is not allowed in arguments")
        obj[key] = value
    proto_holder = obj.get("constructor")
    if isinstance(proto_holder, dict) and "prototype" in proto_holder:
        _fail("the key 'constructor.prototype' is not allowed in arguments")
    return obj


def _reject_constant(name: str) -> NoReturn:
    _fail(f"{name} is not valid JSON; send numbers as finite values")


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of `value`, computed without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            children = node.values() if isinstance(node, dict) else node  # type: ignore[union-attr]
            stack.extend((child, depth + 1) for child in children)  # type: ignore[misc]
    return deepest


def parse_arguments(
    arguments: str | bytes | Mapping[str, Any],
    *,
    max_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> dict[str, Any]:
    """Parse a tool call's argument text into a JSON object.

    Args:
        arguments: The raw JSON text (as OpenAI sends it), or an already
            decoded mapping (as Anthropic and Gemini send it), which is
            re-encoded and checked the same way.
        max_bytes: Size limit in bytes of UTF-8 text (default 1 MiB).
        max_depth: Limit of nested objects/arrays (default 64).

    Returns:
        The arguments object. An empty string is read as `{}` (some providers
        send it for tools without parameters).

    Raises:
        ArgumentsError: The text is too large, not JSON, not an object, too
            deeply nested, or contains duplicate keys, NaN/Infinity or
            prototype-pollution keys. The message says what to fix.
    """
    if isinstance(arguments, Mapping):
        try:
            text = json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:
            _fail(f"arguments are not JSON-compatible: {exc}")
    elif isinstance(arguments, bytes):
        try:
            text = arguments.decode("utf-8")
        except UnicodeDecodeError:
            _fail("arguments are not valid UTF-8")
    else:
        text = arguments
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        _fail(f"arguments are {size} bytes, over the limit of {max_bytes} bytes; send less data")
    if not text.strip():
        return {}
    try:
        value = json.loads(text, object_pairs_hook=_object_hook, parse_constant=_reject_constant)
    except RecursionError:
        _fail(f"arguments are nested deeper than {max_depth} levels")
    except json.JSONDecodeError as exc:
        _fail(f"arguments are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    if not isinstance(value, dict):
        _fail(f"arguments must be a JSON object, got {type(value).__name__}")
    if _depth(value, max_depth) > max_depth:
        _fail(f"arguments are nested deeper than {max_depth} levels")
    return value  # type: ignore[return-value]
