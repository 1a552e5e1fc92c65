"""`App` is the worker's one configuration: the plugin and `run_worker` take it.

Their keyword arguments of `App`'s field names build the same `App`; giving
both is a `TypeError`, and a wrong configuration raises the same error either way.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, PayloadCodec

from durable_tools import Toolkit, tool
from durable_tools.agents import Agent
from durable_tools.errors import ConfigurationError
from durable_tools.testing import ScriptedModel
from durable_tools.worker import App, DurableToolsPlugin, run_worker
from durable_tools.worker.app import AppOptions


@tool
async def ping() -> str:
    """Ping."""
    return "pong"


KIT = Toolkit(ping)
MODEL = ScriptedModel(["pong"])


class _Same(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def test_app_options_are_apps_fields_but_toolkits_and_models() -> None:
    fields = [f.name for f in dataclasses.fields(App)]
    assert [*typing.get_type_hints(AppOptions)] == [
        name for name in fields if name not in ("toolkits", "models")
    ]


def test_the_plugin_serves_an_app_as_it_serves_its_fields() -> None:
    agents = {"a": Agent(model="m", toolkit="kit")}
    app = App(toolkits={"kit": KIT}, models={"m": MODEL}, agents=agents, tool_threads=2)
    given = DurableToolsPlugin(app)
    built = DurableToolsPlugin(
        toolkits={"kit": KIT}, models={"m": MODEL}, agents=agents, tool_threads=2
    )
    assert given.app is app
    assert built.app == app
    for plugin in (given, built):
        assert plugin.agent_activities.toolkits == {"kit": KIT}
        assert plugin.agent_activities.agents == agents
    # `None` still means none, as the keyword arguments always took it.
    assert DurableToolsPlugin(toolkits={}, models={}, agents=None).app == App()


def test_an_app_and_its_fields_together_are_refused() -> None:
    with pytest.raises(TypeError, match="not both.*toolkits, agents"):
        DurableToolsPlugin(App(), toolkits={"kit": KIT}, agents={})


async def test_run_worker_refuses_an_app_and_its_fields_before_connecting() -> None:
    with pytest.raises(TypeError, match=r"run_worker takes app=App\(...\).*models, storage"):
        await run_worker("127.0.0.1:1", "default", "q", None, {}, app=App(), storage=None)


def test_a_wrong_configuration_raises_the_same_error_either_way() -> None:
    agents = {"a": Agent(model="m", toolkit="shop")}
    with pytest.raises(
        ConfigurationError, match="toolkit 'shop', which the worker does not"
    ) as app:
        App(toolkits={"kit": KIT}, agents=agents)
    with pytest.raises(ConfigurationError) as plugin:
        DurableToolsPlugin(toolkits={"kit": KIT}, models={}, agents=agents)
    assert str(plugin.value) == str(app.value)


def test_the_apps_codec_is_set_on_the_clients_converter() -> None:
    codec, clients = _Same(), _Same()
    converter = DurableToolsPlugin(App(payload_codec=codec))._data_converter(  # pyright: ignore[reportPrivateUsage]
        DataConverter(payload_codec=clients)
    )
    assert converter.payload_codec is codec
    kept = DurableToolsPlugin(App())._data_converter(  # pyright: ignore[reportPrivateUsage]
        DataConverter(payload_codec=clients)
    )
    assert kept.payload_codec is clients
