"""Retry defaults follow the effect (issue 10, item 7), as planned for a call.

A call that needs approval, or a tool whose annotations mark it destructive,
runs at most once unless the tool is idempotent; the tool's own `retry=` wins;
`at_most_once=True` with more than one attempt is a configuration error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from durable_tools import RetryPolicy, ToolCall, Toolkit, dynamic_tool, tool
from durable_tools.activities.planning import plan_calls
from durable_tools.errors import ConfigurationError
from durable_tools.tools import Tool


def _run() -> str:
    return "ok"


def _make(**options: Any) -> Tool:
    @tool(name="t", **options)
    def t(amount: int = 0) -> str:
        """A tool.

        Args:
            amount: Cents.
        """
        return "ok"

    return t


def _planned(made: Tool, **args: Any) -> tuple[int, bool, bool]:
    (plan,) = plan_calls(
        Toolkit(made), [ToolCall(call_id="c1", name=made.name, arguments=json.dumps(args))], []
    )
    assert plan.failure is None, plan.failure
    return plan.max_attempts, plan.at_most_once, plan.needs_approval


DESTRUCTIVE = {"destructive": True}
CASES: list[tuple[str, dict[str, Any], tuple[int, bool, bool]]] = [
    # (what, @tool options, (max_attempts, at_most_once, needs_approval))
    ("plain tool", {}, (3, False, False)),
    ("approval-gated", {"needs_approval": True}, (1, True, True)),
    ("gated, idempotent", {"needs_approval": True, "idempotent": True}, (3, False, True)),
    ("gated, own retry wins", {"needs_approval": True, "retry": 5}, (5, False, True)),
    (
        "gated, own RetryPolicy wins",
        {"needs_approval": True, "retry": RetryPolicy(max_attempts=4, initial_interval=0.5)},
        (4, False, True),
    ),
    (
        "gated, idempotent annotations",
        {"needs_approval": True, "annotations": {"destructive": False, "idempotent": True}},
        (3, False, True),
    ),
    (
        "gated, read-only annotations",
        {"needs_approval": True, "annotations": {"read_only": True}},
        (3, False, True),
    ),
    ("destructive annotations", {"annotations": DESTRUCTIVE}, (1, True, False)),
    (
        "not read-only: MCP's default is destructive",
        {"annotations": {"read_only": False}},
        (1, True, False),
    ),
    ("not destructive", {"annotations": {"destructive": False}}, (3, False, False)),
    ("read-only", {"annotations": {"read_only": True}}, (3, False, False)),
    (
        "destructive, idempotent annotations",
        {"annotations": {"destructive": True, "idempotent": True}},
        (3, False, False),
    ),
    (
        "destructive, idempotent=True",
        {"annotations": DESTRUCTIVE, "idempotent": True},
        (3, False, False),
    ),
    ("destructive, own retry wins", {"annotations": DESTRUCTIVE, "retry": 4}, (4, False, False)),
    (
        "idempotent=False overrides idempotent annotations",
        {"needs_approval": True, "annotations": {"idempotent": True}, "idempotent": False},
        (1, True, True),
    ),
    ("at_most_once", {"at_most_once": True}, (1, True, False)),
    ("at_most_once with retry=1", {"at_most_once": True, "retry": 1}, (1, True, False)),
    (
        "at_most_once beats idempotent annotations",
        {"at_most_once": True, "annotations": {"idempotent": True, "destructive": False}},
        (1, True, False),
    ),
]


@pytest.mark.parametrize(("options", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_planned_retry_follows_the_effect(
    options: dict[str, Any], expected: tuple[int, bool, bool]
) -> None:
    assert _planned(_make(**options)) == expected


def test_a_needs_approval_function_decides_per_call() -> None:
    tip = _make(needs_approval=lambda args, ctx: args.amount > 100)
    assert _planned(tip, amount=5) == (3, False, False)
    assert _planned(tip, amount=500) == (1, True, True)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: _make(**kw),
        lambda **kw: dynamic_tool("t", run=_run, **kw),
    ],
    ids=["@tool", "dynamic_tool"],
)
def test_dynamic_tool_and_tool_take_the_same_options(make: Callable[..., Tool]) -> None:
    assert _planned(make(needs_approval=True)) == (1, True, True)
    assert _planned(make(needs_approval=True, idempotent=True)) == (3, False, True)
    assert _planned(make(at_most_once=True)) == (1, True, False)
    assert _planned(make(annotations=DESTRUCTIVE)) == (1, True, False)
    assert _planned(make()) == (3, False, False)
    made = make(needs_approval=True, idempotent=True)
    assert (made.idempotent, made.at_most_once) == (True, False)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: _make(**kw),
        lambda **kw: dynamic_tool("t", run=_run, **kw),
    ],
    ids=["@tool", "dynamic_tool"],
)
@pytest.mark.parametrize("retry", [3, RetryPolicy(max_attempts=2)], ids=["int", "RetryPolicy"])
def test_retry_with_at_most_once_is_a_configuration_error(
    make: Callable[..., Tool], retry: int | RetryPolicy
) -> None:
    with pytest.raises(ConfigurationError) as info:
        make(at_most_once=True, retry=retry)
    message = str(info.value)
    assert "'t'" in message and "at_most_once=True" in message and "retry=" in message
    assert "drop `retry`" in message  # says how to fix it


def test_at_most_once_with_idempotent_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="contradicts idempotent=True"):
        _make(at_most_once=True, idempotent=True)


def test_the_tool_methods_state_the_policy() -> None:
    gated = _make(needs_approval=True)
    assert gated.retry is None  # no policy of its own: the effect decides
    assert gated.retry_policy_for(gated=True).max_attempts == 1
    assert gated.at_most_once_for(gated=True) is True
    assert gated.retry_policy_for(gated=False) == RetryPolicy()
    assert gated.at_most_once_for(gated=False) is False
