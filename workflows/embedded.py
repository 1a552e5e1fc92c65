"""Run the agent loop from your own workflow: as a child workflow, or inside it.

Two ways, from workflow code (both deterministic; import them in your
workflow module as you import `temporalio.workflow`):

```python
from durable_tools.conversation import AgentConfig
from durable_tools.workflows.embedded import run_agent, start_child_conversation


@workflow.defn
class TicketWorkflow:
    @workflow.run
    async def run(self, ticket: str) -> str:
        agent = AgentConfig(model="support-model", toolkit="shop")
        # A child workflow: its own id, history, continue-as-new and handlers;
        # approvals reach it by that id (`Conversations.approve(child_id, ...)`).
        child = await start_child_conversation(f"{ticket}-agent", agent=agent, message=ticket)
        first = await child
        # Or inside this workflow, with its handlers under "triage.":
        # signals `triage.decide`, `triage.send`..., queries `triage.pending`...
        second = await run_agent(agent, message=ticket, namespace="triage")
        return f"{first.output} / {second.output}"
```

The worker that runs your workflow needs durable-tools' activities
(`DurableToolsPlugin` on it, or a durable-tools worker on the same task queue).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import TRANSCRIPT_QUERY, conversation_input
    from durable_tools.conversation import AgentConfig, ConversationOptions, ConversationResult

from durable_tools.workflows.agent_workflow import AgentWorkflow

__all__ = ["EMBEDDED_HANDLERS", "run_agent", "start_child_conversation"]

EMBEDDED_HANDLERS: dict[str, tuple[str, ...]] = {
    "signals": (
        "decide",
        "answer",
        "send",
        "resume",
        "retry",
        "raise_budget",
        "set_policy",
        "revoke_grant",
    ),
    "updates": ("decide_now", "answer_now", "retry_now", "await_turn"),
    "queries": ("history", "pending", "status", TRANSCRIPT_QUERY),
}
"""The conversation's handler names; `run_agent` registers each as `{namespace}.{name}`."""


async def start_child_conversation(
    workflow_id: str,
    *,
    agent: AgentConfig,
    message: str | None = None,
    handoffs: Sequence[AgentConfig] = (),
    options: ConversationOptions | None = None,
    task_queue: str | None = None,
    summary: str | None = None,
    parent_close_policy: workflow.ParentClosePolicy = workflow.ParentClosePolicy.TERMINATE,
) -> workflow.ChildWorkflowHandle[AgentWorkflow, ConversationResult]:
    """Start a conversation as a child workflow of the calling workflow.

    Args:
        workflow_id: The child's workflow id: what approvals, answers and
            messages are sent to (`Conversations(...).approve(workflow_id, ...)`).
        agent: The agent configuration to start with.
        message: The first user message (default none: it waits for `send`).
        handoffs: Other configurations `handoff` may switch to.
        options: Limits and deadlines (default `ConversationOptions()`).
        task_queue: The durable-tools worker's task queue (default the
            parent's).
        summary: Shown in the Temporal UI.
        parent_close_policy: What happens to the conversation when the parent
            closes (default `TERMINATE`).

    Returns:
        The child's handle; `await handle` gives its `ConversationResult`.

    Raises:
        ConfigurationError: Two agent configurations share a name.
    """
    return await workflow.start_child_workflow(
        AgentWorkflow.run,
        conversation_input(agent, message=message, handoffs=handoffs, options=options),
        id=workflow_id,
        task_queue=task_queue,
        static_summary=summary or f"conversation with {agent.name} ({agent.model})",
        parent_close_policy=parent_close_policy,
    )


async def run_agent(
    agent: AgentConfig,
    *,
    message: str | None = None,
    handoffs: Sequence[AgentConfig] = (),
    options: ConversationOptions | None = None,
    namespace: str = "agent",
) -> ConversationResult:
    """Run the agent loop inside the calling workflow until the conversation ends.

    The same loop as `AgentWorkflow` (model turns and tool calls as
    activities, approvals and questions as durable waits, every call
    reconciled), with its signals, updates and queries registered under
    `{namespace}.` so they never collide with the calling workflow's own
    (`EMBEDDED_HANDLERS` lists them): e.g. signal `agent.decide` with a
    `Decision`, query `agent.pending`. Differences from a conversation
    workflow: it never continues as new (the calling workflow owns its
    history: use `start_child_conversation` for long conversations), the
    model activity receives the transcript in its input, and it upserts no
    search attributes or current details of the calling workflow.

    Args:
        agent: The agent configuration to start with.
        message: The first user message (default none: it waits for
            `{namespace}.send`).
        handoffs: Other configurations `handoff` may switch to.
        options: Limits and deadlines (default `ConversationOptions()`).
        namespace: Prefix of the handler names (default `"agent"`); run two
            agents in one workflow under two namespaces.

    Returns:
        The `ConversationResult` (`finish`, idle timeout or turn limit).

    Raises:
        ConfigurationError: Two agent configurations share a name.
        ValueError: A handler of this namespace is already registered.
    """
    base = options or ConversationOptions()
    embedded_options = base.model_copy(
        update={"transcript_in_activity_input": True, "search_attributes": False}
    )
    conversation = conversation_input(
        agent, message=message, handoffs=handoffs, options=embedded_options
    )
    # `embedded` must be set before __init__ runs: it decides whether the loop
    # registers an event stream (handlers) of its own on the calling workflow.
    loop = AgentWorkflow.__new__(AgentWorkflow)
    loop.embedded = True
    loop.namespace = namespace  # in its sub-agents' workflow ids: two loops never collide
    loop.__init__(conversation)  # pyright: ignore[reportUnknownMemberType]
    _register(loop, namespace)
    try:
        return await loop.run(conversation)
    finally:
        _unregister(namespace)


def _raw(values: Sequence[Any]) -> list[RawValue]:
    # Handlers registered here get decoded values; the loop's routing decodes
    # raw payloads itself (and records what it cannot use), so re-encode.
    converter = workflow.payload_converter()
    raws: list[RawValue] = []
    for value in values:
        try:
            raws.append(RawValue(converter.to_payload(value)))
        except Exception:  # a value the converter cannot encode: give the loop nothing
            continue
    return raws


def _register(agent_loop: AgentWorkflow, namespace: str) -> None:
    # The SDK types handler callables loosely; the loop's private routing
    # methods are wrapped by its decorators: talk to both untyped.
    loop: Any = agent_loop
    handlers: Any = workflow
    for name in (
        EMBEDDED_HANDLERS["signals"] + EMBEDDED_HANDLERS["updates"] + EMBEDDED_HANDLERS["queries"]
    ):
        if (
            handlers.get_signal_handler(f"{namespace}.{name}") is not None
            or handlers.get_update_handler(f"{namespace}.{name}") is not None
            or handlers.get_query_handler(f"{namespace}.{name}") is not None
        ):
            raise ValueError(f"a handler named {namespace}.{name} is already registered")

    def signal(name: str) -> Any:
        async def handle(*args: Any) -> None:
            if name == "retry":
                loop.retry(*args)
            else:
                await loop._signal(name, _raw(args))

        return handle

    for name in EMBEDDED_HANDLERS["signals"]:
        handlers.set_signal_handler(f"{namespace}.{name}", signal(name))

    def decision_update(name: str) -> tuple[Any, Any]:
        async def handle(*args: Any) -> Any:
            return await loop._update(name, _raw(args))

        def validate(*args: Any) -> None:
            loop._validate_update(name, _raw(args))

        return handle, validate

    for name in ("decide_now", "answer_now"):
        handle, validate = decision_update(name)
        handlers.set_update_handler(f"{namespace}.{name}", handle, validator=validate)

    def retry_now(*args: Any) -> None:
        loop.retry_now(*args)

    def validate_retry(*args: Any) -> None:
        loop._validate_retry_now(*args)

    handlers.set_update_handler(f"{namespace}.retry_now", retry_now, validator=validate_retry)

    async def await_turn(*args: Any) -> Any:
        return await loop.await_turn(*args)

    handlers.set_update_handler(f"{namespace}.await_turn", await_turn)

    def transcript_slice(*args: Any) -> Any:
        return loop._query(TRANSCRIPT_QUERY, _raw(args))

    def query(method: str) -> Any:
        def answer(*_ignored: Any) -> Any:
            return getattr(loop, method)()

        return answer

    for name in ("history", "pending", "status"):
        handlers.set_query_handler(f"{namespace}.{name}", query(name))
    handlers.set_query_handler(f"{namespace}.transcript_slice", transcript_slice)


def _unregister(namespace: str) -> None:
    handlers: Any = workflow
    for name in EMBEDDED_HANDLERS["signals"]:
        handlers.set_signal_handler(f"{namespace}.{name}", None)
    for name in EMBEDDED_HANDLERS["updates"]:
        handlers.set_update_handler(f"{namespace}.{name}", None)
    for name in EMBEDDED_HANDLERS["queries"]:
        handlers.set_query_handler(f"{namespace}.{name}", None)
