"""Toolkit.run: one terminal event per call, failures as values, concurrency, progress."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from durable_tools import (
    ApprovalRequested,
    Decision,
    Emit,
    Failure,
    Ok,
    Output,
    Progress,
    ToolCall,
    ToolContext,
    ToolEvent,
    ToolFailure,
    Toolkit,
    call_digest,
    dynamic_tool,
    interaction_tool,
    prepare_call,
    provider_tool,
    sleep_tool,
)

OBJECT_X = {
    "type": "object",
    "properties": {"x": {"type": "integer"}},
    "required": ["x"],
    "additionalProperties": False,
}


def call(call_id: str, name: str, arguments: Any = None) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(call_id=call_id, name=name, arguments=text)


async def collect(kit: Toolkit, calls: list[ToolCall], **kwargs: Any) -> list[ToolEvent]:
    async with asyncio.timeout(10):
        return [e async for e in kit.run(calls, **kwargs)]


def by_id(events: list[ToolEvent]) -> dict[str, Ok | Failure]:
    return {e.result.call_id: e.result for e in events if isinstance(e, Output)}


def failure_of(events: list[ToolEvent], call_id: str, kind: str) -> Failure:
    result = by_id(events)[call_id]
    assert isinstance(result, Failure), result
    assert result.kind == kind, result
    return result


def events_of(events: list[ToolEvent], call_id: str) -> list[ToolEvent]:
    return [
        e
        for e in events
        if (isinstance(e, Progress) and e.call_id == call_id)
        or (isinstance(e, Output) and e.result.call_id == call_id)
    ]


async def never() -> None:
    await asyncio.Event().wait()


# failures as values ---------------------------------------------------------------


async def test_unknown_tool_lists_the_available_names() -> None:
    kit = Toolkit(dynamic_tool("b_tool", run=lambda: 1), dynamic_tool("a_tool", run=lambda: 1))
    events = await collect(kit, [call("c1", "c_tool")])
    failure = failure_of(events, "c1", "unknown_tool")
    assert failure.tool == "c_tool"
    assert "no tool named 'c_tool'" in failure.reason
    assert "available tools: a_tool, b_tool" in failure.reason


async def test_unknown_tool_in_an_empty_toolkit() -> None:
    failure = failure_of(await collect(Toolkit(), [call("c1", "x")]), "c1", "unknown_tool")
    assert "(none)" in failure.reason


async def test_long_tool_lists_are_cut_in_the_reason() -> None:
    kit = Toolkit(*(dynamic_tool(f"t{i:03}", run=lambda: 1) for i in range(60)))
    failure = failure_of(await collect(kit, [call("c1", "x")]), "c1", "unknown_tool")
    assert "t049" in failure.reason and "t050" not in failure.reason
    assert "and 10 more" in failure.reason


@pytest.mark.parametrize(
    "t",
    [
        sleep_tool(),
        provider_tool("web_search", provider="openai"),
        interaction_tool("ask_user"),
    ],
    ids=["signal", "provider", "interaction"],
)
async def test_non_local_tools_are_not_run(t: Any) -> None:
    events = await collect(Toolkit(t), [call("c1", t.name, {"seconds": 1})])
    failure = failure_of(events, "c1", "non_local_tool")
    assert t.kind in failure.reason


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"x": "1"}', "$.x: '1' is not of type 'integer'"),
        ("{}", "$: 'x' is a required property"),
        ('{"x": 1, "y": 2}', "Additional properties are not allowed"),
    ],
)
async def test_bad_arguments_are_input_validation_errors(arguments: str, words: str) -> None:
    ran: list[Any] = []
    kit = Toolkit(dynamic_tool("t", parameters=OBJECT_X, run=ran.append))
    failure = failure_of(
        await collect(kit, [call("c1", "t", arguments)]), "c1", "input_validation_error"
    )
    assert words in failure.reason
    assert ran == []


async def test_an_exception_is_an_execution_error_with_type_and_message() -> None:
    def boom() -> None:
        raise KeyError("id")

    failure = failure_of(
        await collect(Toolkit(dynamic_tool("t", run=boom)), [call("c1", "t")]),
        "c1",
        "execution_error",
    )
    assert failure.reason == "KeyError: 'id'"


async def test_tool_failure_gives_its_own_kind() -> None:
    def missing() -> None:
        raise ToolFailure("not_found", "no such order; list orders first")

    failure = failure_of(
        await collect(Toolkit(dynamic_tool("t", run=missing)), [call("c1", "t")]), "c1", "not_found"
    )
    assert failure.reason == "no such order; list orders first"


async def test_a_hanging_tool_times_out() -> None:
    kit = Toolkit(dynamic_tool("t", run=never, timeout=0.05))
    started = time.monotonic()
    failure = failure_of(await collect(kit, [call("c1", "t")]), "c1", "timed_out")
    assert time.monotonic() - started < 5
    assert "0.05 s" in failure.reason


async def test_a_timeout_error_raised_by_the_tool_itself_is_an_execution_error() -> None:
    async def flaky_http() -> None:
        raise TimeoutError("upstream took too long")

    kit = Toolkit(dynamic_tool("t", run=flaky_http, timeout=30))
    failure = failure_of(await collect(kit, [call("c1", "t")]), "c1", "execution_error")
    assert "TimeoutError: upstream took too long" in failure.reason


@pytest.mark.parametrize("mode", ["return", "raise"])
async def test_a_tool_raising_cancelled_error_still_gets_its_one_output(mode: Any) -> None:
    async def rude() -> None:
        raise asyncio.CancelledError()

    kit = Toolkit(dynamic_tool("t", run=rude, failure_mode=mode))
    failure = failure_of(await collect(kit, [call("c1", "t")]), "c1", "execution_error")
    assert "CancelledError" in failure.reason


async def test_failure_mode_raise_propagates_the_exception() -> None:
    def boom() -> None:
        raise ValueError("bad")

    kit = Toolkit(dynamic_tool("t", run=boom, failure_mode="raise"))
    with pytest.raises(ValueError, match="bad"):
        await collect(kit, [call("c1", "t")])


async def test_non_json_output_without_a_success_schema_is_a_failure() -> None:
    kit = Toolkit(dynamic_tool("t", run=lambda: {"handle": object()}))
    failure_of(await collect(kit, [call("c1", "t")]), "c1", "output_validation_error")


async def test_runs_of_every_shape_are_accepted() -> None:
    async def three(p: Any, emit: Emit, ctx: ToolContext) -> str:
        emit("hi")
        return ctx.call_id

    kit = Toolkit(
        dynamic_tool("zero", run=lambda: 0),
        dynamic_tool("one", run=lambda p: p),
        dynamic_tool("two", run=lambda p, emit: emit("x")),
        dynamic_tool("three", run=three),
        dynamic_tool("star", run=lambda *args: len(args)),
    )
    names = ["zero", "one", "two", "three", "star"]
    results = by_id(await collect(kit, [call(n, n) for n in names]))
    assert {k: v.value for k, v in results.items() if isinstance(v, Ok)} == {
        "zero": 0,
        "one": {},
        "two": None,
        "three": "three",
        "star": 3,
    }


async def test_idempotency_key_function_reaches_the_context() -> None:
    seen: list[str] = []

    async def run(p: Any, emit: Emit, ctx: ToolContext) -> None:
        seen.append(ctx.idempotency_key)

    kit = Toolkit(dynamic_tool("t", run=run))
    await collect(kit, [call("c1", "t")], idempotency_key=lambda c: f"wf-1/{c.call_id}")
    assert seen == ["wf-1/c1"]


async def test_prepare_call_never_raises_for_a_broken_ref() -> None:
    kit = Toolkit(
        dynamic_tool(
            "t",
            parameters={"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
            run=lambda p: p,
        )
    )
    prepared = prepare_call(kit, call("c1", "t", {"a": 1}))
    assert isinstance(prepared, Failure)
    assert prepared.kind == "input_validation_error"


# every call one terminal event ---------------------------------------------------------


async def test_each_call_gets_exactly_one_output_in_a_mixed_batch() -> None:
    def boom() -> None:
        raise RuntimeError("x")

    kit = Toolkit(
        dynamic_tool("ok", parameters=OBJECT_X, run=lambda p: p["x"]),
        dynamic_tool("boom", run=boom),
        dynamic_tool("hang", run=never, timeout=0.02),
        sleep_tool(),
    )
    calls = [
        call("1", "ok", {"x": 1}),
        call("2", "boom"),
        call("3", "hang"),
        call("4", "nope"),
        call("5", "ok", "garbage"),
        call("6", "sleep", {"seconds": 5}),
        call("7", "ok", {"x": 2}),
    ]
    events = await collect(kit, calls, concurrency=2)
    outputs = [e for e in events if isinstance(e, Output)]
    assert sorted(o.result.call_id for o in outputs) == ["1", "2", "3", "4", "5", "6", "7"]
    kinds = {k: (v.kind if isinstance(v, Failure) else v.value) for k, v in by_id(events).items()}
    assert kinds == {
        "1": 1,
        "2": "execution_error",
        "3": "timed_out",
        "4": "unknown_tool",
        "5": "input_validation_error",
        "6": "non_local_tool",
        "7": 2,
    }


async def test_no_calls_yield_nothing() -> None:
    assert await collect(Toolkit(dynamic_tool("t", run=lambda: 1)), []) == []


# concurrency --------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 3])
async def test_concurrency_bound_is_respected(limit: int) -> None:
    running = 0
    peak = 0

    async def work() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    kit = Toolkit(dynamic_tool("t", run=work))
    events = await collect(kit, [call(str(i), "t") for i in range(10)], concurrency=limit)
    assert len(by_id(events)) == 10
    assert peak == limit


async def test_without_a_bound_all_calls_run_at_once() -> None:
    started = 0
    all_started = asyncio.Event()

    async def work() -> None:
        nonlocal started
        started += 1
        if started == 8:
            all_started.set()
        await all_started.wait()  # deadlocks (and times out) unless all 8 run together

    kit = Toolkit(dynamic_tool("t", run=work))
    events = await collect(kit, [call(str(i), "t") for i in range(8)])
    assert all(isinstance(r, Ok) for r in by_id(events).values())


async def test_time_waiting_for_a_slot_does_not_count_against_the_timeout() -> None:
    async def slowish() -> str:
        await asyncio.sleep(0.05)
        return "done"

    kit = Toolkit(dynamic_tool("t", run=slowish, timeout=0.5))
    events = await collect(kit, [call(str(i), "t") for i in range(15)], concurrency=1)
    assert all(isinstance(r, Ok) for r in by_id(events).values())


# progress -----------------------------------------------------------------------------


async def test_progress_is_delivered_in_real_time() -> None:
    """The slow tool's progress reaches the consumer before the fast tool's output.

    The slow tool blocks until the consumer has seen its progress event, and the
    fast tool until then too; buffering progress until a run ends would deadlock
    and fail on the timeout.
    """
    consumer_saw_progress = asyncio.Event()

    async def slow(p: Any, emit: Emit) -> str:
        emit("halfway")
        await consumer_saw_progress.wait()
        await asyncio.sleep(0.02)
        return "slow done"

    async def fast() -> str:
        await consumer_saw_progress.wait()
        return "fast done"

    kit = Toolkit(dynamic_tool("slow", run=slow), dynamic_tool("fast", run=fast))
    events: list[ToolEvent] = []
    async with asyncio.timeout(5):
        async for event in kit.run([call("s", "slow"), call("f", "fast")]):
            events.append(event)
            if isinstance(event, Progress):
                consumer_saw_progress.set()
    assert events == [
        Progress("s", "slow", "halfway"),
        Output(Ok(call_id="f", tool="fast", value="fast done")),
        Output(Ok(call_id="s", tool="slow", value="slow done")),
    ]


async def test_progress_of_a_call_comes_before_its_output() -> None:
    async def chatty(p: Any, emit: Emit) -> int:
        for i in range(p["x"]):
            emit(i)
            await asyncio.sleep(0)
        return p["x"]

    def chatty_sync(p: Any, emit: Emit) -> int:
        for i in range(p["x"]):
            emit(i)
        return p["x"]

    kit = Toolkit(
        dynamic_tool("a", parameters=OBJECT_X, run=chatty),
        dynamic_tool("s", parameters=OBJECT_X, run=chatty_sync),
    )
    calls = [call(f"{n}{i}", n, {"x": i}) for i in range(1, 6) for n in ("a", "s")]
    events = await collect(kit, calls, concurrency=3)
    for c in calls:
        expected = int(c.call_id[1:])
        assert events_of(events, c.call_id) == [
            *(Progress(c.call_id, c.name, i) for i in range(expected)),
            Output(Ok(call_id=c.call_id, tool=c.name, value=expected)),
        ]


# approval gating in Toolkit.run ---------------------------------------------------------


def gated_kit(ran: list[Any]) -> Toolkit:
    return Toolkit(
        dynamic_tool(
            "pay",
            parameters={"type": "object"},
            run=lambda p: ran.append(p) or "paid",
            needs_approval=True,
        ),
        dynamic_tool(
            "maybe",
            parameters=OBJECT_X,
            run=lambda p: "ran",
            needs_approval=lambda p, ctx: p["x"] > 100,
        ),
    )


async def test_a_gated_call_without_a_decision_is_requested_not_run() -> None:
    ran: list[Any] = []
    c = call("c1", "pay", '{"amount": 5}')
    events = await collect(gated_kit(ran), [c])
    assert events == [ApprovalRequested(c, call_digest(c.name, c.call_id, '{"amount": 5}'))]
    assert ran == []


async def test_an_approved_call_runs() -> None:
    ran: list[Any] = []
    c = call("c1", "pay", {"amount": 5})
    decision = Decision(
        call_id="c1", approved=True, arguments_hash=call_digest(c.name, c.call_id, c.arguments)
    )
    events = await collect(gated_kit(ran), [c], decisions={"c1": decision})
    assert events == [Output(Ok(call_id="c1", tool="pay", value="paid"))]
    assert ran == [{"amount": 5}]


async def test_a_denied_call_fails_with_the_denial_reason() -> None:
    ran: list[Any] = []
    c = call("c1", "pay", {"amount": 5})
    decision = Decision(
        call_id="c1",
        approved=False,
        arguments_hash=call_digest(c.name, c.call_id, c.arguments),
        reason="too expensive this month",
    )
    failure = failure_of(
        await collect(gated_kit(ran), [c], decisions={"c1": decision}), "c1", "denied"
    )
    assert "too expensive this month" in failure.reason
    assert ran == []


async def test_a_decision_for_other_arguments_leaves_the_call_pending() -> None:
    ran: list[Any] = []
    c = call("c1", "pay", {"amount": 5000})
    forged = Decision(
        call_id="c1", approved=True, arguments_hash=call_digest(c.name, c.call_id, {"amount": 5})
    )
    events = await collect(gated_kit(ran), [c], decisions={"c1": forged})
    assert events == [ApprovalRequested(c, call_digest(c.name, c.call_id, c.arguments))]
    assert ran == []


async def test_needs_approval_can_depend_on_the_input() -> None:
    small, big = call("c1", "maybe", {"x": 1}), call("c2", "maybe", {"x": 1000})
    events = await collect(gated_kit([]), [small, big])
    assert Output(Ok(call_id="c1", tool="maybe", value="ran")) in events
    assert ApprovalRequested(big, call_digest(big.name, big.call_id, big.arguments)) in events
    assert len(events) == 2


async def test_a_needs_approval_function_that_raises_is_an_execution_error() -> None:
    def broken(p: Any, ctx: Any) -> bool:
        raise RuntimeError("policy service down")

    kit = Toolkit(dynamic_tool("t", run=lambda: 1, needs_approval=broken))
    failure = failure_of(await collect(kit, [call("c1", "t")]), "c1", "execution_error")
    assert "policy service down" in failure.reason
