"""The application a worker serves: `App`, and `load_app` that finds one by spec.

An *application* is any Python object with two mappings, `toolkits` and
`models`, found by a `"module:attribute"` spec (as `uvicorn` finds an ASGI app):

```python
# myapp.py
app = App(toolkits={"support": kit}, models={"gpt": adapter})
```

```sh
durable-tools worker --app myapp:app --address localhost:7233 --task-queue agents
```
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from temporalio.converter import PayloadCodec

from durable_tools.agents import Agent, check_agents
from durable_tools.budgets import ModelPrice
from durable_tools.context import ContextStrategyFunction
from durable_tools.decision_keys import VerifyingKey, check_verifying_keys
from durable_tools.errors import ConfigurationError
from durable_tools.mcp.config import McpServerConfig
from durable_tools.models.base import Model
from durable_tools.policies import Policy
from durable_tools.specs import attribute_of, put_on_path, split_spec
from durable_tools.storage import PayloadStorage
from durable_tools.toolkit import Toolkit
from durable_tools.webhooks import Webhook

__all__ = ["App", "AppOptions", "DepsFactory", "app_of", "load_app"]

DepsFactory = Callable[[], Any]
"""`App.deps`: returns the dependencies, an awaitable of them, or an async
context manager of them (entered for the worker's lifetime)."""


@dataclass(frozen=True, kw_only=True)
class App:
    """What a worker serves, by name: the one configuration of a worker.

    `DurableToolsPlugin(app)`, `run_worker(..., app=app)` and
    `durable-tools worker --app module:app` all take it; their keyword
    arguments of the same names are conveniences that build one. Each field
    is documented here only.

    Clients start conversations with a declared agent by its name
    (`Conversations.start(id, agent="support", variables=...)`); a worker
    that declares no agents runs any configuration a client sends
    (`AgentConfig(model="gpt", toolkit="support")`): the development mode
    (see `durable_tools.agents`).

    Attributes:
        toolkits: Toolkits by the name agents and agent configurations use
            (`Agent.toolkit`, `AgentConfig.toolkit`).
        models: Model adapters by name (`Agent.model`, `AgentConfig.model`;
            `await adapter(request)` returns an `AssistantMessage`).
        mcp_servers: MCP servers whose tools join every toolkit (as
            `prefix__tool`); the worker connects to them when it starts and
            closes them when it stops (`durable_tools.mcp`). Default none.
        deps: A factory of the tools' dependencies (database pools, HTTP
            clients), called once when a worker starts; tools receive its
            result as `ToolContext.deps` (annotate `ctx: ToolContext[MyDeps]`).
            The factory may return the object, an awaitable of it, or an
            async context manager entered for the worker's lifetime and exited
            at shutdown (e.g. an `@asynccontextmanager` function that opens and
            closes a pool). Default none (`ctx.deps` is `None`).
        payload_codec: A Temporal `PayloadCodec` (e.g. encryption) for every
            payload the worker writes and reads, beside the pydantic payload
            converter; clients of these conversations need the same codec
            (`durable_tools.codec`). `None` (default): the client's own codec,
            if any.
        agents: The agents clients choose by name, each with its model,
            instructions, toolkit, settings and what a client may override
            (`durable_tools.agents.Agent`). With agents declared, a
            conversation naming any other agent, or asking for an override
            its agent does not allow, fails its model turn (state
            `model_failed`). None (default): development mode, any
            configuration a client sends runs.
        allow_offline_models: Let conversations name the offline models
            `test` (calls every tool with generated arguments) and
            `scripted:FILE` when they are not registered in `models`.
            Default False: a production worker refuses them;
            `durable-tools dev` and the demo allow them.
        scripts_dir: The directory `scripted:FILE` paths are read under; a
            path outside it (absolute, `..`, a symlink out) is refused.
            `None` (default): the worker's working directory.
        decision_keys: Keys by key id that signed decisions are checked
            with (`durable_tools.approvals.sign_decision`; several during a
            rotation): HMAC secrets of at least 32 bytes, or Ed25519 public
            keys (the signing service alone holds the private key;
            `durable_tools.decision_keys`). `None` (default): those in
            `DURABLE_TOOLS_DECISION_KEYS` (`k1:BASE64,k2:ed25519:BASE64`). Held
            by the worker, never recorded in history (docs/approvals.md,
            "Trust model").
        storage: External storage for payloads over its threshold, set on the
            client's data converter (its codec and failure converter kept) and
            raising the tool result and argument limits to its
            `max_payload_bytes` (default 64 MiB; `durable_tools.storage`).
            Every worker and client of the conversations needs the same
            storage. `None` (default): the client's data converter as it is
            (its own `external_storage`, if any, is kept), and Temporal's
            2 MiB payload limit applies.
        context_strategies: Custom context strategies by the name an agent's
            context policy gives (`CustomStrategy(name=...)`; see
            docs/context.md). Default none.
        tool_threads: Most sync tool calls running at once, each in a thread
            of the worker's own pool (`durable_tools.tool_threads`; a thread
            whose call was cancelled counts until its tool returns). `None`
            (default): the worker's activity slots
            (`max_concurrent_activities`), else 100.
        policies: Default approval policies (`durable_tools.policies.Policy`)
            by toolkit name, and by `mcp:SERVER` for an MCP server's tools;
            an agent's own `Agent.policy` comes first (docs/policies.md).
            Default none.
        prices: The price table (`durable_tools.budgets.ModelPrice`) by
            model, as turns name it (`"openai:gpt-4o"`, or a registered
            model's name): the model activity prices each turn with it and
            records the cost in history, for budgets and `status`
            (docs/policies.md, "Budgets"). Default none: costs are 0 and
            only token limits apply.
        webhooks: Webhooks (`durable_tools.webhooks.Webhook`: URL, secret,
            event kinds) by name, notified when an approval or a question
            starts waiting, is decided, expires, is reminded or escalated
            (docs/policies.md, "Notifications"). History records only the
            names; the URLs and secrets stay on the worker. Default none.

    Example:
        ```python
        @asynccontextmanager
        async def shop_deps() -> AsyncIterator[ShopDeps]:
            async with httpx.AsyncClient(base_url="https://shop.internal") as http:
                yield ShopDeps(http=http)

        app = App(
            toolkits={"shop": kit},
            deps=shop_deps,
            agents={"support": Agent(model="openai:gpt-4o", toolkit="shop",
                                     instructions="Help {customer_name}.",
                                     allow=AgentOverrides(variables=["customer_name"]))},
        )
        ```

    Raises:
        ConfigurationError: An agent names a toolkit the app lacks, an
            offline model while `allow_offline_models` is False, or a custom
            context strategy not in `context_strategies`; a decision key
            is neither an HMAC secret of 32 bytes or more nor an Ed25519
            public key.
    """

    toolkits: Mapping[str, Toolkit] = field(default_factory=dict[str, Toolkit])
    models: Mapping[str, Model] = field(default_factory=dict[str, Model])
    mcp_servers: Sequence[McpServerConfig] = ()
    deps: DepsFactory | None = None
    payload_codec: PayloadCodec | None = None
    agents: Mapping[str, Agent] = field(default_factory=dict[str, Agent])
    allow_offline_models: bool = False
    scripts_dir: str | os.PathLike[str] | None = None

    decision_keys: Mapping[str, VerifyingKey] | None = None
    storage: PayloadStorage | None = None
    context_strategies: Mapping[str, ContextStrategyFunction] = field(
        default_factory=dict[str, ContextStrategyFunction]
    )
    tool_threads: int | None = None
    policies: Mapping[str, Policy] = field(default_factory=dict[str, Policy])
    prices: Mapping[str, ModelPrice] = field(default_factory=dict[str, ModelPrice])
    webhooks: Mapping[str, Webhook] = field(default_factory=dict[str, Webhook])

    def __post_init__(self) -> None:
        """Check the agents against the toolkits, models and strategies (`check_agents`)."""
        check_agents(
            self.agents,
            toolkits=self.toolkits,
            models=self.models,
            allow_offline_models=self.allow_offline_models,
            context_strategies=self.context_strategies,
        )
        if self.decision_keys is not None:
            check_verifying_keys(self.decision_keys, source="App(decision_keys=...)")


class AppOptions(TypedDict, total=False):
    """`App`'s fields besides `toolkits` and `models`, as keyword arguments.

    What `DurableToolsPlugin(...)` and `run_worker(...)` accept instead of
    `app=App(...)`; each is documented on `App`. `agents` and
    `context_strategies` also take `None` (none).
    """

    mcp_servers: Sequence[McpServerConfig]
    deps: DepsFactory | None
    payload_codec: PayloadCodec | None
    agents: Mapping[str, Agent] | None
    allow_offline_models: bool
    scripts_dir: str | os.PathLike[str] | None
    decision_keys: Mapping[str, VerifyingKey] | None
    storage: PayloadStorage | None
    context_strategies: Mapping[str, ContextStrategyFunction] | None
    tool_threads: int | None
    policies: Mapping[str, Policy] | None
    prices: Mapping[str, ModelPrice] | None
    webhooks: Mapping[str, Webhook] | None


_NONE_IS_EMPTY = frozenset(
    {"toolkits", "models", "agents", "context_strategies", "policies", "prices", "webhooks"}
)
"""Fields whose keyword argument `None` means none (`run_worker` and the plugin
took `None` for `agents` and `context_strategies` before they took an `App`)."""


def app_of(
    app: App | None,
    toolkits: Mapping[str, Toolkit] | None,
    models: Mapping[str, Model] | None,
    options: AppOptions,
    *,
    caller: str,
) -> App:
    """`app`, or the `App` that keyword arguments describe (not both).

    Args:
        app: The application given as `app=`, or `None`.
        toolkits: `App.toolkits` given as a keyword argument, or `None`.
        models: `App.models` given as a keyword argument, or `None`.
        options: The other fields given as keyword arguments.
        caller: Who asks, for the error message (e.g. `"run_worker"`).

    Returns:
        `app` as it is, else `App(toolkits=..., models=..., **options)`
        (`None` for `toolkits`, `models`, `agents` or `context_strategies`
        meaning none).

    Raises:
        TypeError: Both `app` and a field were given.
        ConfigurationError: See `App`.
    """
    essentials = {"toolkits": toolkits, "models": models}
    if app is not None:
        named = [name for name, value in essentials.items() if value is not None]
        if named or options:
            raise TypeError(
                f"{caller} takes app=App(...) or App's fields as keyword arguments, not both "
                f"(given with app: {', '.join([*named, *options])})"
            )
        return app
    given: dict[str, Any] = {**essentials, **options}
    fields: dict[str, Any] = {
        name: value
        for name, value in given.items()
        if value is not None or name not in _NONE_IS_EMPTY
    }
    return App(**fields)


def load_app(spec: str, *, app_dir: str | None = ".") -> App:
    """Import an application from a `"module:attribute"` spec.

    Args:
        spec: E.g. `"examples.support:app"`; the attribute may be dotted
            (`"pkg.mod:container.app"`).
        app_dir: Directory put first on `sys.path` before importing (default
            the current directory, so a checkout works without installing);
            `None` leaves `sys.path` alone.

    Returns:
        The `App`. Any object with `toolkits` and `models` mappings is
        accepted and copied into an `App`, with those of `App`'s other
        fields it has.

    Raises:
        ConfigurationError: The spec is malformed, the module or attribute
            does not exist, the object is not an application, or its agents
            do not fit its toolkits and models (see `App`).
    """
    module_name, _ = split_spec(spec, "app", "examples.support:app")
    if app_dir is not None:
        put_on_path(app_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigurationError(
                f"cannot import module {module_name!r} of app spec {spec!r}: {exc}"
            ) from exc
        raise  # the module exists but one of its own imports failed: show the real error
    found = attribute_of(module, spec, "app")
    if isinstance(found, App):
        return found
    toolkits: object = getattr(found, "toolkits", None)
    models: object = getattr(found, "models", None)
    if not isinstance(toolkits, Mapping) or not isinstance(models, Mapping):
        raise ConfigurationError(
            f"{spec!r} is a {type(found).__name__}, not an application: it needs `toolkits` "
            "and `models` mappings, e.g. App(toolkits={'support': kit}, models={'gpt': model})"
        )
    kits = {str(name): kit for name, kit in cast(Mapping[object, object], toolkits).items()}
    adapters = {str(name): model for name, model in cast(Mapping[object, object], models).items()}
    for name, kit in kits.items():
        if not isinstance(kit, Toolkit):
            raise ConfigurationError(
                f"toolkit {name!r} of {spec!r} is a {type(kit).__name__}, not a Toolkit"
            )
    for name, model in adapters.items():
        if not callable(model):
            raise ConfigurationError(
                f"model {name!r} of {spec!r} is a {type(model).__name__}, not a model adapter "
                "(an async callable taking a ModelRequest)"
            )
    deps: object = getattr(found, "deps", None)
    if deps is not None and not callable(deps):
        raise ConfigurationError(
            f"deps of {spec!r} is a {type(deps).__name__}, not a factory: give a function "
            "that returns the dependencies (or an async context manager of them)"
        )
    keys: object = getattr(found, "decision_keys", None)
    if keys is not None and not isinstance(keys, Mapping):
        raise ConfigurationError(
            f"decision_keys of {spec!r} is a {type(keys).__name__}, not a mapping of key id "
            "to keys (bytes, Ed25519PublicKey)"
        )
    codec: object = getattr(found, "payload_codec", None)
    if codec is not None and not isinstance(codec, PayloadCodec):
        raise ConfigurationError(
            f"payload_codec of {spec!r} is a {type(codec).__name__}, not a PayloadCodec"
        )
    agents: object = getattr(found, "agents", None) or {}
    if not isinstance(agents, Mapping):
        raise ConfigurationError(
            f"agents of {spec!r} is a {type(agents).__name__}, not a mapping of name to Agent"
        )
    scripts_dir: object = getattr(found, "scripts_dir", None)
    storage: object = getattr(found, "storage", None)
    if storage is not None and not isinstance(storage, PayloadStorage):
        raise ConfigurationError(
            f"storage of {spec!r} is a {type(storage).__name__}, not a "
            "durable_tools.storage.PayloadStorage"
        )
    return App(
        toolkits=cast(dict[str, Toolkit], kits),
        models=cast(dict[str, Model], adapters),
        deps=cast(DepsFactory | None, deps),
        payload_codec=codec,
        agents={str(k): v for k, v in cast(Mapping[object, Agent], agents).items()},
        allow_offline_models=getattr(found, "allow_offline_models", False) is True,
        scripts_dir=cast(str | None, scripts_dir),
        decision_keys=cast(Mapping[str, VerifyingKey] | None, keys),
        storage=storage,
        context_strategies=_context_strategies(spec, getattr(found, "context_strategies", None)),
        tool_threads=_tool_threads(spec, getattr(found, "tool_threads", None)),
        mcp_servers=_mcp_servers(spec, getattr(found, "mcp_servers", None)),
        policies=_policies(spec, getattr(found, "policies", None)),
    )


def _policies(spec: str, value: object) -> dict[str, Policy]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(p, Policy) for p in cast(Mapping[object, object], value).values()
    ):
        raise ConfigurationError(
            f"policies of {spec!r} is not a mapping of name to durable_tools.policies.Policy"
        )
    return {str(k): v for k, v in cast(Mapping[object, Policy], value).items()}


def _mcp_servers(spec: str, value: object) -> list[McpServerConfig]:
    if value is None:
        return []
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not all(isinstance(s, McpServerConfig) for s in cast(Sequence[object], value))
    ):
        raise ConfigurationError(
            f"mcp_servers of {spec!r} is not a sequence of durable_tools.mcp.McpServerConfig"
        )
    return list(cast(Sequence[McpServerConfig], value))


def _tool_threads(spec: str, value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"tool_threads of {spec!r} is {value!r}, not a positive int")
    return value


def _context_strategies(spec: str, value: object) -> dict[str, ContextStrategyFunction]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        callable(f) for f in cast(Mapping[object, object], value).values()
    ):
        raise ConfigurationError(
            f"context_strategies of {spec!r} is not a mapping of name to function"
        )
    return {str(k): v for k, v in cast(Mapping[object, ContextStrategyFunction], value).items()}
