"""Hardened parsing of the argument text a model sends with a tool call.

Model output is untrusted input. Besides plain JSON errors, `parse_arguments`
rejects what a lenient parser would let through and a tool might trip on:
duplicate keys (which value wins differs between parsers), `NaN` / `Infinity`
(not JSON per RFC 8259) and numbers that overflow to them (`1e999`), integers
longer than Python's 4,300-digit conversion limit, strings with unpaired UTF-16
surrogates (`"\ud800"`: they cannot be encoded as UTF-8, so they would break
Temporal's JSON payload converter later), nesting deeper than 64 levels, text
larger than a size limit (default 1 MiB), and prototype-pollution keys
(`__proto__`, and `constructor` holding `prototype`) for tools that forward
arguments to JavaScript, as the reference parser in `secure-json-parse` does.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any, Final, NoReturn, cast

from durable_tools.results import ToolCall

__all__ = [
    "DEFAULT_MAX_ARGUMENT_BYTES",
    "DEFAULT_MAX_DEPTH",
    "SUMMARY_LIMIT",
    "ArgumentsError",
    "parse_arguments",
    "summarize_call",
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


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _fail(f"the number {text[:40]} is out of range; send finite numbers")
    return value


def _check_text(value: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            _fail("arguments contain an unpaired UTF-16 surrogate (e.g. \\ud800); send valid text")


def _check_tree(value: Any, limit: int) -> None:
    """Check nesting depth and strings of `value`, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node)
        elif isinstance(node, dict):
            if depth > limit:
                _fail(f"arguments are nested deeper than {limit} levels")
            items = cast(dict[str, Any], node)
            for key, child in items.items():
                _check_text(key)
                stack.append((child, depth + 1))
        elif isinstance(node, list):
            if depth > limit:
                _fail(f"arguments are nested deeper than {limit} levels")
            children = cast(list[Any], node)
            stack.extend((child, depth + 1) for child in children)


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
        value = json.loads(
            text,
            object_pairs_hook=_object_hook,
            parse_constant=_reject_constant,
            parse_float=_parse_float,
        )
    except RecursionError:
        _fail(f"arguments are nested deeper than {max_depth} levels")
    except json.JSONDecodeError as exc:
        _fail(f"arguments are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except ArgumentsError:
        raise
    except ValueError as exc:
        # int() refuses integers over sys.get_int_max_str_digits() (4,300) digits.
        _fail(f"arguments contain a number that cannot be read: {str(exc)[:120]}")
    if not isinstance(value, dict):
        _fail(f"arguments must be a JSON object, got {_json_type(value)}")
    _check_tree(value, max_depth)
    return cast(dict[str, Any], value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else type(value).__name__


SUMMARY_LIMIT: Final[int] = 120
"""Characters of a call's one-line summary (`summarize_call`)."""


def summarize_call(call: ToolCall, limit: int = SUMMARY_LIMIT) -> str:
    """A readable one-line summary `name(arg=…, …)`, truncated to `limit` characters.

    The summaries of calls with arguments up to `_REMEMBERED_ARGUMENTS`
    characters are remembered (the latest 1,024): a call is summarized when
    planned, when its turn is recorded and when the workflow decodes the
    turn, and parsing its arguments each time cost more than looking up.

    Args:
        call: The call.
        limit: Maximum length in characters (default 120).

    Returns:
        E.g. `get_weather(city='Paris')`; unparseable arguments are shown raw.
    """
    if len(call.arguments) <= _REMEMBERED_ARGUMENTS:
        return _remembered_summary(call.name, call.arguments, limit)
    return _summary(call.name, call.arguments, limit)


_REMEMBERED_ARGUMENTS: Final[int] = 4096
"""Characters of argument text up to which `summarize_call` remembers a summary."""


def _summary(name: str, arguments: str, limit: int) -> str:
    try:
        args = parse_arguments(arguments)
        inner = ", ".join(f"{k}={v!r}" for k, v in args.items())
    except ArgumentsError:
        inner = arguments
    text = f"{name}({inner})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


_remembered_summary = functools.lru_cache(maxsize=1024)(_summary)
