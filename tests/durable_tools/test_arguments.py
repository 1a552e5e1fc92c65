"""Hardened parsing of a model's argument text: every rejection, and what passes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_tools import (
    ArgumentsError,
    Failure,
    Output,
    ToolCall,
    Toolkit,
    dynamic_tool,
    parse_arguments,
)
from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES, DEFAULT_MAX_DEPTH


def nested(depth: int) -> str:
    """An object nested `depth` levels deep: {"a": {"a": ... {}}}."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


REJECTED: list[tuple[str, str, str]] = [
    # (case, argument text, words the message must contain)
    ("not json", "{'city': 'Paris'}", "not valid JSON"),
    ("truncated", '{"city": "Par', "not valid JSON"),
    ("trailing garbage", '{"a": 1} x', "not valid JSON"),
    ("array", "[1, 2]", "must be a JSON object, got array"),
    ("string", '"Paris"', "must be a JSON object, got string"),
    ("number", "42", "must be a JSON object, got number"),
    ("null", "null", "must be a JSON object, got null"),
    ("duplicate key", '{"a": 1, "a": 2}', "duplicate key 'a'"),
    ("nested duplicate key", '{"x": [{"b": 1, "b": 1}]}', "duplicate key 'b'"),
    ("NaN", '{"a": NaN}', "NaN is not valid JSON"),
    ("Infinity", '{"a": Infinity}', "Infinity is not valid JSON"),
    ("-Infinity", '{"a": -Infinity}', "-Infinity is not valid JSON"),
    ("overflow to infinity", '{"a": 1e999}', "out of range"),
    ("huge integer", '{"a": ' + "9" * 5000 + "}", "number"),
    ("too deep", nested(DEFAULT_MAX_DEPTH + 1), "nested deeper than 64"),
    ("far too deep", "[" * 100_000 + "]" * 100_000, "nested deeper than 64"),
    ("__proto__", '{"__proto__": {"admin": true}}', "__proto__"),
    ("nested __proto__", '{"a": {"b": {"__proto__": {}}}}', "__proto__"),
    ("constructor.prototype", '{"constructor": {"prototype": {"x": 1}}}', "constructor.prototype"),
    ("lone surrogate", '{"a": "\\ud800"}', "surrogate"),
    ("lone surrogate key", '{"\\udc00": 1}', "surrogate"),
]


@pytest.mark.parametrize(("text", "words"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejected(text: str, words: str) -> None:
    with pytest.raises(ArgumentsError) as info:
        parse_arguments(text)
    assert words in str(info.value)


def test_text_over_the_size_limit_is_rejected_before_parsing() -> None:
    limit = 100
    fits = json.dumps({"a": "x" * 91})
    assert len(fits) == limit
    assert parse_arguments(fits, max_bytes=limit) == {"a": "x" * 91}
    with pytest.raises(ArgumentsError, match="101 bytes, over the limit of 100"):
        parse_arguments(json.dumps({"a": "x" * 92}), max_bytes=limit)


def test_default_size_limit_is_one_mebibyte_of_utf8() -> None:
    assert DEFAULT_MAX_ARGUMENT_BYTES == 1024 * 1024
    # 2 bytes per "é": the limit counts UTF-8 bytes, not characters
    text = json.dumps({"a": "é" * (DEFAULT_MAX_ARGUMENT_BYTES // 2)}, ensure_ascii=False)
    with pytest.raises(ArgumentsError, match="over the limit"):
        parse_arguments(text)


def test_nesting_at_the_limit_is_accepted() -> None:
    value = parse_arguments(nested(DEFAULT_MAX_DEPTH))
    depth = 0
    while value:
        value = value["a"]
        depth += 1
    assert depth == DEFAULT_MAX_DEPTH - 1


def test_custom_depth_limit() -> None:
    assert parse_arguments('{"a": [1]}', max_depth=2) == {"a": [1]}
    with pytest.raises(ArgumentsError, match="deeper than 2"):
        parse_arguments('{"a": [[1]]}', max_depth=2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("   \n", {}),
        ('{"city": "Paris", "days": 3}', {"city": "Paris", "days": 3}),
        ('{"a": 1.5e3, "b": -0.0, "c": null, "d": [true, false]}', None),
        ('{"constructor": "fine without prototype"}', None),
        ('{"constructor": {"name": "x"}}', None),
        ('{"prototype": 1}', None),
        ('{"emoji": "\\ud83d\\ude00"}', {"emoji": "😀"}),
        ('{"n": ' + "9" * 4000 + "}", None),
    ],
)
def test_accepted(text: str, expected: dict[str, Any] | None) -> None:
    value = parse_arguments(text)
    assert value == (expected if expected is not None else json.loads(text or "{}"))


def test_bytes_are_decoded_as_utf8() -> None:
    assert parse_arguments('{"a": "é"}'.encode()) == {"a": "é"}
    with pytest.raises(ArgumentsError, match="not valid UTF-8"):
        parse_arguments(b'{"a": "\xff"}')


def test_a_mapping_is_checked_like_text() -> None:
    assert parse_arguments({"a": [1, {"b": 2}]}) == {"a": [1, {"b": 2}]}
    with pytest.raises(ArgumentsError, match="not JSON-compatible"):
        parse_arguments({"a": float("nan")})
    with pytest.raises(ArgumentsError, match="not JSON-compatible"):
        parse_arguments({"a": object()})
    with pytest.raises(ArgumentsError, match="__proto__"):
        parse_arguments({"__proto__": {}})


@pytest.mark.parametrize("text", [r[1] for r in REJECTED], ids=[r[0] for r in REJECTED])
async def test_every_rejection_is_an_input_validation_error_from_the_executor(text: str) -> None:
    ran: list[object] = []
    kit = Toolkit(dynamic_tool("t", parameters={"type": "object"}, run=ran.append))
    events = [e async for e in kit.run([ToolCall(call_id="c1", name="t", arguments=text)])]
    assert len(events) == 1
    assert isinstance(events[0], Output)
    result = events[0].result
    assert isinstance(result, Failure)
    assert result.kind == "input_validation_error"
    assert result.reason.startswith("invalid arguments for t: ")
    assert ran == []


async def test_oversized_arguments_use_the_toolkit_limit() -> None:
    kit = Toolkit(dynamic_tool("t", run=lambda p: p))
    call = ToolCall(call_id="c1", name="t", arguments=json.dumps({"a": "x" * 50}))
    events = [e async for e in kit.run([call], max_argument_bytes=20)]
    assert isinstance(events[0], Output)
    result = events[0].result
    assert isinstance(result, Failure)
    assert result.kind == "input_validation_error"
    assert "over the limit of 20 bytes" in result.reason
