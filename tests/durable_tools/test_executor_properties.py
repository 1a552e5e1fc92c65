"""Property: whatever a model sends, Toolkit.run answers every call exactly once.

Arbitrary call lists (known and unknown names, valid, invalid and garbage
argument text) go to a toolkit whose tools succeed, raise, hang past a tiny
timeout, emit progress (from the event loop and from threads), fail with a
custom kind, or need approval. For every run: no exception, exactly one
terminal event per call id, progress only before a call's terminal event, and
the transcript is reconciled once the outputs (with `denied` for calls still
waiting for approval) are appended.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_tools import (
    ApprovalRequested,
    AssistantMessage,
    Emit,
    Failure,
    Ok,
    Progress,
    ToolCall,
    ToolEvent,
    ToolFailure,
    Toolkit,
    UserMessage,
    append_turn,
    denied,
    dynamic_tool,
    find_unanswered_calls,
    is_reconciled,
    provider_tool,
    sleep_tool,
    tool,
)
from durable_tools.results import FAILURE_KINDS

INT_ARG = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 20}},
    "required": ["n"],
    "additionalProperties": False,
}


def echo(p: Any) -> Any:
    return p


def boom(p: Any) -> None:
    raise RuntimeError(f"boom {p}")


async def hang() -> None:
    await asyncio.Event().wait()


async def chatty(p: Any, emit: Emit) -> int:
    for i in range(p["n"]):
        emit({"step": i})
        await asyncio.sleep(0)
    return p["n"]


def chatty_sync(p: Any, emit: Emit) -> int:
    for i in range(p["n"]):
        emit(i)
    return p["n"]


def refuse(p: Any) -> None:
    raise ToolFailure("not_allowed", "this account cannot do that")


@tool
async def typed(city: str, days: int = 1) -> dict[str, Any]:
    """Typed tool.

    Args:
        city: A city.
        days: Days.
    """
    return {"city": city, "days": days}


TOOLKIT = Toolkit(
    dynamic_tool("echo", parameters={"type": "object"}, run=echo),
    dynamic_tool("boom", run=boom),
    dynamic_tool("hang", run=hang, timeout=0.005),
    dynamic_tool("chatty", parameters=INT_ARG, run=chatty),
    dynamic_tool("chatty_sync", parameters=INT_ARG, run=chatty_sync),
    dynamic_tool("refuse", run=refuse),
    dynamic_tool("gated", run=echo, needs_approval=True),
    dynamic_tool(
        "gated_big", parameters=INT_ARG, run=echo, needs_approval=lambda p, ctx: p["n"] > 10
    ),
    typed,
    sleep_tool(),
    provider_tool("web_search", provider="openai", config={"type": "web_search"}),
)
GATED = {"gated", "gated_big"}
CUSTOM_KINDS = {"not_allowed"}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)

argument_texts = st.one_of(
    st.builds(lambda n: json.dumps({"n": n}), st.integers(-3, 25)),
    st.builds(lambda c, d: json.dumps({"city": c, "days": d}), st.text(max_size=5), json_values),
    st.builds(json.dumps, st.dictionaries(st.text(max_size=5), json_values, max_size=3)),
    st.builds(json.dumps, json_values),  # valid JSON, often not an object
    st.text(max_size=30),  # garbage
    st.sampled_from(
        [
            "",
            "{",
            '{"n": 1, "n": 2}',
            '{"n": NaN}',
            '{"n": 1e999}',
            '{"__proto__": {"n": 1}}',
            '{"constructor": {"prototype": {}}}',
            '{"n": "\\ud800"}',
            '{"a":' * 70 + "1" + "}" * 70,
            "[" * 5000 + "]" * 5000,
            '{"n": ' + "7" * 5000 + "}",
        ]
    ),
)

tool_names = st.one_of(
    st.sampled_from([*TOOLKIT.tools, "unknown", "Echo", "echo ", ""]),
    st.text(max_size=12),
)

call_specs = st.lists(st.tuples(tool_names, argument_texts), max_size=12)


def events_for(calls: list[ToolCall], concurrency: int | None) -> list[ToolEvent]:
    async def main() -> list[ToolEvent]:
        async with asyncio.timeout(20):
            return [e async for e in TOOLKIT.run(calls, concurrency)]

    return asyncio.run(main())


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(specs=call_specs, concurrency=st.sampled_from([None, 1, 2, 5]))
def test_every_call_gets_exactly_one_terminal_event(
    specs: list[tuple[str, str]], concurrency: int | None
) -> None:
    calls = [
        ToolCall(call_id=f"call_{i}", name=name, arguments=arguments)
        for i, (name, arguments) in enumerate(specs)
    ]
    by_id = {c.call_id: c for c in calls}

    events = events_for(calls, concurrency)  # must not raise

    terminal: dict[str, Ok | Failure | ApprovalRequested] = {}
    for event in events:
        if isinstance(event, Progress):
            assert event.call_id in by_id
            assert event.call_id not in terminal, "progress after the call's terminal event"
            continue
        key = event.call.call_id if isinstance(event, ApprovalRequested) else event.result.call_id
        assert key in by_id
        assert key not in terminal, f"two terminal events for {key}"
        terminal[key] = event if isinstance(event, ApprovalRequested) else event.result
    assert set(terminal) == set(by_id)

    outputs: list[Ok | Failure] = []
    for call_id, outcome in terminal.items():
        call = by_id[call_id]
        if isinstance(outcome, ApprovalRequested):
            assert call.name in GATED
            assert outcome.call == call
            outputs.append(denied(call, "denied by the property test"))
            continue
        assert outcome.tool == call.name
        if isinstance(outcome, Failure):
            assert outcome.kind in FAILURE_KINDS | CUSTOM_KINDS, outcome
            assert outcome.reason
        if call.name not in TOOLKIT:
            assert isinstance(outcome, Failure) and outcome.kind == "unknown_tool"
        elif call.name in ("sleep", "web_search"):
            assert isinstance(outcome, Failure) and outcome.kind == "non_local_tool"
        elif call.name == "hang":
            assert isinstance(outcome, Failure)
            assert outcome.kind in ("timed_out", "input_validation_error")
        outputs.append(outcome)

    turn = AssistantMessage(tool_calls=tuple(calls))
    history = append_turn([UserMessage(text="go")], turn, outputs)
    assert is_reconciled(history)
    assert find_unanswered_calls(history) == []
