"""Agents: declared on the worker, requested by a client, resolved for each model turn.

One agent has three forms, one for each party that holds it (DESIGN
invariant 8: clients choose an agent by name; the worker decides what runs):

| form | type | held by | checked |
|---|---|---|---|
| declared | `Agent` | the worker: `App(agents={"support": Agent(...)})` | when the `App` is built |
| requested | `AgentConfig` | the conversation's workflow input, in history | on every model turn |
| resolved | `ResolvedAgent` | one model activity attempt, in memory | it is the check's result |

- **Declared.** `Agent` says which model, toolkit, instructions template,
  settings, output type and context policy an agent has, and what a client
  may override (`AgentOverrides`). It is checked at construction:
  `Agent.__post_init__` checks the template against the variables,
  `App.__post_init__` checks the toolkit and offline models
  (`check_agents`) and custom context strategies
  (`durable_tools.context.check_policy`).
- **Requested.** `durable_tools.conversation.AgentConfig` is what a client
  sends (`Conversations.start(id, agent="support", variables=...)`, and each
  handoff): the agent's name and whatever it asks for (model, toolkit,
  instructions, settings, variables, context policy). It is workflow input,
  recorded in history, so its field names and JSON shape never change, and
  the worker trusts none of it: the workflow reads only its name, its
  `model_retry` (the model activity's retry policy) and, where a model
  turn's result names no model or toolkit (event and span labels), the
  ones it asks for.
- **Resolved.** `resolve_agent(request, declared)` is the one place a
  request becomes a `ResolvedAgent`, the configuration one model turn runs
  with. The model activity calls it on every turn (`AgentActivities`), so a
  worker whose declared agents changed applies them at the next turn, and
  nothing resolved is recorded. With agents declared, the request must name
  one, and each field it sets must be the agent's own or an allowed
  override (on a worker that allows offline models, a development worker,
  any offline model too); anything else fails the turn with a one-line
  `ConfigurationError` (`ModelFailure.type` `AgentRefused`) and the
  conversation waits in state `model_failed`.

A worker that declares no agents is in development mode: the request is
taken as it is (`resolve_agent` then needs its model and toolkit, and
refuses variables, which fill only a declared agent's template).

```python
app = App(
    toolkits={"shop": kit},
    agents={
        "support": Agent(
            model="openai:gpt-4o",
            toolkit="shop",
            instructions="You are the shop's support agent. The customer is {customer_name}.",
            settings={"temperature": 0.2},
            allow=AgentOverrides(models=["openai:gpt-4o-mini"], settings=["temperature"],
                                 variables=["customer_name"]),
        )
    },
)
# A client's request: the agent's name and the variable it may fill.
await conversations.start("ticket-42", agent="support", variables={"customer_name": "Ana"})
```
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel

from durable_tools.agent_tools import check_agent_tools
from durable_tools.budgets import Budget
from durable_tools.context import ContextPolicy, check_policy
from durable_tools.conversation import AgentConfig, MessagesSupersede
from durable_tools.errors import ConfigurationError
from durable_tools.policies import Policy

__all__ = [
    "MAX_VARIABLE_CHARS",
    "OFFLINE_MODEL_PREFIXES",
    "Agent",
    "AgentOverrides",
    "ResolvedAgent",
    "check_agents",
    "is_offline_model",
    "resolve_agent",
    "template_variables",
]

MAX_VARIABLE_CHARS: Final[int] = 10_000
"""Most characters of one template variable's value a client may send."""

OFFLINE_MODEL_PREFIXES: Final[tuple[str, ...]] = ("scripted:",)
"""Spec prefixes of offline models (besides the spec `test`)."""


def is_offline_model(spec: str) -> bool:
    """Whether a model spec names an offline model (`test`, `scripted:FILE`)."""
    return spec == "test" or spec.startswith(OFFLINE_MODEL_PREFIXES)


@dataclass(frozen=True, kw_only=True)
class AgentOverrides:
    """What a client may choose when it starts a conversation with an agent.

    Attributes:
        models: Models a client may pick instead of the agent's own
            (`Conversations.start(..., model=...)`); the agent's model is
            always allowed. Default none.
        settings: Provider setting keys a client may set
            (`settings={"temperature": 0.7}`); they replace the agent's value.
            Default none.
        variables: Template variables of the instructions a client may fill
            (`variables={"customer_name": "Ana"}`). Default none.
        instructions: Whether a client may replace the instructions
            altogether (default False).
        contexts: Context policies a client may pick instead of the
            agent's own (`AgentConfig(context=...)`, compared by value);
            the agent's policy is always allowed. Default none.
    """

    models: Sequence[str] = ()
    settings: Sequence[str] = ()
    variables: Sequence[str] = ()
    instructions: bool = False
    contexts: Sequence[ContextPolicy] = ()


@dataclass(frozen=True, kw_only=True)
class Agent:
    """An agent a worker serves, as it declares it (`App.agents`; the declared form).

    Attributes:
        model: A model registered on the worker (`App.models`) or a model
            spec it resolves (`"openai:gpt-4o"`; see `durable_tools.models`).
        toolkit: The name of a toolkit of the worker (`App.toolkits`).
        instructions: System instructions; a template whose `{name}` fields
            are filled from the client's variables and `variables` (plain
            names only; `{{` and `}}` are literal braces).
        settings: Provider settings on every turn (`{"temperature": 0.2}`).
        output_type: A pydantic model the conversation's final output must
            match: the toolkit's `finish` tool is replaced, for this agent, by
            `finish_tool(output_type=output_type)` (and added if the toolkit
            has none). Default `None`: the toolkit as it is.
        variables: Default values of template variables.
        context: What the model sees of a long transcript and how it is
            reduced (`durable_tools.context`; default `ContextPolicy()`: the
            whole transcript, summarized once on a context-length error).
        allow: What a client may override (default: nothing).
        messages_supersede: Who may supersede this agent's pending approvals
            by sending a message from the inbox: `"deciders"` (only people
            who may decide every pending approval) or `"anyone"`. Default
            `None`: the conversation's `ConversationOptions.messages_supersede`
            (itself `"deciders"` by default). Reported to the workflow with
            each model turn (`PendingState.messages_supersede`).
        policy: The agent's approval policy (`durable_tools.policies.Policy`):
            CEL rules that run, gate (by groups, with a quorum) or deny its
            tool calls, before the toolkit's and MCP servers' defaults
            (`App.policies`). Default `None`: those defaults, then each
            tool's own `needs_approval`.
        shadow_policy: A candidate approval policy, evaluated beside
            `policy` on every call of this agent, in the same activity; it
            never changes what happens, but where it disagrees (another
            outcome, other approvers or quorum) the call's plan records it,
            a `policy_disagreement` event is published and the
            `durable_tools.policy.disagreements` metric counts it
            (docs/policies.md, "Shadow mode"). Default `None`.
        budget: What this agent may spend in each conversation (tokens,
            USD; `durable_tools.budgets.Budget`), beside the conversation's
            own `ConversationOptions.budget`. Reported to the workflow with
            each model turn. Default `None`: no limit of its own.

    Raises:
        ConfigurationError: The instructions are not a valid template, or
            use a field that is neither allowed nor has a default.
    """

    model: str
    toolkit: str
    instructions: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict[str, Any])
    output_type: type[BaseModel] | None = None
    variables: Mapping[str, str] = field(default_factory=dict[str, str])
    context: ContextPolicy = field(default_factory=ContextPolicy)
    allow: AgentOverrides = field(default_factory=AgentOverrides)
    messages_supersede: MessagesSupersede | None = None
    policy: Policy | None = None
    shadow_policy: Policy | None = None
    budget: Budget | None = None

    def __post_init__(self) -> None:
        """Check the instructions template against the declared variables."""
        if not self.model or not self.toolkit:
            raise ConfigurationError("an Agent needs a model and a toolkit")
        known = {*self.allow.variables, *self.variables}
        for name in template_variables(self.instructions):
            if name not in known:
                raise ConfigurationError(
                    f"the instructions use {{{name}}}, which is neither in "
                    f"allow=AgentOverrides(variables=[...]) nor in variables={{...}}"
                )


@dataclass(frozen=True, kw_only=True)
class ResolvedAgent:
    """The configuration one model turn runs with, decided on the worker (the resolved form).

    Made only by `resolve_agent`, on every model turn; never recorded in history.

    Attributes:
        name: The agent's name.
        model: The model (registered name or spec).
        toolkit: The toolkit's name.
        instructions: The instructions, variables filled.
        settings: The provider settings.
        output_type: The final output's type, or `None`.
        context: The context policy.
        messages_supersede: The agent's `messages_supersede`, or `None`.
        policy: The agent's approval policy, or `None`.
        shadow_policy: The agent's candidate policy (shadow mode), or `None`.
        budget: The agent's budget, or `None`.
    """

    name: str
    model: str
    toolkit: str
    instructions: str
    settings: dict[str, Any]
    output_type: type[BaseModel] | None = None
    context: ContextPolicy = field(default_factory=ContextPolicy)
    messages_supersede: MessagesSupersede | None = None
    policy: Policy | None = None
    shadow_policy: Policy | None = None
    budget: Budget | None = None


def template_variables(template: str) -> list[str]:
    """The field names of an instructions template, in order.

    Raises:
        ConfigurationError: The template is malformed (a lone `{` or `}`),
            or a field is not a plain name (`{0}`, `{a.b}`, `{a[0]}`,
            `{a!r}`, `{a:>10}`).
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigurationError(
            f"invalid instructions template: {exc} (write {{{{ and }}}} for literal braces)"
        ) from None
    names: list[str] = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise ConfigurationError(
                f"invalid instructions template field {{{name}}}: use a plain name, "
                "e.g. {customer_name}"
            )
        names.append(name)
    return names


def resolve_agent(
    config: AgentConfig, agents: Mapping[str, Agent], *, offline_models: bool = False
) -> ResolvedAgent:
    """A client's request resolved against the declared agents: what a turn runs with.

    The one place a request (`AgentConfig`) becomes a `ResolvedAgent`. With
    no declared agents (development mode) the request is taken as it is.
    Otherwise `config.name` must be a declared agent, and each field the
    client set must be the agent's own or an allowed override.

    Args:
        config: The conversation's requested agent (from history, untrusted).
        agents: The worker's declared agents by name.
        offline_models: Whether the worker allows offline models
            (`App(allow_offline_models=True)`, which `durable-tools dev`
            sets): a development worker, where a client may pick an offline
            model (`test`, `scripted:FILE`) for any agent, so an app written
            for a provider runs with no key. Default False: only the agent's
            own model and `allow.models`.

    Returns:
        The resolved configuration.

    Raises:
        ConfigurationError: One line saying what is not allowed: an
            undeclared agent, a model, toolkit, setting, variable or context
            policy the agent does not allow, instructions it does not let a client replace, a
            missing template variable; in development mode, a configuration
            without a model or toolkit, or with variables.
    """
    if not agents:
        return _development(config)
    agent = agents.get(config.name)
    if agent is None:
        raise ConfigurationError(
            f"agent {config.name!r} is not declared on this worker "
            f"(declared: {', '.join(sorted(agents))})"
        )
    prefix = f"agent {config.name!r}"
    model = config.model or agent.model
    offline = offline_models and is_offline_model(model)
    if model != agent.model and model not in agent.allow.models and not offline:
        allowed = ", ".join([agent.model, *agent.allow.models])
        raise ConfigurationError(f"{prefix} does not allow model {model!r} (allowed: {allowed})")
    if config.toolkit and config.toolkit != agent.toolkit:
        raise ConfigurationError(
            f"{prefix} uses toolkit {agent.toolkit!r}; a client cannot choose {config.toolkit!r}"
        )
    settings = dict(agent.settings)
    for key, value in config.settings.items():
        if key not in agent.allow.settings and not (key in settings and settings[key] == value):
            allowed = ", ".join(agent.allow.settings) or "none"
            raise ConfigurationError(
                f"{prefix} does not allow setting {key!r} (allowed: {allowed})"
            )
        settings[key] = value
    for key, value in config.variables.items():
        if key not in agent.allow.variables:
            allowed = ", ".join(agent.allow.variables) or "none"
            raise ConfigurationError(
                f"{prefix} does not allow variable {key!r} (allowed: {allowed})"
            )
        if len(value) > MAX_VARIABLE_CHARS:
            raise ConfigurationError(
                f"{prefix}: variable {key!r} has {len(value)} characters, over the limit "
                f"of {MAX_VARIABLE_CHARS}"
            )
    context = config.context or agent.context
    if context != agent.context and context not in agent.allow.contexts:
        raise ConfigurationError(
            f"{prefix} does not allow this context policy (AgentOverrides(contexts=[...]) "
            f"lists {len(agent.allow.contexts)})"
        )
    if config.instructions and config.instructions != agent.instructions:
        if not agent.allow.instructions:
            raise ConfigurationError(f"{prefix} does not let a client replace its instructions")
        instructions = config.instructions  # the client's own text: no template
    else:
        instructions = _render(prefix, agent.instructions, {**agent.variables, **config.variables})
    return ResolvedAgent(
        name=config.name,
        model=model,
        toolkit=agent.toolkit,
        instructions=instructions,
        settings=settings,
        output_type=agent.output_type,
        context=context,
        messages_supersede=agent.messages_supersede,
        policy=agent.policy,
        shadow_policy=agent.shadow_policy,
        budget=agent.budget,
    )


def _render(prefix: str, template: str, values: Mapping[str, str]) -> str:
    names = template_variables(template)
    missing = [n for n in names if n not in values]
    if missing:
        raise ConfigurationError(f"{prefix} needs the variable {missing[0]!r}")
    # Fields are plain names (checked above), so format_map only looks them up.
    return template.format_map(values)


def _development(config: AgentConfig) -> ResolvedAgent:
    if not config.model or not config.toolkit:
        missing = "model" if not config.model else "toolkit"
        raise ConfigurationError(
            f"agent {config.name!r} names no {missing}, and this worker declares no agents "
            "(App(agents={...})) to take it from"
        )
    if config.variables:
        raise ConfigurationError(
            f"agent {config.name!r} has variables, but this worker declares no agents "
            "whose instructions they fill"
        )
    return ResolvedAgent(
        name=config.name,
        model=config.model,
        toolkit=config.toolkit,
        instructions=config.instructions,
        settings=dict(config.settings),
        context=config.context or ContextPolicy(),
    )


def check_agents(
    agents: Mapping[str, Agent],
    *,
    toolkits: Mapping[str, object],
    models: Mapping[str, object],
    allow_offline_models: bool,
    context_strategies: Mapping[str, object] | None = None,
) -> None:
    """Fail at construction on agents a worker could never serve.

    `App` and `AgentActivities` both call it when they are built.

    Args:
        agents: The declared agents by name.
        toolkits: The worker's toolkits by name.
        models: The worker's registered models by name.
        allow_offline_models: Whether unregistered offline models are allowed.
        context_strategies: The worker's custom context strategies by name;
            `None` (default): the agents' context policies are not checked.

    Raises:
        ConfigurationError: An agent is not an `Agent`, names a toolkit the
            worker does not have, or uses an offline model (`test`,
            `scripted:FILE`, its own or an allowed one) that is not
            registered while offline models are not allowed; or one of its
            context policies (its own or an allowed one) names a custom
            strategy not in `context_strategies` (`check_policy`); or its
            toolkit has an agent tool (`agent_tool`) running an agent the
            worker does not declare.
    """
    for name, agent in agents.items():
        if not isinstance(agent, Agent):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                f"agent {name!r} is a {type(agent).__name__}, not an Agent(model=..., toolkit=...)"
            )
        if agent.toolkit not in toolkits:
            raise ConfigurationError(
                f"agent {name!r} uses toolkit {agent.toolkit!r}, which the worker does not "
                f"have (toolkits: {', '.join(sorted(toolkits)) or 'none'})"
            )
        for model in (agent.model, *agent.allow.models):
            if model not in models and is_offline_model(model) and not allow_offline_models:
                raise ConfigurationError(
                    f"agent {name!r} uses the offline model {model!r}: allow offline models "
                    "(App(allow_offline_models=True)) or register it in models={...}"
                )
    if context_strategies is not None:
        for name, agent in agents.items():
            for policy in (agent.context, *agent.allow.contexts):
                check_policy(policy, context_strategies, f"agent {name!r}")
    check_agent_tools(agents, toolkits)
