"""Tools receive the worker's dependencies, built once per worker, typed through ToolContext."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_tools import ConfigurationError, ToolContext, Toolkit, tool
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call
from durable_tools.transcript import ToolCall
from durable_tools.worker.runner import App, load_app


@dataclass
class ShopDeps:
    """What the shop's tools share: here a fake pool that counts its users."""

    name: str
    queries: list[str] = field(default_factory=list[str])
    closed: bool = False


EVENTS: list[str] = []


@asynccontextmanager
async def shop_deps() -> AsyncIterator[ShopDeps]:
    deps = ShopDeps(name=f"pool-{len(EVENTS)}")
    EVENTS.append(f"open {deps.name}")
    try:
        yield deps
    finally:
        deps.closed = True
        EVENTS.append(f"close {deps.name}")


@tool
async def lookup_order(order_id: str, ctx: ToolContext[ShopDeps]) -> dict[str, Any]:
    """Look up an order in the shop's database.

    Args:
        order_id: The order id.
    """
    ctx.deps.queries.append(order_id)
    return {"order_id": order_id, "pool": ctx.deps.name, "closed": ctx.deps.closed}


kit = Toolkit(lookup_order)


async def test_deps_built_once_per_worker_and_closed_at_shutdown(
    time_env: WorkflowEnvironment,
) -> None:
    EVENTS.clear()
    model = ScriptedModel(
        [[call("c1", "lookup_order", order_id="A-1"), call("c2", "lookup_order", order_id="A-2")]]
    )
    async with AgentTestEnvironment.start(
        toolkit=kit, model=model, deps=shop_deps, env=time_env
    ) as env:
        first = await env.start_conversation("Where are A-1 and A-2?")
        second = await env.start_conversation("And again?")
        for chat in (first, second):
            await env.wait_for_reply(chat)
            outputs = await env.tool_outputs(chat)
            for call_id in ("c1", "c2"):
                assert '"pool":"pool-0"' in outputs[call_id].content.replace(" ", "")
                assert '"closed":false' in outputs[call_id].content.replace(" ", "")
        assert EVENTS == ["open pool-0"]
    assert EVENTS == ["open pool-0", "close pool-0"]


async def test_plain_and_async_factories_and_toolkit_run() -> None:
    plain = ShopDeps(name="plain")
    events = [
        e
        async for e in kit.run(
            [ToolCall(call_id="c1", name="lookup_order", arguments='{"order_id": "X"}')], deps=plain
        )
    ]
    assert plain.queries == ["X"]
    assert any("plain" in str(e) for e in events)

    from durable_tools.worker.plugin import DurableToolsPlugin

    async def make() -> ShopDeps:
        return ShopDeps(name="awaited")

    plugin = DurableToolsPlugin(toolkits={"default": kit}, models={}, deps=make)
    async with plugin._run_context():  # pyright: ignore[reportPrivateUsage]
        assert plugin.agent_activities.deps == ShopDeps(name="awaited")
    assert plugin.agent_activities.deps is None


def test_load_app_refuses_deps_that_are_not_a_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    module = types.ModuleType("deps_app_probe")
    module.app = App(toolkits={"shop": kit}, deps=shop_deps)  # type: ignore[attr-defined]
    module.bad = types.SimpleNamespace(toolkits={"shop": kit}, models={}, deps=ShopDeps("x"))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "deps_app_probe", module)
    assert load_app("deps_app_probe:app").deps is shop_deps
    with pytest.raises(ConfigurationError, match="not a factory"):
        load_app("deps_app_probe:bad")
