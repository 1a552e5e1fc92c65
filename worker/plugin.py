"""`DurableToolsPlugin`: one Temporal plugin that sets up a worker (and client).

It bundles `AgentWorkflow`, the model and tool activities bound to the
toolkits and models of an `App`, the pydantic payload converter (the client's
failure converter is kept, and its payload codec unless the app has one: see
`durable_tools.codec`) and the sandbox pass-through modules, so an application
only writes:

```python
plugin = DurableToolsPlugin(App(toolkits={"support": kit}, models={"gpt": adapter}))
client = await Client.connect("localhost:7233", plugins=[plugin])
worker = Worker(client, task_queue="agents")  # the plugin adds the rest
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import pkgutil
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack, cast

from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import PatchActivationInput, Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.activities.decision_activities import (
    DecisionVerifier,
    decision_keys_from_environment,
)
from durable_tools.activities.webhook_activity import WebhookSender
from durable_tools.codec import with_pydantic_payloads
from durable_tools.decision_keys import VerifyingKey
from durable_tools.mcp.config import McpServerConfig
from durable_tools.models.base import Model
from durable_tools.redact import Redactor, key_forms, register_secrets, secret_env_values
from durable_tools.references import guarded
from durable_tools.toolkit import Toolkit, compose
from durable_tools.worker import allocator
from durable_tools.worker.app import App, AppOptions, DepsFactory, app_of
from durable_tools.worker.heap_return import HeapReturn
from durable_tools.worker.log_redaction import install_log_redaction
from durable_tools.worker.search_attributes import check_search_attributes
from durable_tools.workflows.agent_workflow import AgentWorkflow, StrictAgentWorkflow
from durable_tools.workflows.visibility import NO_SEARCH_ATTRIBUTES_PATCH

if TYPE_CHECKING:
    from durable_tools.mcp.toolset import McpToolsets

__all__ = [
    "PASSTHROUGH_MODULES",
    "STRICT_SANDBOX_ENV",
    "DepsFactory",
    "DurableToolsPlugin",
    "sandbox_runner",
    "strict_sandbox",
]

_MAPPED_SUBPACKAGES = frozenset({"activities", "workflows", "worker"})
"""`durable_tools` subpackages whose code lives in the checkout's top-level
folders of the same names (pyproject.toml's `package-dir`)."""

_SANDBOXED_SUBPACKAGES = frozenset({"workflows", "worker"})
"""`durable_tools` subpackages the strict sandbox re-imports per run: the
workflow code itself (so the sandbox's determinism checks apply to it) and
the worker, which workflow code never imports."""

_SDK_WORKFLOW_THREADS = 500
"""temporalio's workflow task executor size without `max_concurrent_workflow_tasks`."""


def _durable_tools_passthrough(
    sandboxed: frozenset[str] = _SANDBOXED_SUBPACKAGES,
) -> tuple[str, ...]:
    # Temporal passes a listed module's children through too, so listing
    # `durable_tools` would pass `durable_tools.workflows` (the loop) through
    # and exempt it from the sandbox's checks; list the pure subpackages instead.
    # The subpackages mapped from the top-level folders (pyproject's
    # `package-dir`) are not under `durable_tools.__path__` in an editable
    # install from a checkout without symbolic links: name them too.
    import durable_tools

    names = {info.name for info in pkgutil.iter_modules(durable_tools.__path__)}
    return tuple(
        f"durable_tools.{name}"
        for name in sorted(names | _MAPPED_SUBPACKAGES)
        if name not in sandboxed
    )


_THIRD_PARTY_PASSTHROUGH: tuple[str, ...] = (
    "pydantic",
    "pydantic_core",
    "jsonschema",
    "jsonschema_specifications",
    "referencing",
    "rpds",
    "docstring_parser",
    "annotated_types",
    "typing_inspection",
    "rfc8785",
    # The OpenTelemetry API (durable_tools.telemetry); spans started in workflow
    # code must use the process's tracer provider, not a sandboxed copy.
    "opentelemetry",
)

PASSTHROUGH_MODULES: tuple[str, ...] = (
    *_durable_tools_passthrough(),
    *_THIRD_PARTY_PASSTHROUGH,
)
"""Modules the strict workflow sandbox imports once and shares (pure, no I/O at import)."""


def sandbox_runner(*, strict: bool | None = None) -> WorkflowRunner:
    """The sandboxed workflow runner with durable-tools' pass-through modules.

    The sandbox re-imports, for every workflow run it starts or replays,
    each module it does not pass through. The loop's own code
    (`durable_tools.workflows`, about 6,000 lines in 13 modules) re-imported
    per run cost a third of the worker's CPU per tool call and about 0.4 MB
    of memory per cached conversation (200 conversations of 5 tool turns:
    20.9 against 14.4 ms of CPU per call, peak RSS 248 against 164 MB;
    docs/operations.md, "Sizing a worker"). So by default it is passed
    through, like the pure modules it imports: imported once, shared by
    every run. It keeps no module-level state that a run changes.

    Passed-through code is not checked by the sandbox at run time (a call
    to `datetime.now()` or `random` in it would not be refused), so
    `AgentWorkflow` itself runs outside the sandbox (`sandboxed=False`); the
    runner still serves an application's own workflows, which may run the
    loop (`run_agent`). The strict runner re-imports the loop per run, so
    those checks apply to it: the test suite replays every recorded history
    with it and `StrictAgentWorkflow`
    (tests/workflows/test_agent_workflow_replay.py), which fails on any
    restricted call the loop makes on those paths.

    Args:
        strict: Re-import the loop's code per run, under the sandbox's
            checks. `None` (default): strict when the environment variable
            `DURABLE_TOOLS_STRICT_SANDBOX` is `1`, else not.
    """
    if strict is None:
        strict = strict_sandbox()
    modules = PASSTHROUGH_MODULES
    if not strict:
        modules = (*_durable_tools_passthrough(frozenset({"worker"})), *_THIRD_PARTY_PASSTHROUGH)
    restrictions: SandboxRestrictions = SandboxRestrictions.default.with_passthrough_modules(
        *modules
    )
    return SandboxedWorkflowRunner(restrictions=restrictions)


STRICT_SANDBOX_ENV = "DURABLE_TOOLS_STRICT_SANDBOX"
"""`1`: workers run the loop in the sandbox, its code re-imported per run, under the
sandbox's checks (`StrictAgentWorkflow`, `sandbox_runner(strict=True)`)."""


def strict_sandbox() -> bool:
    """Whether `DURABLE_TOOLS_STRICT_SANDBOX` is `1` (default: not strict)."""
    return os.environ.get(STRICT_SANDBOX_ENV, "") == "1"


class DurableToolsPlugin(SimplePlugin):
    """A Temporal client + worker plugin for durable-tools.

    `DurableToolsPlugin(app)` serves an `App`; `DurableToolsPlugin(toolkits=...,
    models=..., agents=..., ...)` builds one from `App`'s fields given as
    keyword arguments (documented on `App`), a convenience for the same.

    On a client (`Client.connect(..., plugins=[plugin])`) it sets the pydantic
    payload converter, and `App.payload_codec` and `App.storage` when given,
    on the client's data converter; the client's failure converter and, when
    the app has none, its codec and external storage are kept.

    Args:
        app: What the worker serves (see `App`); `None` (default): the `App`
            of `toolkits`, `models` and `**options`.
        toolkits: `App.toolkits`, instead of `app`.
        models: `App.models`, instead of `app`.
        search_attributes: Whether conversations this worker starts running
            upsert `DurableToolsPendingCount` / `DurableToolsPendingKinds`
            (default True; they must be registered on the namespace, which
            the worker checks when it starts: see below). False records
            `NO_SEARCH_ATTRIBUTES_PATCH` in each run it runs first, so
            replays on any worker skip the upserts as well, and skips the check.
        tracing: Add Temporal's OpenTelemetry interceptor
            (`temporalio.contrib.opentelemetry.OpenTelemetryInterceptor`, what
            `OpenTelemetryPlugin` adds), which carries the trace context
            through workflow and activity headers, so a conversation's
            `invoke_agent`, `chat` and `execute_tool` spans form one trace
            (`durable_tools.telemetry`). `None` (default): on when the global
            tracer provider is replay-safe (`create_tracer_provider`, as
            `durable_tools.worker.telemetry.configure_telemetry` installs it);
            `True` requires one (the interceptor refuses any other).
        **options: `App`'s other fields (`mcp_servers`, `deps`, `agents`,
            `storage`, ...: `AppOptions`), instead of `app`.

    Raises:
        TypeError: `app` and any of `App`'s fields were both given.
        ConfigurationError: Two MCP servers share a name, or the app is
            wrong (see `App`). A conversation naming an unregistered toolkit
            or model, an undeclared agent or an override its agent does not
            allow fails its model activity with a non-retryable
            `ConfigurationError`.

    When the worker starts (`Worker.run`, or `async with Worker(...)`), before
    it polls, it raises `ConfigurationError` if the namespace lacks the search
    attributes or has them with another type (unless `search_attributes` is
    False; the one-line message holds the `temporal operator search-attribute
    create ...` command, as `run_worker`'s: `check_search_attributes`), if an
    allow-listed MCP server fails to start or lacks a listed tool, and
    `DuplicateToolName` if an MCP tool's name collides with another tool.

    Example:
        ```python
        plugin = DurableToolsPlugin(App(toolkits={"support": kit}, models={"gpt": adapter}))
        ```
    """

    def __init__(
        self,
        app: App | None = None,
        *,
        toolkits: Mapping[str, Toolkit] | None = None,
        models: Mapping[str, Model] | None = None,
        search_attributes: bool = True,
        tracing: bool | None = None,
        **options: Unpack[AppOptions],
    ) -> None:
        app = app_of(app, toolkits, models, options, caller="DurableToolsPlugin")
        self.app = app
        self.storage = app.storage
        self.search_attributes = search_attributes
        self.mcp: McpToolsets | None = None
        self.deps_factory = app.deps
        if app.mcp_servers:
            from durable_tools.mcp.toolset import McpToolsets  # imports the mcp SDK

            self.mcp = McpToolsets(app.mcp_servers)
        decision_keys = (
            app.decision_keys if app.decision_keys is not None else decision_keys_from_environment()
        )
        secrets = [*_config_secrets(app.mcp_servers), *_key_secrets(decision_keys)]
        secrets += [hook.secret for hook in app.webhooks.values()]
        # Spans and log records are scrubbed by the process's redactor
        # (`worker_redactor`), which knows these from now on.
        register_secrets(secrets)
        self.agent_activities = AgentActivities(
            app.toolkits,
            app.models,
            mcp=self.mcp,
            redact=Redactor.from_environment(secrets),
            agents=app.agents,
            allow_offline_models=app.allow_offline_models,
            scripts_dir=app.scripts_dir,
            max_payload_bytes=app.storage.max_payload_bytes if app.storage is not None else None,
            context_strategies=app.context_strategies,
            tool_threads=app.tool_threads,
            policies=app.policies,
            prices=app.prices,
        )
        self.verifier = DecisionVerifier(decision_keys)
        self.webhooks = WebhookSender(app.webhooks)
        self.agent_activities.notify = self.webhooks.routes()
        self.heap_return = HeapReturn(self.agent_activities.let_go)
        """Started beside the worker by `run_worker` (`durable_tools.worker.heap_return`)."""
        self._executors: set[allocator.ThreadCacheExecutor] = set()
        """Workflow task executors `configure_worker` made, shut down by `run_worker`."""
        # After the activities' `ExpectedFailureFilter`, which reads `exc_info`.
        install_log_redaction()
        super().__init__(  # pyright: ignore[reportUnknownMemberType]
            "durable-tools",
            # Only the payload converter (and the app's codec and storage):
            # the client's failure converter stays.
            data_converter=self._data_converter,
            activities=[
                self.agent_activities.model_turn,
                self.agent_activities.tool_call,
                self.agent_activities.model_sample,
                self.agent_activities.policy_reevaluate,
                self.agent_activities.sub_agent_spend,
                self.verifier.verify_decision,
                self.webhooks.deliver_webhook,
            ],
            workflows=[StrictAgentWorkflow if strict_sandbox() else AgentWorkflow],
            workflow_runner=lambda _: sandbox_runner(),
            interceptors=_tracing_interceptors(tracing),
            run_context=self._run_context,
        )

    def _data_converter(self, existing: DataConverter | None) -> DataConverter:
        converter = with_pydantic_payloads(existing)
        if self.app.payload_codec is not None:
            converter = dataclasses.replace(converter, payload_codec=self.app.payload_codec)
        if self.storage is not None:
            converter = self.storage.apply(converter)
        # A reference a client sends that cannot be fetched must not wedge a
        # conversation (durable_tools.references).
        return guarded(converter)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add the plugin's parts; `NO_SEARCH_ATTRIBUTES_PATCH` follows `search_attributes`.

        The sync tools' pool takes the worker's `max_concurrent_activities`
        as its size unless `tool_threads` was given; the activities'
        per-conversation memories hold as many conversations as
        `max_cached_workflows` (`ActivitiesBase.size_for`).
        """
        config = super().configure_worker(config)
        slots = config.get("max_concurrent_activities")  # pyright: ignore[reportUnknownMemberType]
        self.agent_activities.tool_threads.configure(slots)
        # The activities' per-conversation memories hold as many conversations
        # as the workflow cache holds runs (docs/operations.md, "Sizing a worker").
        cached = config.get("max_cached_workflows")  # pyright: ignore[reportUnknownMemberType]
        if cached:
            self.agent_activities.size_for(cached)
        given = config.get("patch_activation_callback")  # pyright: ignore[reportUnknownMemberType]
        config["patch_activation_callback"] = _patch_activation(
            given, search_attributes=self.search_attributes
        )
        if config.get("workflow_task_executor") is None and allocator.in_use() == "jemalloc":  # pyright: ignore[reportUnknownMemberType]
            # Workflow activations allocate through a thread cache, emptied
            # after each (allocator.ThreadCacheExecutor); the SDK's own size.
            tasks = config.get("max_concurrent_workflow_tasks")  # pyright: ignore[reportUnknownMemberType]
            executor = allocator.ThreadCacheExecutor(
                max_workers=tasks or _SDK_WORKFLOW_THREADS, thread_name_prefix="workflow-task"
            )
            self._executors.add(executor)
            config["workflow_task_executor"] = executor
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Check the namespace's search attributes (unless turned off), then run the worker.

        While it runs, `HeapReturn` lets the activities drop what they keep
        for ended conversations and hands freed memory back to the system
        once the worker holds at most half the runs it held
        (`durable_tools.worker.heap_return`; `self.heap_return`).

        The worker's log records are scrubbed of secrets
        (`durable_tools.worker.log_redaction`) from here on, as from the
        plugin's construction, for the loggers made in between too.

        Every way to build a worker passes here (`run_worker`, the CLI, and
        `Worker(client, ...)` on a client with this plugin), so a namespace
        without them stops the worker at start instead of failing every
        conversation's workflow task at its first upsert.

        Raises:
            ConfigurationError: See `check_search_attributes`.
        """
        install_log_redaction()  # again: the loggers made since the plugin was
        try:
            if self.search_attributes:
                client = worker.client
                await check_search_attributes(
                    client,
                    address=client.service_client.config.target_host,
                    namespace=client.namespace,
                )
            # Beside the worker: ended conversations' memories go, and freed
            # memory goes back to the system once traffic falls (heap_return.py).
            async with self.heap_return.running():
                await super().run_worker(worker, next)  # the run context, then the worker
        except BaseException:
            if not worker.is_running and not worker.is_shutdown:
                # Refused before the worker started: mark it shut down, as
                # temporalio's Worker._run does when its own validation fails,
                # or `async with Worker(...)` waits in `shutdown()` forever.
                worker._shutdown_complete_event.set()  # pyright: ignore[reportPrivateUsage]
            raise
        finally:
            self._stop_executor(worker)

    def _stop_executor(self, worker: Worker) -> None:
        """Shut down the workflow task executor `configure_worker` made for `worker`, if any.

        As the SDK does with the executor it makes itself; without waiting:
        a deadlocked workflow's thread may never return.
        """
        executor = worker.config(active_config=True).get("workflow_task_executor")  # pyright: ignore[reportUnknownMemberType]
        if isinstance(executor, allocator.ThreadCacheExecutor) and executor in self._executors:
            self._executors.discard(executor)
            executor.shutdown(wait=False)

    @contextlib.asynccontextmanager
    async def _run_context(self) -> AsyncGenerator[None]:
        """Build the tools' dependencies and connect the MCP servers for the worker's lifetime.

        The sync tools' pool stops with the worker (a call still running
        finishes in its thread).
        """
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self.agent_activities.tool_threads.shutdown)
            if self.deps_factory is not None:
                self.agent_activities.deps = await _enter_deps(self.deps_factory, stack)
                stack.callback(setattr, self.agent_activities, "deps", None)
            mcp = self.mcp
            if mcp is not None:
                await mcp.start()
                stack.push_async_callback(mcp.aclose)
                for name, kit in self.agent_activities.toolkits.items():
                    # DuplicateToolName now, not mid-conversation.
                    compose(kit, mcp.toolkit(), label=name)
            yield


def _tracing_interceptors(tracing: bool | None) -> list[Any] | None:
    from opentelemetry import trace
    from temporalio.contrib.opentelemetry import (
        OpenTelemetryInterceptor,
        ReplaySafeTracerProvider,
    )

    if tracing is None:
        tracing = isinstance(trace.get_tracer_provider(), ReplaySafeTracerProvider)
    return [OpenTelemetryInterceptor()] if tracing else None


def _config_secrets(servers: Sequence[McpServerConfig]) -> list[str]:
    """Secrets the MCP configurations hold: tokens, header values, secret-named env values."""
    found: list[str] = []
    for server in servers:
        found += [*secret_env_values(server.env), *server.headers.values()]
        if server.token:
            found.append(server.token)
        if server.token_env and os.environ.get(server.token_env):
            found.append(os.environ[server.token_env])
    return found


def _key_secrets(keys: Mapping[str, VerifyingKey]) -> list[str]:
    """The HMAC decision keys as they appear in text (`key_forms`); public keys are no secret."""
    return [form for key in keys.values() if isinstance(key, bytes) for form in key_forms(key)]


async def _enter_deps(factory: DepsFactory, stack: contextlib.AsyncExitStack) -> Any:
    made: Any = factory()
    if inspect.isawaitable(made):
        made = await made
    if isinstance(made, contextlib.AbstractAsyncContextManager):
        return await stack.enter_async_context(
            cast(contextlib.AbstractAsyncContextManager[Any], made)
        )
    return made


def _patch_activation(
    given: Callable[[PatchActivationInput], bool] | None, *, search_attributes: bool
) -> Callable[[PatchActivationInput], bool]:
    """The worker's patch activation: ours for our patch, the given one (or on) for others."""

    def activate(patch: PatchActivationInput) -> bool:
        if patch.patch_id == NO_SEARCH_ATTRIBUTES_PATCH:
            return not search_attributes
        return True if given is None else given(patch)

    return activate
