"""`durable_tools.agents`: declared agents, what a client may override, templates."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from durable_tools import Toolkit, tool
from durable_tools.agents import Agent, AgentOverrides, resolve_agent
from durable_tools.context import ContextPolicy, CustomStrategy, ElideToolOutputs, KeepLastTurns
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


def test_a_client_picks_only_a_context_policy_the_agent_allows() -> None:
    own = ContextPolicy(budget_tokens=100_000, strategies=(ElideToolOutputs(),))
    cheap = ContextPolicy(budget_tokens=20_000, strategies=(KeepLastTurns(turns=5),))
    agent = Agent(model="m", toolkit="k", context=own, allow=AgentOverrides(contexts=[cheap]))
    agents = {"a": agent}
    assert resolve_agent(AgentConfig(name="a"), agents).context == own
    assert resolve_agent(AgentConfig(name="a", context=own), agents).context == own
    assert resolve_agent(AgentConfig(name="a", context=cheap), agents).context == cheap
    for asked in (ContextPolicy(), cheap.model_copy(update={"budget_tokens": 20_001})):
        with pytest.raises(ConfigurationError, match="does not allow this context policy"):
            resolve_agent(AgentConfig(name="a", context=asked), agents)
    # Development mode: the client's policy, else the default.
    config = AgentConfig(name="a", model="m", toolkit="k")
    assert resolve_agent(config, {}).context == ContextPolicy()
    assert resolve_agent(config.model_copy(update={"context": cheap}), {}).context == cheap


def test_a_policy_travels_as_json_and_comes_back_equal() -> None:
    policy = ContextPolicy(
        budget_tokens=8_000,
        strategies=(
            ElideToolOutputs(keep_last_turns=1),
            CustomStrategy(name="mine", options={"k": [1, "two"]}),
            KeepLastTurns(turns=3),
        ),
    )
    config = AgentConfig(name="a", context=policy)
    assert AgentConfig.model_validate_json(config.model_dump_json()) == config


def test_custom_strategies_must_be_registered_at_construction() -> None:
    mine = ContextPolicy(strategies=(CustomStrategy(name="mine"),))
    with pytest.raises(ConfigurationError, match="context strategy 'mine'.*registered: none"):
        App(toolkits={"kit": KIT}, agents={"a": Agent(model="m", toolkit="kit", context=mine)})
    allowed = Agent(model="m", toolkit="kit", allow=AgentOverrides(contexts=[mine]))
    with pytest.raises(ConfigurationError, match="context strategy 'mine'"):
        App(toolkits={"kit": KIT}, agents={"a": allowed})
    App(
        toolkits={"kit": KIT},
        agents={"a": allowed},
        context_strategies={"mine": lambda request: request.items},
    )


def test_an_untrusted_policy_is_bounded() -> None:
    with pytest.raises(ValidationError):
        ContextPolicy(strategies=tuple(KeepLastTurns() for _ in range(17)))
    for bad in ({"budget_tokens": 0}, {"safety_margin": 1.0}, {"chars_per_token": 0}):
        with pytest.raises(ValidationError):
            ContextPolicy.model_validate(bad)
    with pytest.raises(ValidationError):
        ContextPolicy.model_validate({"strategies": [{"kind": "exec", "code": "rm -rf /"}]})


def test_a_development_worker_lets_a_client_pick_an_offline_model_for_any_agent() -> None:
    """Issue 25: the README's agent (an OpenAI model) could not run offline under `dev`."""
    agents = {"support": Agent(model="openai:gpt-4o", toolkit="shop")}
    for offline in ("test", "scripted:shop_script.yaml"):
        config = AgentConfig(name="support", model=offline)
        with pytest.raises(ConfigurationError, match="does not allow model"):
            resolve_agent(config, agents)
        resolved = resolve_agent(config, agents, offline_models=True)
        assert resolved.model == offline and resolved.toolkit == "shop"
    # Only offline models: a provider model stays the agent's choice.
    with pytest.raises(ConfigurationError, match="does not allow model 'openai:o3'"):
        resolve_agent(AgentConfig(name="support", model="openai:o3"), agents, offline_models=True)
