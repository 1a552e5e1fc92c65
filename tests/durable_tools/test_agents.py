"""`durable_tools.agents`: declared agents, what a client may override, templates."""

from __future__ import annotations

import pytest

from durable_tools import Toolkit, tool
from durable_tools.agents import Agent, AgentOverrides, resolve_agent
from durable_tools.conversation import AgentConfig
from durable_tools.errors import ConfigurationError
from durable_tools.worker import App


@tool
async def ping() -> str:
    """Ping."""
    return "pong"


KIT = Toolkit(ping)


def test_template_fields_must_be_declared_plain_names() -> None:
    Agent(model="m", toolkit="k", instructions="Hi {name}, {{literal}}", variables={"name": "x"})
    with pytest.raises(ConfigurationError, match=r"use \{who\}"):
        Agent(model="m", toolkit="k", instructions="Hi {who}")
    for bad in ("{a.__class__}", "{a[0]}", "{a!r}", "{0}", "{}", "{a:>10}"):
        with pytest.raises(ConfigurationError, match="plain name"):
            Agent(model="m", toolkit="k", instructions=bad, allow=AgentOverrides(variables=["a"]))
    with pytest.raises(ConfigurationError, match="literal braces"):
        Agent(model="m", toolkit="k", instructions="a { b")


def test_variable_values_are_not_templates() -> None:
    agent = Agent(
        model="m", toolkit="k", instructions="Hi {n}.", allow=AgentOverrides(variables=["n"])
    )
    config = AgentConfig(name="a", variables={"n": "{n} {0.__class__}"})
    assert resolve_agent(config, {"a": agent}).instructions == "Hi {n} {0.__class__}."


def test_app_checks_agents_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="toolkit 'shop', which the worker does not"):
        App(toolkits={"kit": KIT}, agents={"a": Agent(model="m", toolkit="shop")})
    with pytest.raises(ConfigurationError, match="offline model 'test'"):
        App(toolkits={"kit": KIT}, agents={"a": Agent(model="test", toolkit="kit")})
    App(
        toolkits={"kit": KIT},
        agents={"a": Agent(model="test", toolkit="kit")},
        allow_offline_models=True,
    )


def test_variable_values_are_bounded() -> None:
    agent = Agent(model="m", toolkit="k", allow=AgentOverrides(variables=["n"]))
    with pytest.raises(ConfigurationError, match="over the limit"):
        resolve_agent(AgentConfig(name="a", variables={"n": "x" * 10_001}), {"a": agent})


def test_allowed_instructions_are_taken_as_text() -> None:
    agent = Agent(model="m", toolkit="k", allow=AgentOverrides(instructions=True))
    resolved = resolve_agent(AgentConfig(name="a", instructions="Be {brief}."), {"a": agent})
    assert resolved.instructions == "Be {brief}."
