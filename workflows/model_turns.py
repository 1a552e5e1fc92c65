"""The model turn as an activity, and the wait after it fails for good.

`ModelTurns` runs the `model.turn` activity (timeouts and the bounded retry
policy of the agent's `ModelRetry`; the agent's configuration whole only
where the worker may not hold it) and, when a turn fails for good, holds the
`ModelFailure` the loop waits in (state `model_failed`) until the `retry`
signal / `retry_now` update, a new message, or a move to a new run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from durable_tools.workflows.model_failure import describe_model_failure, model_retry_policy
from durable_tools.workflows.visibility import Visibility
from durable_tools.workflows.waits import MOVED, Moved, Waits

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import (
        MODEL_TURN_ACTIVITY,
        CarriedState,
        ModelTurn,
        ModelTurnRequest,
        TranscriptDelta,
    )
    from durable_tools.arguments import SUMMARY_LIMIT
    from durable_tools.conversation import AgentConfig, ConversationOptions, ModelFailure
    from durable_tools.policy_document import PolicyRef
    from durable_tools.teams import TEAM
    from durable_tools.transcript import TranscriptItem, Usage

__all__ = ["MODEL_FAILED_PATCH", "ModelTurns", "add_usage", "turn_summary"]

MODEL_FAILED_PATCH = "model-failed-waits"
"""Patch id: histories recorded before it failed the workflow on a model error."""


def add_usage(totals: dict[str, Usage], model: str, usage: Usage | None) -> None:
    """Add a model call's `usage` (if it reported one) to the conversation's totals per model."""
    if usage is not None:
        totals[model] = totals.get(model, Usage()) + usage


def turn_summary(agent: AgentConfig, number: int) -> str:
    """The model activity's summary: the agent, its model and the turn's number.

    Args:
        agent: The turn's agent configuration.
        number: The turn's number (1 for the conversation's first).

    Returns:
        E.g. `support: openai:gpt-4o, turn 3`, at most `SUMMARY_LIMIT` (120)
        characters: a long agent or model name is cut, the turn's number kept.
    """
    who = f"{agent.name}: {agent.model}" if agent.model else agent.name
    turn = f", turn {number}"
    if len(who) + len(turn) > SUMMARY_LIMIT:
        who = who[: max(SUMMARY_LIMIT - len(turn) - 1, 0)] + "…"
    return who + turn


class ModelTurns:
    """The model turn's activity, and the failure the loop waits in.

    Args:
        options: The conversation's options (timeouts, default `ModelRetry`,
            `transcript_in_activity_input`).
        state: The state the run starts from: a failure carried from the
            previous run (it waited in it), with a `retry` that arrived.
        view: The loop's state and events.
        waits: The run's durable waits.
        publish: Publishes what is pending.
    """

    def __init__(
        self,
        options: ConversationOptions,
        state: CarriedState,
        *,
        view: Visibility,
        waits: Waits,
        publish: Callable[[], None],
    ) -> None:
        self._options = options
        self._view = view
        self._waits = waits
        self._publish = publish
        # Set from the carry too, so a `retry` in the run's first task counts.
        self.failed: ModelFailure | None = state.model_failed
        self.retry_requested = state.retry_requested
        # Waited on first in this run: the previous one moved while it waited.
        self.carried_failure: ModelFailure | None = state.model_failed
        # The agent whose configuration this run last sent whole to the model activity.
        self.sent_agent: str | None = None

    def carried(self) -> dict[str, Any]:
        """The `CarriedState` fields of a failure the run waits in (with a `retry`)."""
        return {
            "model_failed": self.failed,
            "retry_requested": self.retry_requested and self.failed is not None,
        }

    def check_retry(self, state: str) -> None:
        """The `retry_now` validator: a retry applies only while a failure waits.

        Raises:
            ApplicationError: Type `RetryRejected`, naming the state, otherwise.
        """
        if self.failed is None:
            raise ApplicationError(
                f"the conversation is not waiting after a model failure (state {state!r})",
                type="RetryRejected",
                non_retryable=True,
            )

    async def next_turn(
        self,
        request: Callable[[], Awaitable[ModelTurn]],
        agent: Callable[[], AgentConfig],
        number: int,
        has_message: Callable[[], bool],
        take_inbox: Callable[[], None],
    ) -> ModelTurn | Moved:
        """Run the model turn until it succeeds; between failures, wait for an operator.

        Args:
            request: Runs the turn (`request`, with the loop's transcript).
            agent: The current agent's configuration.
            number: The turn's number.
            has_message: Whether a user message waits (it ends the wait).
            take_inbox: Moves waiting messages into the transcript (before
                the turn runs again).

        Returns:
            The turn, or `MOVED` when the run continues as new while it waits
            after a failure (a new worker version: the next run waits on, or
            retries).

        Raises:
            ActivityError: The conversation was cancelled during the turn, or
                the history predates MODEL_FAILED_PATCH (the failure ends it).
        """
        while True:
            failure, self.carried_failure = self.carried_failure, None
            if failure is None:
                try:
                    return await request()
                except ActivityError as exc:
                    # A cancelled conversation cancels its model turn: that ends it.
                    if isinstance(exc.cause, CancelledError) or not workflow.patched(
                        MODEL_FAILED_PATCH
                    ):
                        raise
                    failure = self.describe_failure(exc, agent(), number)
            if not await self.wait_after_failure(failure, has_message):
                self.carried_failure = failure  # waited on after the move
                return MOVED
            take_inbox()

    async def request(
        self,
        name: str,
        agent: AgentConfig,
        *,
        number: int,
        upto: int,
        known_digest: str,
        transcript: list[TranscriptItem],
        delta: Callable[[], TranscriptDelta | None],
        policy: PolicyRef | None = None,
    ) -> ModelTurn:
        """Run turn `number` of `agent` as the `model.turn` activity.

        Args:
            name: The current agent's name (its key in `ConversationInput.agents`).
            agent: Its configuration.
            number: The turn's number (1 for the conversation's first).
            upto: How many items the conversation's transcript has.
            known_digest: The digest of the descriptors the loop holds.
            transcript: The run's items (sent whole only with
                `transcript_in_activity_input`).
            delta: Makes the turn's `TranscriptDelta` (called once otherwise).
            policy: The policy version a live change installed (`None`: none);
                the worker loads its document by version.

        Raises:
            ActivityError: The turn failed for good (`describe_failure`).
        """
        retry = agent.model_retry or self._options.model_retry
        self._view.state = "model"
        info = workflow.info()
        inline = self._options.transcript_in_activity_input
        # The configuration is in this run's input and its first model request;
        # later requests name it (read with the `agent_config` query by a
        # worker that did not keep it), unless the loop cannot be queried.
        whole = inline or name != self.sent_agent
        request = ModelTurnRequest(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            turn=number,
            upto=upto,
            # Whole in the run's first request and after a handoff (the
            # worker keeps it), else by name: no query on the common path.
            agent=agent if whole else None,
            agent_name="" if inline else name,
            known_digest=known_digest,
            transcript=list(transcript) if inline else None,
            delta=None if inline else delta(),
            team=info.typed_search_attributes.get(TEAM),
            policy_ref=policy,
        )
        self.sent_agent = name
        return await workflow.execute_activity(
            MODEL_TURN_ACTIVITY,
            request,
            result_type=ModelTurn,
            start_to_close_timeout=timedelta(seconds=self._options.model_timeout),
            schedule_to_close_timeout=timedelta(
                seconds=max(retry.timeout, self._options.model_timeout)
            ),
            heartbeat_timeout=timedelta(seconds=retry.heartbeat_timeout),
            retry_policy=model_retry_policy(retry),
            # Every turn, for Temporal's Web UI and `temporal workflow show`
            # (user metadata: replay ignores it, so histories recorded with a
            # summary on the first turn only replay). The worker CPU it costs
            # (a payload taken through the sandbox three times per workflow
            # task) is measured in docs/architecture.md.
            summary=turn_summary(agent, number),
        )

    def describe_failure(
        self, error: ActivityError, agent: AgentConfig, number: int
    ) -> ModelFailure:
        """Describe turn `number`, failed for good; log it and publish `model_failed`."""
        failure = describe_model_failure(
            error,
            retry=agent.model_retry or self._options.model_retry,
            turn=number,
            now=workflow.now(),
        )
        workflow.logger.warning(
            "model turn %d failed (%s): %s", failure.turn, failure.type, failure.message
        )
        self._view.event("model_failed", turn=failure.turn, reason=failure.message)
        self.retry_requested = False
        return failure

    async def wait_after_failure(
        self, failure: ModelFailure, has_message: Callable[[], bool]
    ) -> bool:
        """Wait for `retry` or a new message (True), or a move to a new run (False)."""
        self.failed = failure
        self._view.state = "model_failed"
        self._publish()
        try:
            await self._waits.wait(
                lambda: self._waits.move_due() or self.retry_requested or has_message(),
                None,
                "model_failed: waiting for retry or a new message",
            )
        except asyncio.CancelledError:
            self.failed = None
            raise
        if self._waits.move_due():
            return False  # `failed` (and a retry) go to the next run, on the new code
        self.failed = None
        self._publish()
        return True
