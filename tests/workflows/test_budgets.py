"""Budgets stop a conversation before the model call that would pass them (dev server).

The `metered` model reports 400 tokens a call (300 in, 100 of them cached,
100 out); the worker's price table makes that 0.00045 USD. A conversation
waits in state `budget_exceeded` (status, pending, the pending-kinds search
attribute, events) until `raise_budget` gives it room; hostile
`raise_budget` inputs are recorded rejections, never a failed workflow task.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agent_support import LEDGER_ENV, metered, turns
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, eventually, running

from durable_tools.agents import Agent
from durable_tools.budgets import Budget, BudgetRaise, ModelPrice, Spend, turn_cost
from durable_tools.conversation import AgentConfig, ConversationOptions, ConversationResult
from durable_tools.handler_input import decode_input
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import Usage
from durable_tools.workflows.budget_check import over_budget
from durable_tools.workflows.visibility import PENDING_KINDS

T = TypeVar("T")

PRICE = ModelPrice(input_per_million=1.0, cached_input_per_million=0.5, output_per_million=2.0)
CALL_USD = (200 * 1.0 + 100 * 0.5 + 100 * 2.0) / 1_000_000
METERED = AgentConfig(name="main", model="metered", toolkit="tests")
TWO_TOOL_TURNS = turns(
    [("w1", "get_weather", {"city": "Oslo"})], [("w2", "get_weather", {"city": "Bergen"})]
)


@pytest.fixture
async def metered_harness(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    agents = {
        "main": Agent(model="metered", toolkit="tests"),
        "frugal": Agent(model="metered", toolkit="tests", budget=Budget(max_cost_usd=0.0008)),
    }
    async with running(
        dev_env,
        task_queue,
        ledger,
        models={"metered": ScriptedModel(metered)},
        agents=agents,
        prices={"metered": PRICE},
    ) as h:
        yield h


async def _exceeded(h: Harness, wf: str) -> None:
    async def probe() -> bool:
        return (await h.conversations.status(wf)).state == "budget_exceeded"

    await eventually(probe, what="state budget_exceeded")


# ------------------------------------------------------------------ pure parts


def test_cost_prices_cached_input_apart() -> None:
    usage = Usage(input_tokens=300, output_tokens=100, cached_input_tokens=100)
    assert turn_cost(usage, PRICE) == pytest.approx(CALL_USD)
    uncached_price = ModelPrice(input_per_million=1.0, output_per_million=2.0)
    assert turn_cost(usage, uncached_price) == pytest.approx(500 / 1_000_000)
    assert turn_cost(usage, None) is None and turn_cost(None, PRICE) is None


def test_the_next_call_is_estimated_by_the_last() -> None:
    limit = Budget(max_tokens=1000)
    spent = Spend().plus(Usage(input_tokens=300, output_tokens=100), None)
    assert over_budget(limit, spent) is None  # 400 + ~400 fits
    spent = spent.plus(Usage(input_tokens=300, output_tokens=100), None)
    assert over_budget(limit, spent) == (
        "800 tokens spent + ~400 for the next call > limit 1,000 tokens"
    )
    assert over_budget(Budget(max_tokens=0), Spend()) is not None  # nothing left at all
    assert over_budget(Budget(max_cost_usd=1.0), Spend(cost_usd=0.6, last_cost_usd=0.3)) is None


# ------------------------------------------------------------------ dev server


async def test_a_budget_stops_before_the_call_that_would_pass_it_and_a_raise_resumes(
    metered_harness: Harness,
) -> None:
    h = metered_harness
    model = h.models["metered"]
    options = ConversationOptions(search_attributes=True, budget=Budget(max_tokens=1000))
    wf = await h.start(TWO_TOOL_TURNS, agent=METERED, options=options)
    await _exceeded(h, wf)
    # Two calls ran (800 tokens); the third (~400 more) would pass 1,000.
    assert len(model.requests) == 2
    status = await h.conversations.status(wf)
    assert status.budget_exceeded is not None
    assert status.budget_exceeded.scope == "conversation"
    assert status.budget_exceeded.turn == 3
    assert "800 tokens spent + ~400 for the next call > limit 1,000 tokens" in (
        status.budget_exceeded.message
    )
    assert status.cost_usd == pytest.approx(2 * CALL_USD)
    pending = await h.conversations.pending(wf)
    assert pending.budget_exceeded == status.budget_exceeded

    async def kinds() -> bool:
        described = await h.client.get_workflow_handle(wf).describe()
        return list(described.typed_search_attributes.get(PENDING_KINDS) or []) == [
            "budget_exceeded"
        ]

    await eventually(kinds, what="pending kind budget_exceeded")
    await asyncio.sleep(0.5)
    assert len(model.requests) == 2  # it waits: no model call

    await h.conversations.raise_budget(wf, max_tokens=2000, requested_by="ops")
    await h.wait_assistant_text(wf, "done (metered)")
    status = await h.conversations.status(wf)
    assert status.state == "idle" and status.budget_exceeded is None
    assert status.cost_usd == pytest.approx(3 * CALL_USD)
    assert status.budget is not None and status.budget.conversation == Budget(max_tokens=2000)
    assert status.budget.spent.tokens == 1200
    await h.conversations.cancel(wf)  # ends the event stream
    async with asyncio.timeout(30):
        events = [e async for e in h.conversations.events(wf)]
    raised = [e for e in events if e.kind == "budget_raised"]
    assert [e.sent_by for e in raised] == ["ops"]
    assert [e.turn for e in events if e.kind == "budget_exceeded"] == [3]


async def test_an_agent_budget_stops_its_calls_and_carries_across_continue_as_new(
    metered_harness: Harness,
) -> None:
    h = metered_harness
    model = h.models["metered"]
    options = ConversationOptions(continue_as_new_after_turns=1, idle_timeout=2)
    wf = await h.start(TWO_TOOL_TURNS, agent=AgentConfig(name="frugal"), options=options)
    await _exceeded(h, wf)
    status = await h.conversations.status(wf)
    # 0.00045 spent + ~0.00045 > 0.0008: the second call waits, in a new run.
    assert len(model.requests) == 1 and status.runs >= 2
    assert status.budget_exceeded is not None and status.budget_exceeded.scope == "agent"
    assert status.budget_exceeded.agent == "frugal"
    await h.conversations.raise_budget(wf, scope="agent", max_cost_usd=1.0, requested_by="ops")
    result: ConversationResult = await h.result(wf)
    assert result.output == "done (metered)"
    assert result.cost_usd == pytest.approx(3 * CALL_USD)
    assert result.usage == {
        "metered": Usage(input_tokens=900, output_tokens=300, cached_input_tokens=300)
    }


async def test_the_follower_stops_at_the_budget(metered_harness: Harness) -> None:
    from durable_tools.worker.follow import Commands, Follower

    h = metered_harness
    options = ConversationOptions(budget=Budget(max_tokens=1000))
    wf = await h.start(TWO_TOOL_TURNS, agent=METERED, options=options)
    lines: list[str] = []
    follower = Follower(
        h.conversations,
        wf,
        emit=lines.append,
        commands=Commands(address="localhost:7233", namespace="default"),
    )
    async with asyncio.timeout(30):
        followed = await follower.follow(asyncio.Event())
    assert followed.outcome == "budget_exceeded"
    assert any("model turn 3 waits" in line and "limit 1,000 tokens" in line for line in lines)


async def test_a_message_sent_while_stopped_waits_for_the_raise_and_joins_the_call(
    metered_harness: Harness,
) -> None:
    h = metered_harness
    model = h.models["metered"]
    options = ConversationOptions(budget=Budget(max_tokens=0))
    wf = await h.start("hello", agent=METERED, options=options)
    await _exceeded(h, wf)
    await h.conversations.send(wf, "and another thing")
    await asyncio.sleep(0.5)
    assert model.requests == []  # a message does not end the wait
    assert (await h.conversations.status(wf)).state == "budget_exceeded"
    await h.conversations.raise_budget(wf, max_tokens=10_000)
    await h.wait_assistant_text(wf, "echo: and another thing")
    [request] = model.requests  # one call, with both messages
    texts = [getattr(item, "text", "") for item in request.transcript]
    assert texts == ["hello", "and another thing"]


async def test_cancel_ends_a_conversation_that_waits_on_its_budget(
    metered_harness: Harness,
) -> None:
    h = metered_harness
    options = ConversationOptions(budget=Budget(max_tokens=0))
    wf = await h.start("hello", agent=METERED, options=options)
    await _exceeded(h, wf)
    assert h.models["metered"].requests == []
    await h.conversations.cancel(wf, cancelled_by="ops")

    async def cancelled() -> bool:
        return (await h.conversations.status(wf)).state == "cancelled"

    await eventually(cancelled, what="cancelled")


async def test_the_cli_shows_the_stop_and_raises_the_budget(
    metered_harness: Harness, dev_env: WorkflowEnvironment
) -> None:
    from typer.testing import CliRunner

    from durable_tools.worker.cli import app

    h = metered_harness
    options = ConversationOptions(budget=Budget(max_tokens=1000, max_cost_usd=1.0))
    wf = await h.start(TWO_TOOL_TURNS, agent=METERED, options=options)
    await _exceeded(h, wf)
    address = ["--address", dev_env.client.service_client.config.target_host, "--timeout", "20"]

    def cli(*args: str) -> Any:
        return CliRunner().invoke(app, [*args, *address], env={"COLUMNS": "300"})

    shown = await asyncio.to_thread(cli, "status", wf)
    assert shown.exit_code == 0, shown.output
    assert "800 of 1,000 tokens; 0.0009 of 1.0000 USD" in shown.output
    assert "800 tokens spent + ~400 for the next call > limit 1,000 tokens" in shown.output
    refused = await asyncio.to_thread(cli, "budget", "raise", wf, "--tokens", "-5")
    assert refused.exit_code == 1 and "not a budget: max_tokens" in refused.output
    raised = await asyncio.to_thread(cli, "budget", "raise", wf, "--tokens", "5000", "--by", "ops")
    assert raised.exit_code == 0, raised.output
    assert "set the conversation budget of" in raised.output
    await h.wait_assistant_text(wf, "done (metered)")


async def test_start_and_run_take_a_budget_from_the_command_line(
    metered_harness: Harness, dev_env: WorkflowEnvironment
) -> None:
    from typer.testing import CliRunner

    from durable_tools.worker.cli import app

    h = metered_harness
    address = ["--address", dev_env.client.service_client.config.target_host, "--timeout", "20"]

    def cli(*args: str) -> Any:
        return CliRunner().invoke(app, [*args, *address], env={"COLUMNS": "300"})

    wf = f"cli-budget-{h.task_queue}"
    started = await asyncio.to_thread(
        cli, "start", wf, "--agent", "main", "--message", TWO_TOOL_TURNS,
        "--max-tokens", "1000", "--max-cost", "1.5", "--task-queue", h.task_queue,
    )  # fmt: skip
    assert started.exit_code == 0, started.output
    await _exceeded(h, wf)  # 400 + 400 tokens ran; the third call would pass 1,000
    budget = (await h.conversations.status(wf)).budget
    assert budget is not None and budget.conversation == Budget(max_tokens=1000, max_cost_usd=1.5)
    for command, flag, value in (
        ("start", "--max-tokens", "-1"),
        ("start", "--max-cost", "inf"),
        ("run", "--max-cost", "-0.5"),
    ):
        args = [command, "hello"] if command == "run" else [command, f"{wf}-x", "--agent", "main"]
        refused = await asyncio.to_thread(cli, *args, flag, value, "--task-queue", h.task_queue)
        assert refused.exit_code == 2, refused.output
        [line] = refused.output.strip().splitlines()
        assert line.startswith(f"error: invalid {flag}: "), line
    with pytest.raises(RPCError, match="not found"):  # refused before it connected
        await h.client.get_workflow_handle(f"{wf}-x").describe()


# ------------------------------------------------------------------ hostile raises


def _raw(value: Any) -> RawValue:
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode()))


_numbers = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["NaN", "Infinity", "-1", "1e400", "", "10"])
    | st.booleans()
    | st.none()
)
_raise_like = st.fixed_dictionaries(
    {},
    optional={
        "scope": st.sampled_from(["conversation", "agent", "team", "", 3]),
        "max_tokens": _numbers,
        "max_cost_usd": _numbers,
        "requested_by": st.text(max_size=300) | st.integers(),
        "extra": st.text(max_size=5),
    },
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_payloads = (
    _raise_like.map(_raw)
    | _json.map(_raw)
    | st.sampled_from(
        [
            RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"raise")),
            RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")),
            RawValue(Payload(metadata={}, data=b"")),
            _raw({"max_tokens": 1e400}),  # JSON `Infinity`
        ]
    )
)
_batches = st.lists(st.lists(_payloads, max_size=2), min_size=1, max_size=4)


def _fits(args: list[RawValue]) -> bool:
    """Whether the input is a raise that would let the conversation go on."""
    decoded = decode_input(args, BudgetRaise, pydantic_data_converter.payload_converter)
    if not isinstance(decoded, BudgetRaise) or decoded.scope != "conversation":
        return False
    return decoded.max_tokens is not None and decoded.max_tokens > 0


async def _workflow_task_failures(h: Harness, wf: str) -> list[str]:
    failed: list[str] = []
    async for event in h.client.get_workflow_handle(wf).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failed.append(str(event.workflow_task_failed_event_attributes.failure.message))
    return failed


async def _deliver(h: Harness, batch: list[list[RawValue]]) -> None:
    options = ConversationOptions(budget=Budget(max_tokens=0))
    wf = await h.start("hello", agent=METERED, options=options)
    await _exceeded(h, wf)
    handle = h.client.get_workflow_handle(wf)
    for args in batch:
        await handle.signal("raise_budget", args=args)
    await h.conversations.raise_budget(wf, max_tokens=10_000)
    await h.wait_assistant_text(wf, "echo: hello")
    assert await _workflow_task_failures(h, wf) == []
    budget = (await h.conversations.status(wf)).budget
    assert budget is not None and budget.conversation is not None
    assert budget.conversation.max_tokens == 10_000
    assert math.isfinite(budget.conversation.max_cost_usd or 0.0)


@pytest.mark.timeout(300)
async def test_hostile_raise_budget_inputs_never_fail_a_workflow_task(
    metered_harness: Harness,
) -> None:
    loop = asyncio.get_running_loop()

    def on_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    @settings(
        max_examples=20,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(batch=_batches)
    def prop(batch: list[list[RawValue]]) -> None:
        assume(not any(_fits(args) for args in batch))
        on_loop(_deliver(metered_harness, batch))

    await asyncio.to_thread(prop)
