"""A tool call's digest: what binds a decision to exactly the call a person saw.

`call_digest` is SHA-256 over one RFC 8785 (JSON Canonicalization Scheme)
document of the tool name, the call id and the call's arguments;
`arguments_hash` the same over the arguments alone; `canonical_json` the
encoding both use (the standard library's where it writes the same bytes,
`rfc8785` otherwise). Used by `durable_tools.approvals` (which re-exports
them), the planner, the inbox and the CLI, so every side computes the same
digest from the same call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, cast

import rfc8785

from durable_tools.arguments import ArgumentsError, parse_arguments

__all__ = ["arguments_hash", "call_digest", "canonical_json"]


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 (JSON Canonicalization Scheme) encoding of a JSON value.

    Object keys sorted by UTF-16 code units, no whitespace, strings as UTF-8
    with minimal escaping, numbers in ECMAScript's shortest form (`1.0` and
    `1` are both `1`, `-0.0` is `0`, `1e21` is `1e+21`); implemented by the
    `rfc8785` package.

    Args:
        value: JSON data (dict, list, str, int, float, bool, None).

    Returns:
        The canonical UTF-8 bytes.

    Raises:
        ValueError: The value is not canonicalizable JSON (NaN, infinity,
            an integer beyond I-JSON's 2**53 range, a lone surrogate).
    """
    try:
        if _stdlib_canonical(value):
            # The same bytes, from the C encoder: every call is digested when planned.
            return json.dumps(
                value, ensure_ascii=False, sort_keys=True, separators=(",", ":")
            ).encode("utf-8")
        return rfc8785.dumps(value)
    except Exception as exc:  # the package's own error types and UnicodeEncodeError
        raise ValueError(f"not canonicalizable JSON: {type(exc).__name__}: {exc}") from exc


_SAFE_INTEGER = 2**53 - 1
"""I-JSON's integer range (RFC 7493), which RFC 8785 numbers are held to."""


def _stdlib_canonical(value: Any) -> bool:
    r"""Whether `json.dumps(sort_keys, no spaces, UTF-8)` writes `value` as RFC 8785 does.

    It does for dicts with string keys, lists, strings, booleans, None and
    integers within I-JSON's range: the two escape the same characters the
    same way (`"`, `\`, U+0000-U+001F; `\u00xx` lowercase) and write
    integers alike. Keys sort alike unless one holds a character past
    U+FFFF (RFC 8785 sorts by UTF-16 code units, Python by code points).
    Floats (ECMAScript's number format) and anything else take `rfc8785`.
    """
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        kind: type[object] = type(cast(object, node))
        if kind is str or kind is bool or node is None:
            continue
        if kind is int:
            if not -_SAFE_INTEGER <= node <= _SAFE_INTEGER:
                return False
        elif kind is dict:
            for key in node:
                if type(key) is not str or not (key.isascii() or max(key) < "\U00010000"):
                    return False
            stack.extend(node.values())
        elif kind is list:
            stack.extend(node)
        else:
            return False
    return True


def _arguments_value(arguments: str | Mapping[str, Any]) -> dict[str, Any]:
    """What the digest holds for the arguments: the parsed object, or the text it could not be."""
    try:
        parsed = parse_arguments(arguments)
        canonical_json(parsed)
        return {"arguments": parsed}
    except (ArgumentsError, ValueError):
        text = arguments if isinstance(arguments, str) else repr(arguments)
        # A lone surrogate has no UTF-8 form: keep its code points visible instead.
        return {"arguments_text": text.encode("utf-8", "backslashreplace").decode("utf-8")}


def call_digest(tool: str, call_id: str, arguments: str | Mapping[str, Any]) -> str:
    """The digest a decision or answer must carry: what a person saw, canonically.

    SHA-256 of the RFC 8785 canonical JSON of
    `{"arguments": <parsed arguments>, "call_id": ..., "tool": ...}`, so key
    order, whitespace and number spelling (`1.0` / `1`) never change it and
    any change of the tool, the call id or an argument value does. Argument
    text that is not a JSON object (or not canonicalizable) is held as
    `{"arguments_text": <the text>, ...}` instead.

    Args:
        tool: The tool name.
        call_id: The call id.
        arguments: The raw argument text or a decoded mapping.

    Returns:
        64 lowercase hex characters.
    """
    try:  # the common case, canonicalized once (a turn plans every call with it)
        parsed = parse_arguments(arguments)
        data = canonical_json({"tool": tool, "call_id": call_id, "arguments": parsed})
    except (ArgumentsError, ValueError):
        document = {"tool": tool, "call_id": call_id, **_arguments_value(arguments)}
        try:
            data = canonical_json(document)
        except ValueError:  # a tool name or call id with a lone surrogate
            data = repr(document).encode("utf-8", "backslashreplace")
    return hashlib.sha256(data).hexdigest()


def arguments_hash(arguments: str | Mapping[str, Any]) -> str:
    """SHA-256 of a call's canonical arguments alone (RFC 8785).

    Not what a decision carries any more (see `call_digest`, which also
    covers the tool name and the call id); kept for callers that compare
    arguments.

    Args:
        arguments: The raw argument text or a decoded mapping.

    Returns:
        64 lowercase hex characters.
    """
    value = _arguments_value(arguments)
    return hashlib.sha256(canonical_json(value)).hexdigest()
