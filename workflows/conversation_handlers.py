"""`ConversationHandlers`: the conversation's signals, updates and queries.

`AgentWorkflow` (workflows/agent_workflow.py) runs the loop; this mixin holds
what reaches it from outside while it runs: the `retry`, `send` and routed
signals (`decide`, `answer`, `resume`, `raise_budget`, `set_policy`,
`revoke_grant`), the
`retry_now`, `decide_now`, `answer_now`, `resume_now` and `await_turn`
updates, the `pending`, `status`, `history`, `followed` and activities'
queries, and the in-process reads (`live_*`, durable_tools.live_runs).
Temporal collects a workflow's handlers from its bases too, so they are the
workflow's as if written in its class.

Every input is untrusted (DESIGN.md invariant 7): handlers decode through
`handler_inputs`, and what cannot be decoded is recorded in
`pending().rejected`, never raised into the workflow task.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from durable_tools.workflows.handler_inputs import (
    after_turns,
    decoded_signal,
    decoded_update,
    received_message,
    requested_by,
    text_argument,
    unknown_query,
)
from durable_tools.workflows.visibility import SENDER_EVENTS_PATCH, settled

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import (
        AGENT_CONFIG_QUERY,
        POLICY_VERSION_QUERY,
        TOOL_CALL_QUERY,
        TRANSCRIPT_QUERY,
        ConversationInput,
    )
    from durable_tools.approvals import Decision
    from durable_tools.budgets import BudgetRaise
    from durable_tools.conversation import (
        AgentConfig,
        Answer,
        ConversationStatus,
        DecisionReceipt,
        PendingState,
        Resume,
        SendMessage,
        TranscriptPage,
        TranscriptSlice,
        TurnOutcome,
    )
    from durable_tools.grants import GrantRevocation
    from durable_tools.handler_input import clean_text
    from durable_tools.policy_document import PolicyChange, PolicyDocument
    from durable_tools.results import ToolCall
    from durable_tools.transcript import TranscriptItem, Usage, is_reconciled

if TYPE_CHECKING:
    from durable_tools.workflows.budget_check import BudgetCheck
    from durable_tools.workflows.decision_book import DecisionBook
    from durable_tools.workflows.live_policy import LivePolicy
    from durable_tools.workflows.model_turns import ModelTurns
    from durable_tools.workflows.run_transcript import RunTranscript
    from durable_tools.workflows.signal_tools import SignalWaits
    from durable_tools.workflows.turn_calls import TurnCalls
    from durable_tools.workflows.visibility import Visibility

__all__ = ["ConversationHandlers"]


class ConversationHandlers:
    """The handlers of `AgentWorkflow`; the loop's state they read is set by its `__init__`."""

    _input: ConversationInput
    _agent: str
    _log: RunTranscript
    _transcript: list[TranscriptItem]
    _inbox: list[SendMessage]
    _turns: int
    _runs: int
    _usage: dict[str, Usage]
    _continuing: bool
    _view: Visibility
    _model: ModelTurns
    _budget: BudgetCheck
    _calls: TurnCalls
    _book: DecisionBook
    _signal_waits: SignalWaits
    _policy: LivePolicy

    def _last_text(self) -> str:
        return self._log.last_text()

    @workflow.signal(name="retry")
    def retry(self, *args: Any) -> None:
        """Run a failed model turn again (state `model_failed`; durable).

        Takes an optional `RetryRequest`; any input (none, several, not JSON)
        counts as a plain retry. Ignored in any other state. Its
        `requested_by` is published (`model_retry_requested`).
        """
        if self._model.failed is not None:
            self._retry_requested(args)

    def _retry_requested(self, args: Sequence[Any]) -> None:
        failed = self._model.failed
        if not self._model.retry_requested and workflow.patched(SENDER_EVENTS_PATCH):
            sender = requested_by(args)
            turn = failed.turn if failed is not None else None
            self._view.event("model_retry_requested", turn=turn, sent_by=sender or None)
        self._model.retry_requested = True

    @workflow.update(name="retry_now")
    def retry_now(self, *args: Any) -> None:
        """Run a failed model turn again; rejected unless the state is `model_failed`.

        Takes an optional `RetryRequest` (any input is accepted).
        """
        self._retry_requested(args)

    @retry_now.validator
    def _validate_retry_now(self, *args: Any) -> None:
        self._model.check_retry(self._view.state)

    def _decision_problem(self, decision: Decision) -> str | None:
        return self._book.decision_problem(decision)

    def _answer_problem(self, answer: Answer) -> str | None:
        return self._book.answer_problem(answer)

    def send(self, message: SendMessage) -> None:
        """The `send` signal: add a user message; it wakes an idle conversation.

        While approvals, answers, a pause or a sleep are pending, the message
        supersedes them: they are answered `cancelled` (or woken) and the model
        sees the new message next; their outputs name the message's sender.
        Who may supersede is the inbox's to check
        (`ConversationOptions.messages_supersede`): the sender is not signed.
        """
        message = received_message(message)
        self._inbox.append(message)
        book, waits = self._book, self._signal_waits
        if book.approvals or book.interactions or waits.paused is not None or waits.sleepers:
            if not self._calls.superseded:
                self._calls.superseded_by = message.sent_by
            self._calls.superseded = True

    @workflow.signal(dynamic=True)
    async def _signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Route `decide`, `answer`, `send`, `resume`, `raise_budget`, `set_policy`, `revoke_grant`.

        `decide`, `answer` and `revoke_grant` go to the book
        (`DecisionBook.decide`, `DecisionBook.answer`,
        `DecisionBook.revoke_grant`), `resume` to the pause
        (`SignalWaits.take_resume`), `set_policy` to `LivePolicy.change`.
        An input that cannot be decoded into the signal's model is recorded
        in `pending().rejected` with the reason; a signal of another name is
        logged and ignored.
        """
        decoded = decoded_signal(name, args, self._book.reject)
        if isinstance(decoded, Decision):
            await self._book.decide(decoded)
        elif isinstance(decoded, Answer):
            self._book.answer(decoded)
        elif isinstance(decoded, SendMessage):
            self.send(decoded)
        elif isinstance(decoded, BudgetRaise):
            self._budget.raise_budget(decoded, self._agent)
        elif isinstance(decoded, PolicyChange):
            self._policy.change(decoded)
        elif isinstance(decoded, GrantRevocation):
            self._book.revoke_grant(decoded)
        elif decoded is not None:
            self._signal_waits.take_resume(decoded)

    @workflow.update(dynamic=True)
    async def _update(self, name: str, args: Sequence[RawValue]) -> DecisionReceipt | None:
        """Route `decide_now`, `answer_now` and `resume_now` (validated by `_validate_update`)."""
        decoded = decoded_update(name, args)
        if isinstance(decoded, Decision):
            return await self._book.decide_now(decoded)
        if isinstance(decoded, Resume):
            return self._signal_waits.take_resume(decoded)
        return self._book.answer_now(decoded)

    @_update.validator
    def _validate_update(self, name: str, args: Sequence[RawValue]) -> None:
        """Reject an update (nothing recorded) whose input cannot be decoded or fails its checks.

        Raises:
            ApplicationError: Type `DecisionRejected` (the client raises
                `DecisionRejected`) with the reason, `ResumeRejected` for a
                `resume_now` while nothing is paused, or `UnknownUpdate`.
        """
        decoded = decoded_update(name, args)
        if isinstance(decoded, Resume):
            return self._signal_waits.check_resume(self._view.state)
        problem = self._book.update_problem(decoded)
        if problem is not None:
            raise ApplicationError(clean_text(problem), type="DecisionRejected", non_retryable=True)

    @workflow.query(dynamic=True)
    def _query(
        self, name: str, args: Sequence[RawValue]
    ) -> list[TranscriptItem] | TranscriptPage | AgentConfig | ToolCall | PolicyDocument | None:
        """Route the activities' queries (`transcript_slice`, `agent_config`, ...).

        `transcript_slice`: an argument with `known_digest` gets a
        `TranscriptPage`, any other a list; an undecodable argument reads the
        first page. `agent_config` (argument: a name) answers this run's
        configuration of that agent, `tool_call` (argument: a call id) the
        open call of that id, `policy_version` (argument: a version,
        `sha256:...`) the document of that digest a live change installed in
        this run (`LivePolicy.document`); each answers `None` for what it
        does not have, and for an argument it cannot decode.

        Raises:
            ApplicationError: For a query name this workflow does not have
                (the query fails, the workflow does not).
        """
        if name == AGENT_CONFIG_QUERY:
            return self._input.agents.get(text_argument(args))
        if name == TOOL_CALL_QUERY:
            return self._calls.open.get(text_argument(args))
        if name == POLICY_VERSION_QUERY:
            return self._policy.document(text_argument(args))
        if name != TRANSCRIPT_QUERY:
            raise unknown_query(name)
        return self._log.query(args)

    # ------------------------------------------------ read in process (live_runs)

    def live_agent_config(self, name: str) -> AgentConfig | None:
        """The `agent_config` query's answer, for an activity in this process."""
        return self._input.agents.get(name)

    def live_open_call(self, call_id: str) -> ToolCall | None:
        """The `tool_call` query's answer, for an activity in this process."""
        return self._calls.open.get(call_id)

    def live_policy(self, version: str) -> PolicyDocument | None:
        """The `policy_version` query's answer, for an activity in this process."""
        return self._policy.document(version)

    def live_transcript(self, request: TranscriptSlice) -> TranscriptPage | None:
        """The `transcript_slice` page, once the run holds items `[0, request.upto)`."""
        if self._log.length() < request.upto or request.known_digest is None:
            return None  # still replaying to the turn, or an old-style slice
        return self._log.page(request)

    def live_followed(self, now: datetime) -> bool:
        """The `followed` query's answer, for an activity in this process (at time `now`)."""
        return self._view.followed(now)

    @workflow.query(name="history")
    def history(self, *_ignored: object) -> list[TranscriptItem]:
        """The items this run holds (reconciled between turns); arguments are ignored.

        After continue-as-new a run holds the conversation's items from its
        `base` on (`TranscriptPage.base`); `Conversations.history` reads
        every item across runs.
        """
        return list(self._transcript)

    def transcript_slice(self, request: TranscriptSlice) -> list[TranscriptItem]:
        """The `transcript_slice` query without `known_digest`: a list (`run_transcript`)."""
        return self._log.slice(request)

    def transcript_page(self, request: TranscriptSlice) -> TranscriptPage:
        """The `transcript_slice` query with `known_digest`: a page (`run_transcript`)."""
        return self._log.page(request)

    @workflow.update(name="await_turn")
    async def await_turn(self, *args: Any) -> TurnOutcome:
        """Wait until the conversation settles after more than `after_turns` model turns.

        Takes an optional `{"after_turns": n}` (default 0; any other input
        counts as 0). Settled: the model answered (state `idle`), a call waits
        for a person, the loop is paused, the model failed, or the
        conversation ended. When the run continues as new first, it answers
        state `continued` (with this run's `run_id`) instead of waiting: the
        caller asks the next run (`Conversations.wait_turn` follows the chain).
        `Conversations.start_and_wait` sends it with the start
        (update-with-start).
        """
        after = after_turns(args)
        await workflow.wait_condition(
            lambda: self._continuing or (self._turns > after and self._settled())
        )
        state = "continued" if self._continuing else self._view.state
        return TurnOutcome(
            state=state,
            reply=self._last_text() if state in ("idle", "finished") else None,
            pending=self.pending(),
            turns=self._turns,
            run_id=workflow.info().run_id,
        )

    def _settled(self) -> bool:
        book, paused = self._book, self._signal_waits.paused
        return settled(self._view.state, book.approvals, book.interactions, paused)

    @workflow.query(name="pending")
    def pending(self, *_ignored: object) -> PendingState:
        """Approvals and interactions waiting, the pause reason, rejected inputs."""
        pending = self._book.pending_state(self._signal_waits.paused, self._model.failed)
        sub_agents = self._calls.sub_agents
        running = list(sub_agents.running.values()) if sub_agents is not None else []
        if self._budget.exceeded is None and not running:
            return pending
        return pending.model_copy(
            update={"budget_exceeded": self._budget.exceeded, "sub_agents": running}
        )

    @workflow.query(name="status")
    def status(self, *_ignored: object) -> ConversationStatus:
        """What the loop is doing now, with counts; arguments are ignored."""
        state = self._view.state
        return ConversationStatus(
            state=state,
            agent=self._agent,
            turns=self._turns,
            runs=self._runs,
            pending_approvals=len(self._book.approvals),
            pending_interactions=len(self._book.interactions),
            running_tools=self._calls.running,
            transcript_items=self._log.length(),
            reconciled=is_reconciled(self._transcript),
            model_failed=self._model.failed,
            usage=self._usage,
            cost_usd=self._budget.state.spent.cost_usd,
            budget=self._budget.carried()["budget"],
            budget_exceeded=self._budget.exceeded,
            unanswered_messages=list(self._inbox) if state == "finished" else [],
            policy=installed.ref() if (installed := self._policy.installed) else None,
        )

    @workflow.query(name="followed")
    def followed(self) -> bool:
        """Whether a reader follows the event stream: a poll waits, or one ended lately.

        "Lately" is within `FOLLOW_WINDOW` seconds of the workflow's clock.
        The model activity asks before it publishes text deltas (see
        `activities/activity_events.py`).
        """
        return self._view.followed()
