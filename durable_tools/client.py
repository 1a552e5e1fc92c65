"""Client API: start conversations, decide, answer, send, inspect, by workflow id.

Every method takes the workflow id (and call id), never a handle, so a
stateless web backend can serve a UI with it. Decisions and answers go as
signals by default (durable: the server stores them even when no worker runs);
`wait=True` sends the validated update instead and raises `DecisionRejected`
at once when it fails its checks.

Example:
    ```python
    client = await Client.connect("localhost:7233", plugins=[DurableToolsPlugin(...)])
    conversations = Conversations(client, task_queue="agents")
    await conversations.start("ticket-42", agent=AgentConfig(model="gpt", toolkit="support"),
                              message="Refund order 1234")
    for approval in (await conversations.pending("ticket-42")).approvals:
        await conversations.approve("ticket-42", approval.call_id,
                                    arguments_hash=approval.arguments_hash, decided_by="ana")
    ```
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from temporalio.client import WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from durable_tools._client_policy import PolicyChanges
from durable_tools._client_reads import ConversationReads
from durable_tools._client_support import OutputT as OutputT  # `result`'s, as before
from durable_tools._client_support import (
    StartOptions,
    checked_update,
    decision_update,
    new_conversation_input,
    with_overrides,
)
from durable_tools.approvals import Decision, sign_decision
from durable_tools.conversation import (
    CANCELLED_BY,
    AgentConfig,
    Answer,
    ConversationOptions,
    ConversationResult,
    DecisionReceipt,
    Resume,
    RetryRequest,
    SendMessage,
    TurnOutcome,
)
from durable_tools.decision_keys import SigningKey
from durable_tools.errors import (
    ConfigurationError,
    DecisionRejected,
    DurableToolsError,
    ResumeRejected,
    RetryRejected,
)
from durable_tools.grants import GrantScope
from durable_tools.input_requests import ElicitAction
from durable_tools.teams import TEAM, check_team

__all__ = ["WORKFLOW_TYPE", "Conversations"]

_MAX_FOLLOWS = 100
"""Most `continued` answers `wait_turn` follows before it gives up (each is one run)."""

_FOLLOW_PAUSE = 0.05
"""Seconds `wait_turn` waits, doubling to 1 s, when the same run says `continued` again
(its continue-as-new waits for other handlers to finish)."""

WORKFLOW_TYPE = "AgentWorkflow"
"""Workflow type name of a conversation."""


class Conversations(ConversationReads, PolicyChanges):
    """Conversations on one Temporal namespace and task queue.

    Args:
        client: A connected Temporal client. It must use the pydantic data
            converter (connect with `DurableToolsPlugin`, or pass
            `data_converter=pydantic_data_converter`).
        task_queue: Task queue the durable-tools worker polls.
    """

    def _start_options(self, workflow_id: str, team: str | None) -> StartOptions:
        """How `start` and `start_and_wait` start (or attach to) a conversation's workflow."""
        attributes = (
            TypedSearchAttributes([SearchAttributePair(TEAM, check_team(team))])
            if team
            else TypedSearchAttributes.empty
        )
        return StartOptions(
            id=workflow_id,
            task_queue=self.task_queue,
            result_type=ConversationResult,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=attributes,
        )

    async def start(
        self,
        workflow_id: str,
        *,
        agent: str | AgentConfig,
        message: str | None = None,
        variables: Mapping[str, str] | None = None,
        model: str | None = None,
        settings: Mapping[str, Any] | None = None,
        handoffs: Sequence[str | AgentConfig] = (),
        options: ConversationOptions | None = None,
        summary: str | None = None,
        team: str | None = None,
    ) -> WorkflowHandle[Any, ConversationResult]:
        """Start a conversation, or return the running one with the same id.

        Starting twice with the same id is safe: the second call attaches to
        the running conversation (`WorkflowIDConflictPolicy.USE_EXISTING`) and
        its `message` is NOT sent again; use `send` for further messages.

        Args:
            workflow_id: Caller-chosen id (e.g. `"ticket-42"`).
            agent: The name of an agent the worker declares (`App(agents=...)`),
                or a whole `AgentConfig` (what a worker that declares no
                agents runs as sent: the development mode; a worker that
                declares agents accepts it only as far as that agent allows).
            message: The first user message (optional: the conversation can
                start idle and wait for `send`).
            variables: Values of the agent's instructions template variables
                (only those the agent allows).
            model: A model instead of the agent's own (only one the agent
                allows).
            settings: Provider settings merged over the agent's key by key
                (only keys the agent allows), e.g. `{"temperature": 0.7}`;
                JSON values, sent as request body fields. Names the adapters
                render themselves (`RENDERED_FIELDS`: `model`, `messages`,
                `tools`, ...) are refused here.
            handoffs: Other agents (names or configurations) `handoff` may
                switch to.
            options: Limits and deadlines (defaults: `ConversationOptions()`).
            summary: Shown in the Temporal UI and `temporal workflow describe`.
            team: The team that owns the conversation (`durable_tools.teams`):
                its `DurableToolsTeam` search attribute, which the inbox
                shows only to that team's people. `None` (default): no team.

        Returns:
            The workflow handle.

        Raises:
            ConfigurationError: Two agent configurations share a name, a
                setting names a rendered field or is not JSON, or `team` is
                not a team name (`check_team`). What
                the worker's agent does not allow is refused by the worker:
                the conversation waits in state `model_failed` with a
                `ConfigurationError` saying what (see `pending`).

        Example:
            ```python
            await conversations.start("ticket-42", agent="support",
                                      variables={"customer_name": "Ana"},
                                      message="My order A-1001 arrived broken")
            ```
        """
        agent = with_overrides(agent, model=model, settings=settings, variables=variables)
        return await self.client.start_workflow(
            WORKFLOW_TYPE,
            new_conversation_input(agent, message, handoffs, options),
            **self._start_options(workflow_id, team),
            static_summary=summary
            or f"conversation with {agent.name}" + (f" ({agent.model})" if agent.model else ""),
        )

    async def start_and_wait(
        self,
        workflow_id: str,
        *,
        agent: str | AgentConfig,
        message: str,
        variables: Mapping[str, str] | None = None,
        model: str | None = None,
        settings: Mapping[str, Any] | None = None,
        handoffs: Sequence[str | AgentConfig] = (),
        options: ConversationOptions | None = None,
        summary: str | None = None,
        team: str | None = None,
    ) -> TurnOutcome:
        """Start a conversation and return its first answer or first wait, in one call.

        For web backends: one round trip (Temporal's update-with-start) starts
        the workflow (or attaches to the running one with that id) and waits,
        through the `await_turn` update, until the model has answered, a call
        waits for a person, or the model failed. Needs a worker to be running
        (an update is answered by a worker; `start` alone does not).

        Args:
            workflow_id: Caller-chosen id.
            agent: The agent's name on the worker (or a configuration), as in `start`.
            message: The first user message.
            variables: Template variables the agent allows, as in `start`.
            model: A model the agent allows instead of its own, as in `start`.
            settings: Provider settings the agent allows, as in `start`.
            handoffs: Other agents `handoff` may switch to.
            options: Limits and deadlines.
            summary: Shown in the Temporal UI.
            team: The team that owns the conversation, as in `start`.

        Returns:
            The `TurnOutcome`: `reply` (the model's text), or `pending`
            (approvals and questions to show, with their hashes), from the
            run the conversation settled in (continue-as-new is followed, as
            in `wait_turn`).

        Raises:
            ConfigurationError: Two agent configurations share a name.
            temporalio.client.WorkflowUpdateFailedError: The update failed.
        """
        agent = with_overrides(agent, model=model, settings=settings, variables=variables)
        start: WithStartWorkflowOperation[Any, ConversationResult] = WithStartWorkflowOperation(
            WORKFLOW_TYPE,
            new_conversation_input(agent, message, handoffs, options),
            **self._start_options(workflow_id, team),
            static_summary=summary or f"conversation with {agent.name} ({agent.model})",
        )
        outcome: TurnOutcome = await self.client.execute_update_with_start_workflow(  # pyright: ignore[reportUnknownMemberType]
            "await_turn",
            {"after_turns": 0},
            start_workflow_operation=start,
            result_type=TurnOutcome,
        )
        if outcome.state != "continued":
            return outcome
        return await self._follow(workflow_id, after_turns=0, previous=outcome)

    async def wait_turn(self, workflow_id: str, *, after_turns: int = 0) -> TurnOutcome:
        """Wait until the conversation settles after more than `after_turns` model turns.

        Sends the `await_turn` update to the conversation's current run and
        follows continue-as-new: a run that continues as new before it
        settles answers `continued`, and the next run is asked, so the
        answer comes from whichever run the conversation settles in. Needs a
        running worker.

        Args:
            workflow_id: The conversation.
            after_turns: Model turns the caller has already seen (default 0:
                any settled state after the first turn).

        Returns:
            The `TurnOutcome` (never state `continued`).

        Raises:
            DurableToolsError: The conversation said `continued` 100 times in
                a row (a run that cannot continue as new would not).
            temporalio.client.WorkflowUpdateFailedError: The update failed.
        """
        return await self._follow(workflow_id, after_turns=after_turns, previous=None)

    async def _follow(
        self, workflow_id: str, *, after_turns: int, previous: TurnOutcome | None
    ) -> TurnOutcome:
        handle = self._handle(workflow_id)  # no run id: the current run
        pause = _FOLLOW_PAUSE
        for _ in range(_MAX_FOLLOWS):
            outcome: TurnOutcome = await handle.execute_update(  # pyright: ignore[reportUnknownMemberType]
                "await_turn", {"after_turns": after_turns}, result_type=TurnOutcome
            )
            if outcome.state != "continued":
                return outcome
            if previous is not None and previous.run_id == outcome.run_id:
                # The same run again: its continue-as-new is still waiting for
                # other handlers (a decision being verified, say).
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
            else:
                pause = _FOLLOW_PAUSE
            previous = outcome
        raise DurableToolsError(
            f"conversation {workflow_id!r} kept continuing as new before it settled "
            f"({_MAX_FOLLOWS} runs asked); ask again with wait_turn"
        )

    async def send(
        self, workflow_id: str, text: str, *, sent_by: str = "", operator: bool = False
    ) -> None:
        """Send a message (signal; durable even with no worker running).

        Args:
            workflow_id: The conversation.
            text: The message.
            sent_by: Who sends it (kept in the transcript and the event stream).
            operator: An operator's note, not the user's words (default False:
                a user message); the model receives it marked as one
                (`UserMessage.as_model_text`).
        """
        message = SendMessage(text=text, sent_by=sent_by, operator=operator)
        await self._handle(workflow_id).signal("send", message)

    async def resume(
        self,
        workflow_id: str,
        message: str = "resumed",
        *,
        resumed_by: str = "",
        wait: bool = False,
    ) -> None:
        """Resume a conversation paused by the `pause` signal tool.

        Args:
            workflow_id: The conversation.
            message: What the model reads as the `pause` call's output.
            resumed_by: Who resumes it.
            wait: Send the validated `resume_now` update instead of the
                `resume` signal: it needs a running worker and raises at once
                when no `pause` call waits (the signal is then kept for the
                conversation's next pause).

        Raises:
            ResumeRejected: With `wait=True`, nothing is paused.
        """
        resume = Resume(message=message, resumed_by=resumed_by)
        handle = self._handle(workflow_id)
        if wait:
            await checked_update(handle, "resume_now", resume, ResumeRejected)
        else:
            await handle.signal("resume", resume)

    async def decide(
        self,
        workflow_id: str,
        call_id: str,
        *,
        approved: bool,
        arguments_hash: str,
        decided_by: str = "",
        reason: str = "",
        groups: Sequence[str] = (),
        sign_with: tuple[str, SigningKey] | None = None,
        instance: str | None = None,
        wait: bool = False,
        grant: GrantScope | None = None,
    ) -> DecisionReceipt | None:
        """Send a decision on an approval-gated call.

        Args:
            workflow_id: The conversation.
            call_id: The call.
            approved: Run it (True) or deny it (False).
            arguments_hash: The digest of the call the decider saw
                (`PendingApproval.arguments_hash`, from `pending`: tool name,
                call id and canonical arguments). Required: the client never
                looks it up itself, so a decision proves what was shown.
            decided_by: Who decided.
            reason: Why (a denial's reason reaches the model).
            groups: Groups of `decided_by` to assert (signed decisions only).
            sign_with: `(key_id, key)`: sign the decision
                (`durable_tools.approvals.sign_decision`) with an HMAC secret
                or an Ed25519 private key; needed when the tool has approvers
                or the conversation requires signed decisions.
            instance: The wait decided on (`PendingApproval.instance`), which
                a signed decision is bound to. `None` (default): with
                `sign_with`, looked up with the `pending` query (which needs
                a running worker).
            wait: Send the `decide_now` update and wait for its acceptance
                instead of the `decide` signal.
            grant: With an approval, "for the rest of this conversation":
                later calls of this tool whose arguments match the scope
                run without waiting (`durable_tools.grants`; signed with
                the rest). The call itself must match it, and a call that
                needs a quorum takes none.

        Returns:
            The receipt with `wait=True`, else `None`.

        Raises:
            ConfigurationError: `arguments_hash` is empty.
            DecisionRejected: Signing, and the call is not waiting for a
                decision (its instance is looked up); with `wait=True`, the
                call is unknown, already
                decided, the digest does not match, or the signature or the
                decider's identity is refused.
        """
        if not arguments_hash:
            raise ConfigurationError(
                "arguments_hash is required: pass the digest of the call the person saw "
                "(PendingApproval.arguments_hash)"
            )
        if sign_with is not None:
            if instance is None:
                instance = await self._instance(workflow_id, call_id)
            decision = sign_decision(
                sign_with[0],
                sign_with[1],
                workflow_id=workflow_id,
                instance=instance,
                call_id=call_id,
                arguments_hash=arguments_hash,
                approved=approved,
                decided_by=decided_by,
                groups=groups,
                reason=reason,
                grant=grant,
            )
        else:
            decision = Decision(
                call_id=call_id,
                approved=approved,
                arguments_hash=arguments_hash,
                decided_by=decided_by,
                decided_at=datetime.now(UTC),
                reason=reason,
                groups=list(groups),
                grant=grant,
            )
        return await self.send_decision(workflow_id, decision, wait=wait)

    async def _instance(self, workflow_id: str, call_id: str) -> str:
        """The `instance` of call `call_id`'s wait for a decision (the `pending` query)."""
        approvals = (await self.pending(workflow_id)).approvals
        found = next((a for a in approvals if a.call_id == call_id), None)
        if found is None:
            waiting = ", ".join(a.call_id for a in approvals) or "none"
            raise DecisionRejected(
                f"call {call_id[:200]!r} of {workflow_id!r} is not waiting for a decision "
                f"(waiting: {waiting})"
            )
        return found.instance

    async def send_decision(
        self, workflow_id: str, decision: Decision, *, wait: bool = False
    ) -> DecisionReceipt | None:
        """Send a decision made elsewhere (e.g. signed by an approval service).

        Args:
            workflow_id: The conversation.
            decision: The decision, e.g. from `sign_decision`.
            wait: Use the validated `decide_now` update.

        Returns:
            The receipt with `wait=True`, else `None`.

        Raises:
            DecisionRejected: With `wait=True`, the decision was refused.
        """
        handle = self._handle(workflow_id)
        if not wait:
            await handle.signal("decide", decision)
            return None
        return await decision_update(handle, "decide_now", decision)

    async def approve(
        self, workflow_id: str, call_id: str, *, arguments_hash: str, **kwargs: Any
    ) -> DecisionReceipt | None:
        """`decide(..., approved=True)`; see `decide` for the keyword arguments."""
        return await self.decide(
            workflow_id, call_id, approved=True, arguments_hash=arguments_hash, **kwargs
        )

    async def deny(
        self, workflow_id: str, call_id: str, *, arguments_hash: str, **kwargs: Any
    ) -> DecisionReceipt | None:
        """`decide(..., approved=False)`; see `decide` for the keyword arguments."""
        return await self.decide(
            workflow_id, call_id, approved=False, arguments_hash=arguments_hash, **kwargs
        )

    async def answer(
        self,
        workflow_id: str,
        call_id: str,
        value: Any,
        *,
        arguments_hash: str,
        answered_by: str = "",
        wait: bool = False,
        action: ElicitAction = "accept",
    ) -> DecisionReceipt | None:
        """Answer an interaction tool call, or a question a running tool asked.

        Args:
            workflow_id: The conversation.
            call_id: The call.
            value: The answer (JSON), checked against the tool's answer schema.
            arguments_hash: The digest of the question the person saw
                (`PendingInteraction.arguments_hash`); required, as in `decide`.
            answered_by: Who answered.
            wait: Use the validated `answer_now` update.
            action: `"accept"` (default), or `"decline"` / `"cancel"` a
                question an MCP server asked (`PendingInteraction.input_request`
                is set); `value` must then be `None`. The server is told which.

        Returns:
            The receipt with `wait=True`, else `None`.

        Raises:
            ConfigurationError: `arguments_hash` is empty.
            DecisionRejected: With `wait=True`, an unknown call, a second
                answer, a hash mismatch or an answer violating the schema.
        """
        if not arguments_hash:
            raise ConfigurationError(
                "arguments_hash is required: pass the digest of the question the person saw "
                "(PendingInteraction.arguments_hash)"
            )
        answer = Answer(
            call_id=call_id,
            value=value,
            arguments_hash=arguments_hash,
            answered_by=answered_by,
            answered_at=datetime.now(UTC),
            action=action,
        )
        handle = self._handle(workflow_id)
        if not wait:
            await handle.signal("answer", answer)
            return None
        return await decision_update(handle, "answer_now", answer)

    async def retry(self, workflow_id: str, *, requested_by: str = "", wait: bool = False) -> None:
        """Run a failed model turn again (the conversation is in state `model_failed`).

        Args:
            workflow_id: The conversation.
            requested_by: Who asks (recorded in the signal's input).
            wait: Send the validated `retry_now` update instead of the `retry`
                signal: it needs a running worker and raises at once when the
                conversation is not waiting after a model failure (the signal
                is then ignored).

        Raises:
            RetryRejected: With `wait=True`, the conversation's state is not
                `model_failed`.
        """
        handle = self._handle(workflow_id)
        request = RetryRequest(requested_by=requested_by)
        if wait:
            await checked_update(handle, "retry_now", request, RetryRejected)
        else:
            await handle.signal("retry", request)

    async def cancel(self, workflow_id: str, *, cancelled_by: str = "") -> None:
        """Cancel the conversation; open calls are answered `cancelled` or `interrupted`.

        Args:
            workflow_id: The conversation.
            cancelled_by: Who cancels it: sent as the cancel request's reason
                (`cancelled by NAME`, `CANCELLED_BY`), which Temporal records
                in history; the workflow names them on the outputs of the calls
                it cancels and on its `conversation_finished` event. Default
                `""`: no reason.
        """
        reason = f"{CANCELLED_BY}{cancelled_by}" if cancelled_by else ""
        await self._handle(workflow_id).cancel(reason=reason)
