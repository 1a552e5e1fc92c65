"""Pure helpers of `durable_tools.client`: start options, workflow input, update failures.

Private: `durable_tools.client.Conversations` is the public API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, TypeVar, cast

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from durable_tools._wire import ConversationInput, conversation_input
from durable_tools.conversation import (
    AgentConfig,
    ConversationOptions,
    ConversationResult,
    DecisionReceipt,
)
from durable_tools.errors import DecisionRejected, DurableToolsError
from durable_tools.models._settings import check_settings

OutputT = TypeVar("OutputT", bound=BaseModel)


class ConversationsBase:
    """The client and task queue `Conversations` (see there) works with."""

    def __init__(self, client: Client, *, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    def _handle(self, workflow_id: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(workflow_id)


class StartOptions(TypedDict):
    """The keyword arguments `start` and `start_and_wait` start a workflow with."""

    id: str
    task_queue: str
    result_type: type[ConversationResult]
    id_conflict_policy: WorkflowIDConflictPolicy
    search_attributes: TypedSearchAttributes


def new_conversation_input(
    agent: AgentConfig,
    message: str | None,
    handoffs: Sequence[str | AgentConfig],
    options: ConversationOptions | None,
) -> ConversationInput:
    """The workflow input of a new conversation; handoffs given by name become configurations."""
    return conversation_input(
        agent,
        message=message,
        handoffs=[AgentConfig(name=h) if isinstance(h, str) else h for h in handoffs],
        options=options,
    )


async def decision_update(handle: WorkflowHandle[Any, Any], name: str, arg: Any) -> DecisionReceipt:
    """Send a decision or answer update; a `DecisionRejected` failure raises `DecisionRejected`."""
    receipt = await checked_update(handle, name, arg, DecisionRejected, result_type=DecisionReceipt)
    return cast(DecisionReceipt, receipt)  # decide_now and answer_now always return one


async def checked_update(
    handle: WorkflowHandle[Any, Any],
    name: str,
    arg: Any,
    rejected: type[DurableToolsError],
    *,
    result_type: type[DecisionReceipt] | None = None,
) -> DecisionReceipt | None:
    """Send a validated update; its validator's rejection raises `rejected`.

    The workflow's validators reject with an `ApplicationError` whose type is
    the name of the client error (`DecisionRejected`, `RetryRejected`,
    `ResumeRejected`); other failures propagate.
    """
    try:
        return await handle.execute_update(  # pyright: ignore[reportUnknownMemberType]
            name, arg, result_type=result_type
        )
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == rejected.__name__:
            raise rejected(cause.message) from exc
        raise


def with_overrides(
    agent: AgentConfig | str,
    *,
    model: str | None = None,
    settings: Mapping[str, Any] | None = None,
    variables: Mapping[str, str] | None = None,
) -> AgentConfig:
    """The agent configuration a client asks for: a name (or configuration) plus overrides.

    The worker checks each override against what its agent allows.

    Raises:
        ConfigurationError: A setting names a field the adapter renders, or is not JSON.
    """
    config = AgentConfig(name=agent) if isinstance(agent, str) else agent
    update: dict[str, Any] = {}
    if model is not None:
        update["model"] = model
    if settings:
        update["settings"] = {**config.settings, **check_settings(settings)}
    if variables:
        update["variables"] = {**config.variables, **variables}
    if update:  # validated: variables are strings, settings a JSON object
        config = AgentConfig.model_validate({**config.model_dump(), **update})
    return config
