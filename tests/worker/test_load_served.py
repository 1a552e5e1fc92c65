"""`load_served`: what a command-line worker serves keeps every field of its `--app`."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest

from durable_tools import Toolkit, tool
from durable_tools.agents import Agent
from durable_tools.context import ContextPolicy, ContextRequest, CustomStrategy
from durable_tools.transcript import TranscriptItem
from durable_tools.worker import App
from durable_tools.worker.toolkits import DEFAULT_TOOLKIT, load_served


@tool
async def ping() -> str:
    """Ping."""
    return "pong"


KIT = Toolkit(ping)


def only_last(request: ContextRequest) -> list[TranscriptItem]:
    return list(request.items[-1:])


def test_an_app_with_a_custom_context_strategy_loads_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = App(
        toolkits={"kit": KIT},
        agents={
            "a": Agent(
                model="m",
                toolkit="kit",
                context=ContextPolicy(strategies=(CustomStrategy(name="last"),)),
            )
        },
        context_strategies={"last": only_last},
        allow_offline_models=True,
        scripts_dir="scripts",
        decision_keys={"k1": b"k" * 32},
        tool_threads=3,
    )
    module = types.ModuleType("served_app_probe")
    module.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "served_app_probe", module)

    served = load_served("served_app_probe:app", [])

    assert served.context_strategies == {"last": only_last}
    assert served.toolkits == {"kit": KIT, DEFAULT_TOOLKIT: KIT}
    assert list(served.mcp_servers) == []
    for field in dataclasses.fields(App):
        if field.name not in ("toolkits", "mcp_servers"):
            assert getattr(served, field.name) == getattr(app, field.name), field.name


def test_an_app_that_is_not_an_app_object_keeps_its_mcp_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from durable_tools.errors import ConfigurationError
    from durable_tools.mcp import McpServerConfig
    from durable_tools.worker import load_app

    server = McpServerConfig(name="notes", command=sys.executable, args=["-c", "pass"])
    module = types.ModuleType("duck_app_probe")
    module.app = types.SimpleNamespace(toolkits={"kit": KIT}, models={}, mcp_servers=[server])  # type: ignore[attr-defined]
    module.bad = types.SimpleNamespace(toolkits={}, models={}, mcp_servers="notes")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "duck_app_probe", module)

    assert list(load_app("duck_app_probe:app").mcp_servers) == [server]
    assert list(load_served("duck_app_probe:app", []).mcp_servers) == [server]
    with pytest.raises(
        ConfigurationError, match="not a sequence of durable_tools.mcp.McpServerConfig"
    ):
        load_app("duck_app_probe:bad")
