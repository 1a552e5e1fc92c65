"""MCP servers as durable tools: discovery, validated calls and policy.

`McpToolsets` connects to the configured servers when the worker starts,
lists their tools and exposes each as a dynamic tool named `prefix__tool`:

* **Arguments** are validated against the server's input schema before
  anything is sent (an invalid call becomes `input_validation_error` and never
  reaches the server); `structured_content` is validated against the tool's
  output schema when it has one.
* **Results**: `is_error: true` becomes Failure `execution_error` with the
  server's text; progress notifications become progress events (heartbeats
  and `tool_progress` events, from the tool activity's own context; the
  activity also heartbeats by itself while a call is quiet, every third of
  the server's `heartbeat_timeout`).
* **Policy**: annotations are hints from the server, untrusted unless its
  configuration says `trust_annotations` (MCP specification 2025-06-18), so
  by default every tool needs approval and is *at-most-once*: once its call
  may have reached the server, an unknown outcome becomes Failure
  `interrupted`, never a second call. For a trusted server the policy comes
  from its `ToolAnnotations`: read-only tools need no approval; destructive
  tools (the MCP default for a tool that is not read-only) need approval;
  read-only or idempotent tools are retried with backoff, others are
  at-most-once. The configuration's overrides (per server and per tool) win
  either way. The call's idempotency key travels in the request's `_meta`
  under `IDEMPOTENCY_KEY_META`. With tracing on, the `mcp` SDK adds the W3C
  trace context (`traceparent`) of its client span, a child of the call's
  `execute_tool` span (MCP 2026-07-28).
* **Input**: an input-required result (MCP 2026-07-28) is not answered in
  the activity: the tool raises `NeedsInput` with the checked requests, the
  loop asks a person, and a new activity retries the call with the answers
  and the exact `requestState` (`ToolContext.resume`); a refused
  `requestState` is Failure `request_state_rejected` (`STATE_REJECTED`).
  Roots requests are answered from the configuration: a round of roots
  requests only is retried at once in the activity (at most
  `MAX_INPUT_ROUNDS` times); beside a person's questions, their answers
  travel with the round (`InputRequired.answered`).
* **Connections** are pooled: one `McpConnection` per server per worker
  process (see `durable_tools.mcp.connection`).
* **Changes**: a server's `tools/list_changed` marks it stale; `refresh()`
  (called by the model activity before each turn, never inside one) lists it
  again. A new listing never loosens a tool's policy: for the life of the
  worker process, a tool that needed approval still does and one that was
  at-most-once still is (`McpPolicy.stricter`), even on a trusted server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
from mcp.shared.exceptions import MCPError

from durable_tools.constructors import dynamic_tool
from durable_tools.descriptor import ToolAnnotations
from durable_tools.errors import ConfigurationError, DurableToolsError
from durable_tools.input_requests import MAX_INPUT_ROUNDS, STATE_REJECTED, InputResume, NeedsInput
from durable_tools.mcp.config import McpServerConfig, check_unique_names
from durable_tools.mcp.connection import (
    CallTimedOut,
    ConnectionLost,
    McpConnection,
    McpStartError,
    describe_error,
)
from durable_tools.mcp.input_required import input_required_of, input_responses_of
from durable_tools.mcp.task_steps import task_of, task_step
from durable_tools.mcp.tasks import CreateTaskResult
from durable_tools.toolkit import Toolkit, compose
from durable_tools.tools import (
    ONE_ATTEMPT,
    Emit,
    RetryPolicy,
    Tool,
    ToolContext,
    ToolFailure,
    check_tool_name,
)

__all__ = [
    "IDEMPOTENCY_KEY_META",
    "McpPolicy",
    "McpToolsets",
    "mcp_policy",
    "mcp_tool",
    "needs_tasks",
]

_log = logging.getLogger("durable_tools.mcp")

IDEMPOTENCY_KEY_META: Final[str] = "durable-tools/idempotency-key"
"""The `_meta` key of a `tools/call` request that carries the call's idempotency
key (`"{workflow_id}/{call_id}"`, the same for every attempt)."""

_IDEMPOTENT_RETRY: Final[RetryPolicy] = RetryPolicy(
    max_attempts=4, initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=30.0
)
_ACTIVITY_MARGIN: Final[float] = 10.0
_STATE_ONLY_RETRIES: Final[int] = 20
"""Calls again, within one activity, of an input-required result with no requests."""


def _annotations(spec: types.Tool) -> ToolAnnotations:
    ann = spec.annotations
    if ann is None:
        return ToolAnnotations(title=spec.title)
    fields: dict[str, Any] = {
        "title": ann.title or spec.title,
        "read_only": ann.read_only_hint,
        "destructive": ann.destructive_hint,
        "idempotent": ann.idempotent_hint,
        "open_world": ann.open_world_hint,
    }
    return ToolAnnotations(**{k: v for k, v in fields.items() if v is not None})


_NO_TASKS: Final[str] = (
    "and the server does not offer MCP Tasks (the io.modelcontextprotocol/tasks "
    "extension of protocol 2026-07-28), the only tasks this worker runs"
)


@dataclass(frozen=True, kw_only=True)
class McpPolicy:
    """The effective policy of one MCP tool on this worker.

    Attributes:
        needs_approval: Every call waits for a person's decision.
        idempotent: Calls are retried with backoff; otherwise at-most-once.
    """

    needs_approval: bool
    idempotent: bool

    def stricter(self, other: McpPolicy) -> McpPolicy:
        """The policy at least as strict as both (approval if either, idempotent if both)."""
        return McpPolicy(
            needs_approval=self.needs_approval or other.needs_approval,
            idempotent=self.idempotent and other.idempotent,
        )


def mcp_policy(config: McpServerConfig, spec: types.Tool) -> McpPolicy:
    """The policy of one listed tool: the operator's overrides, then trusted annotations.

    Args:
        config: The server's configuration.
        spec: The tool as the server listed it.

    Returns:
        Without `config.trust_annotations`, approval and at-most-once unless
        overridden; with it, what the annotations imply (see the module
        docstring), unless overridden.
    """
    if config.trust_annotations:
        annotations = _annotations(spec)
        read_only = annotations.read_only
        needs_approval = annotations.destructive and not read_only
        idempotent = read_only or annotations.idempotent
    else:  # hints from an untrusted server are not policy
        needs_approval, idempotent = True, False
    override = config.policy(spec.name)
    return McpPolicy(
        needs_approval=override.needs_approval
        if override.needs_approval is not None
        else needs_approval,
        idempotent=override.idempotent if override.idempotent is not None else idempotent,
    )


def _content_value(result: types.CallToolResult) -> Any:
    """What the model reads of a successful result."""
    if result.structured_content is not None:
        return result.structured_content
    blocks = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
    if all(block.get("type") == "text" for block in blocks):
        return "\n".join(str(block.get("text", "")) for block in blocks)
    return blocks


def _error_text(result: types.CallToolResult) -> str:
    texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    return "\n".join(texts).strip() or "the server reported an error without a message"


def state_rejected(exc: MCPError) -> bool:
    """Whether a retried call's error says its `requestState` was refused.

    The `mcp` SDK's servers answer `-32602 Invalid or expired requestState`
    (`mcp.server.request_state`); any invalid-params error naming
    `requestState` counts.
    """
    return exc.error.code == types.INVALID_PARAMS and "requeststate" in exc.error.message.lower()


def needs_tasks(spec: types.Tool) -> bool:
    """Whether a listed tool can only be called as a task (`execution.taskSupport: required`)."""
    execution = spec.execution
    return execution is not None and execution.task_support == "required"


def mcp_tool(connection: McpConnection, spec: types.Tool, policy: McpPolicy | None = None) -> Tool:
    """Build the durable tool for one of a server's tools.

    Args:
        connection: The pooled connection to the server.
        spec: The tool as the server listed it.
        policy: The tool's policy; `None` derives it (`mcp_policy`).

    Returns:
        A dynamic `Tool` named `prefix__name`, with the server's input and
        output schemas, its annotations (shown to the model as hints) and the
        policy.

    Raises:
        InvalidToolName: The prefixed name is not a valid tool name.
        InvalidSchema: The server's input or output schema is not valid.
    """
    config = connection.config
    annotations = _annotations(spec)
    if policy is None:
        policy = mcp_policy(config, spec)
    needs_approval, idempotent = policy.needs_approval, policy.idempotent
    call_timeout = config.policy(spec.name).call_timeout or config.call_timeout
    server_name, tool_name = config.name, spec.name

    async def run(arguments: dict[str, Any], emit: Emit, ctx: ToolContext) -> Any:
        # The SDK calls this from its session's reader task (not the caller's
        # context); the tool activity's `emit` hands it to the activity's own
        # context. The activity heartbeats by itself while a quiet call runs.
        def progress(value: float, total: float | None, message: str | None) -> None:
            emit({"progress": value, "total": total, "message": message})

        async def send(
            responses: dict[str, Any] | None, state: str | None, timeout: float
        ) -> types.CallToolResult | types.InputRequiredResult | CreateTaskResult:
            try:
                return await connection.call_tool(
                    tool_name,
                    arguments,
                    timeout=timeout,
                    meta={IDEMPOTENCY_KEY_META: ctx.idempotency_key},
                    progress=progress,
                    input_responses=responses,
                    request_state=state,
                )
            except McpStartError as exc:
                # Nothing was sent: safe to retry for every tool.
                raise ToolFailure(
                    "server_unavailable",
                    f"MCP server {server_name!r} could not be started: {exc}",
                    retryable=True,
                ) from exc
            except ConnectionLost as exc:
                if idempotent:
                    raise ToolFailure(
                        "interrupted", f"MCP server {server_name!r}: {exc}", retryable=True
                    ) from exc
                raise ToolFailure(
                    "interrupted",
                    f"MCP server {server_name!r}: {exc}; the call may have reached the server "
                    "and is not retried because the tool is not idempotent: check before "
                    "calling again",
                ) from exc
            except CallTimedOut as exc:
                raise ToolFailure(
                    "timed_out",
                    f"MCP server {server_name!r} did not answer within {call_timeout:g} s",
                ) from exc
            except MCPError as exc:
                if state is not None and state_rejected(exc):
                    # The loop restarts the call once (a fresh call), then reports this.
                    raise ToolFailure(
                        STATE_REJECTED,
                        f"MCP server {server_name!r} refused the call's requestState (expired "
                        f"or invalid) when it was retried: {exc}",
                    ) from exc
                raise ToolFailure(
                    "execution_error", f"MCP server {server_name!r} refused the call: {exc}"
                ) from exc
            except RuntimeError as exc:  # the SDK's own result checks (output schema)
                raise ToolFailure("output_validation_error", str(exc)) from exc

        resume = ctx.resume
        if resume is not None and resume.task is not None:  # a poll of the call's task
            final = await task_step(connection, resume, emit, call_timeout)
            if final.is_error:
                raise ToolFailure("execution_error", _error_text(final))
            return _content_value(final)
        responses = input_responses_of(server_name, resume) if resume else None
        state = resume.request_state if resume else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + call_timeout
        result = await send(responses, state, call_timeout)
        waited = roots_rounds = 0
        while isinstance(result, types.InputRequiredResult):
            if result.input_requests:
                asked = input_required_of(server_name, result, config)
                if asked.requests:  # a person or the model answers: the loop asks
                    raise NeedsInput(asked)
                # Only roots requests: answered from the configuration, at once.
                roots_rounds += 1
                if roots_rounds > MAX_INPUT_ROUNDS:
                    raise ToolFailure(
                        "input_rounds_exceeded",
                        f"MCP server {server_name!r} asked for its roots more than "
                        f"{MAX_INPUT_ROUNDS} times; the call was not completed",
                    )
                responses = input_responses_of(server_name, InputResume(responses=asked.answered))
            else:
                # Only a `requestState`: the server asks to be called again with it
                # (no person involved), after a short backoff, as the SDK's driver does.
                if waited == _STATE_ONLY_RETRIES or loop.time() >= deadline:
                    raise ToolFailure(
                        "invalid_input_request",
                        f"MCP server {server_name!r} kept asking to be called again "
                        f"({waited + 1} times) without asking for anything",
                    )
                await asyncio.sleep(min(0.05 * 2**waited, 0.25))
                waited += 1
                responses = None
            state = result.request_state
            result = await send(responses, state, max(deadline - loop.time(), 0.001))
        if isinstance(result, CreateTaskResult):  # it runs as a task: the loop polls it
            result = task_of(connection, result.model_dump(by_alias=True, mode="json"), None)
        if result.is_error:
            raise ToolFailure("execution_error", _error_text(result))
        return _content_value(result)

    return dynamic_tool(
        config.exposed_name(spec.name),
        run=run,
        parameters=spec.input_schema,
        description=spec.description or spec.title or "",
        output=spec.output_schema,
        needs_approval=needs_approval,
        timeout=config.handshake_timeout + call_timeout + _ACTIVITY_MARGIN,
        heartbeat_timeout=config.heartbeat_timeout,
        retry=_IDEMPOTENT_RETRY if idempotent else ONE_ATTEMPT,
        annotations=annotations,
        idempotent=idempotent,
        at_most_once=not idempotent,
    )


class McpToolsets:
    """The MCP servers of one worker process, exposed as one toolkit.

    Args:
        servers: Server configurations (names must be unique).

    Example:
        ```python
        toolsets = McpToolsets([McpServerConfig(name="time", command="mcp-server-time")])
        await toolsets.start()
        toolkit = toolsets.toolkit()     # tools named time__get_current_time, ...
        ...
        await toolsets.aclose()
        ```

    Raises:
        ConfigurationError: Two servers share a name.
    """

    def __init__(self, servers: Sequence[McpServerConfig]) -> None:
        check_unique_names(servers)
        self.servers = list(servers)
        self.connections: dict[str, McpConnection] = {
            s.name: McpConnection(s, on_tools_changed=self._mark_stale) for s in servers
        }
        self.skipped: dict[str, str] = {}
        self._tools: dict[str, list[Tool]] = {}
        # The strictest policy each (server, tool) had on this worker: a new
        # listing (`tools/list_changed`) can tighten a tool's policy, never loosen it.
        self._policies: dict[tuple[str, str], McpPolicy] = {}
        self._stale: set[str] = set()
        self._toolkit = Toolkit(label="mcp")
        self._server_of: dict[str, McpServerConfig] = {}
        self._listeners: list[Callable[[], None]] = []
        self.version = 0

    def _mark_stale(self, server: str) -> None:
        self._stale.add(server)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener()` whenever the toolkit is rebuilt."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Connect to every server and discover its tools.

        A server that does not start or finish its handshake is skipped with a
        warning (see `skipped`), unless its configuration has an allow-list.

        Raises:
            ConfigurationError: An allow-listed server failed to start, an
                allow-listed tool is not offered, or a server's tool has an
                invalid name or schema while allow-listed.
            DuplicateToolName: Two tools have one name after prefixing; the
                message names both sources.
        """
        results = await asyncio.gather(
            *(self._discover(c) for c in self.connections.values()), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self.aclose()
            raise failures[0]
        try:
            self._rebuild()
        except DurableToolsError:
            await self.aclose()
            raise

    async def _discover(self, connection: McpConnection) -> None:
        config = connection.config
        try:
            specs = await connection.list_tools()
        except (McpStartError, MCPError) as exc:
            reason = describe_error(exc) if isinstance(exc, MCPError) else str(exc)
            if config.tools is not None:
                raise ConfigurationError(
                    f"MCP server {config.name!r} did not start ({reason}); it has an "
                    "allow-list (`tools`), so the worker does not start without it"
                ) from None
            _log.warning("MCP server %r skipped: %s", config.name, reason)
            self.skipped[config.name] = reason
            await connection.close()
            return
        self._tools[config.name] = self._build(connection, specs)

    def _build(self, connection: McpConnection, specs: Sequence[types.Tool]) -> list[Tool]:
        config = connection.config
        offered = {s.name: s for s in specs}
        if config.tools is not None:
            missing = [name for name in config.tools if name not in offered]
            if missing:
                raise ConfigurationError(
                    f"MCP server {config.name!r} does not offer the allow-listed tool(s) "
                    f"{missing} (it offers {sorted(offered)})"
                )
            wanted = [offered[name] for name in config.tools]
        else:
            wanted = list(specs)
        tools: list[Tool] = []
        for spec in wanted:
            if needs_tasks(spec) and not connection.supports_tasks:
                # Called without a task, it always fails. The worker runs tasks of
                # the MCP Tasks extension (2026-07-28), not 2025-11-25's core tasks.
                if config.tools is not None:
                    raise ConfigurationError(
                        f"MCP server {config.name!r}, tool {spec.name!r}: it requires task "
                        f"augmentation, {_NO_TASKS}; remove it from `tools`"
                    )
                _log.info(
                    "MCP server %r: tool %r left out: it requires task augmentation, %s",
                    config.name,
                    spec.name,
                    _NO_TASKS,
                )
                continue
            try:
                check_tool_name(config.exposed_name(spec.name))
                tools.append(mcp_tool(connection, spec, self._policy(config, spec)))
            except ConfigurationError as exc:
                if config.tools is not None:
                    raise ConfigurationError(
                        f"MCP server {config.name!r}, tool {spec.name!r}: {exc}"
                    ) from None
                _log.warning("MCP server %r: tool %r skipped: %s", config.name, spec.name, exc)
        return tools

    def _policy(self, config: McpServerConfig, spec: types.Tool) -> McpPolicy:
        listed = mcp_policy(config, spec)
        key = (config.name, spec.name)
        before = self._policies.get(key)
        policy = listed if before is None else before.stricter(listed)
        if policy != listed:
            _log.warning(
                "MCP server %r: tool %r now declares a looser policy (%s); keeping %s",
                config.name,
                spec.name,
                listed,
                policy,
            )
        self._policies[key] = policy
        return policy

    def _rebuild(self) -> None:
        kits = [  # in configuration order, whichever server answered first
            Toolkit(*self._tools[s.name], label=f"MCP server {s.name!r}")
            for s in self.servers
            if s.name in self._tools
        ]
        self._toolkit = compose(*kits, label="mcp") if kits else Toolkit(label="mcp")
        self._server_of = {t.name: s for s in self.servers for t in self._tools.get(s.name, [])}
        self.version += 1
        for listener in self._listeners:
            listener()

    def server_of(self, tool: str) -> McpServerConfig | None:
        """The configuration of the server whose tool is named `tool` (prefixed), or `None`."""
        return self._server_of.get(tool)

    def toolkit(self) -> Toolkit:
        """The current tools of every server that started (a snapshot)."""
        return self._toolkit

    @property
    def stale(self) -> bool:
        """True when a server reported a changed tool list not yet refreshed."""
        return bool(self._stale)

    async def refresh(self) -> bool:
        """List the tools of servers that reported a change, between turns.

        Returns:
            True when the toolkit was rebuilt.
        """
        if not self._stale:
            return False
        names, self._stale = sorted(self._stale), set()
        for name in names:
            connection = self.connections[name]
            try:
                specs = await connection.list_tools()
                self._tools[name] = self._build(connection, specs)
            except (McpStartError, MCPError, ConfigurationError) as exc:
                _log.warning("MCP server %r: tool list not refreshed: %s", name, exc)
        try:
            self._rebuild()
        except DurableToolsError as exc:
            _log.warning("MCP tool lists not refreshed: %s", exc)
            return False
        return True

    def stats(self) -> dict[str, dict[str, int]]:
        """Per server: requests sent by method, and connection `starts`."""
        return {name: {**c.requests, "starts": c.starts} for name, c in self.connections.items()}

    async def aclose(self) -> None:
        """Close every connection (stdio server processes are stopped)."""
        await asyncio.gather(*(c.close() for c in self.connections.values()))
