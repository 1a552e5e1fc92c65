"""A call that asked for input: questions for a person, then its retry (MCP MRTR).

When a tool activity returns `InputRequired` (an MCP server's input-required
result), `InputRounds.follow` asks a person each input request in turn, as a
question of the call (a `PendingInteraction` with `input_request` set, in
`pending`, the inbox and a `question_asked` event carrying the message and
the requested schema), checks each answer strictly against that schema (as
interaction tools' answers are, by `DecisionBook.answer_problem`), then
retries the call in a new activity with the answers and the server's exact
`requestState`. Roots requests are not asked: the activity answered them
from the server's configuration (`InputRequired.answered`), and those
answers go back with the person's. No activity runs while a person decides, so no worker slot
is held and a worker lost meanwhile changes nothing.

Several rounds work (at most `MAX_INPUT_ROUNDS`). A retry whose
`requestState` the server refuses (`STATE_REJECTED`: expired, or minted by
a server process since restarted) restarts the call once, as a fresh call;
a second refusal reaches the model as that `Failure`.

Each question's digest (`question_digest`) binds its answer to the call and
to the very question shown (round, key, message, schema): an answer to an
earlier question never applies to a later one. The `requestState` stays in
this module's locals and the activities' input and result: never in
`pending`, events or spans.

One output per call (DESIGN.md invariant 1): a question whose deadline
passes ends the call `expired`; a new message that supersedes the turn's
waits, or the conversation's cancellation (`TurnCalls.close`), ends it
`interrupted` (the server ran until it asked; the retry that would have
completed it was never sent).

A question waits like any other: when the turn's waits move to a new worker
version (`TurnCalls.move_now`), it returns `MOVED` and the call's
`InputProgress` (round, answers so far, `requestState`) is carried with its
pending question (`continuation.snapshot_turn`); the next run goes on from
there (`resume`). No wait moves while one of the call's activities runs.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from temporalio import workflow

from durable_tools.workflows.input_approvals import InputApprovals, Sampler
from durable_tools.workflows.notifications import MCP_QUESTION_WEBHOOKS_PATCH
from durable_tools.workflows.waits import MOVED, Moved, Waits, seconds_text

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import PlannedCall
    from durable_tools.approvals import Decision
    from durable_tools.conversation import PendingInteraction
    from durable_tools.handler_input import clean_sender
    from durable_tools.input_requests import (
        MAX_INPUT_ROUNDS,
        STATE_REJECTED,
        InputAnswer,
        InputProgress,
        InputQuestion,
        InputRequest,
        InputRequired,
        InputResume,
        question_digest,
        with_defaults,
    )
    from durable_tools.results import Failure, Ok, expired, failed, interrupted
    from durable_tools.tool_tasks import TaskState
    from durable_tools.workflows.decision_book import DecisionBook

__all__ = ["InputRounds"]


Execute = Callable[
    [PlannedCall, str, InputResume | None], Awaitable[Ok | Failure | InputRequired | TaskState]
]
"""Runs one activity of a call (`TurnCalls.execute`)."""


class _Calls(Protocol):
    """What `InputRounds` needs of the turn's calls (`TurnCalls`)."""

    book: DecisionBook
    waits: Waits
    superseded: bool
    superseded_by: str
    moving: bool
    running: int

    def publish(self) -> None: ...

    def calls_state(self) -> str: ...

    def move_now(self) -> bool: ...


class InputRounds:
    """Questions and retries of the turn's calls that asked for input.

    Args:
        calls: The turn's calls (their book, waits, supersession and moves).
        event: Publishes a `ConversationEvent` (`kind`, then its fields).
        set_state: Sets the loop's visible state (`"waiting"` while a person decides).

    Attributes:
        progress: Where each call waiting for a person stands, by call id
            (what `continuation.snapshot_turn` carries when the wait moves).
    """

    def __init__(
        self, calls: _Calls, event: Callable[..., None], set_state: Callable[[str], None]
    ) -> None:
        self._calls = calls
        self._event = event
        self._set_state = set_state
        self.progress: dict[str, InputProgress] = {}
        self.approvals = InputApprovals(calls, event, set_state)
        # Set by the loop (`AgentWorkflow`): answers sampling requests with its model.
        self.sampler: Sampler | None = None

    async def follow(
        self,
        plan: PlannedCall,
        toolkit: str,
        asked: InputRequired,
        execute: Execute,
        limit: asyncio.Semaphore,
    ) -> Ok | Failure | TaskState | Moved:
        """Ask, retry, and ask again until the call has its one result.

        Args:
            plan: The call's plan.
            toolkit: The toolkit its activities run in.
            asked: What its first activity returned.
            execute: Runs one activity of the call.
            limit: The turn's bound on running tool activities (held only
                while an activity runs, never while a person decides).

        Returns:
            The call's result: the server's, or the `Failure` of a question
            that expired or was superseded, of a second refused
            `requestState`, or of too many rounds; a `TaskState` when the
            server answered a retry with a task (the loop polls it);
            `MOVED` when its wait moved to the next run (`progress` holds
            where it stands).
        """
        # Roots requests come answered by the activity (from the server's
        # configuration): their answers travel with the round's other answers.
        progress = InputProgress(asked=asked, answers=dict(asked.answered))
        return await self._rounds(plan, toolkit, progress, execute, limit)

    def restore(self, call_id: str, progress: InputProgress) -> None:
        """Take a call's progress carried from the previous run (`continuation.restore_turn`)."""
        self.progress[call_id] = progress

    async def resume(
        self, plan: PlannedCall, toolkit: str, execute: Execute, limit: asyncio.Semaphore
    ) -> Ok | Failure | TaskState | Moved:
        """Go on with a call whose wait moved from the previous run (`restore`), as `follow`."""
        progress = self.progress[plan.call.call_id]
        return await self._rounds(plan, toolkit, progress, execute, limit, restored=True)

    async def _rounds(
        self,
        plan: PlannedCall,
        toolkit: str,
        progress: InputProgress,
        execute: Execute,
        limit: asyncio.Semaphore,
        *,
        restored: bool = False,
    ) -> Ok | Failure | TaskState | Moved:
        call = plan.call
        call_id = call.call_id
        while True:
            asked = progress.asked
            if progress.round > MAX_INPUT_ROUNDS:
                self.progress.pop(call_id, None)
                return failed(
                    call,
                    "input_rounds_exceeded",
                    f"MCP server {asked.server!r} asked for input more than "
                    f"{MAX_INPUT_ROUNDS} times; the call was not completed",
                )
            for index in range(progress.index, len(asked.requests)):
                request = asked.requests[index]
                progress = progress.model_copy(update={"index": index})
                self.progress[call_id] = progress
                question = InputQuestion(
                    server=asked.server,
                    kind=request.kind,
                    message=request.message,
                    url=request.url,
                    host=request.host,
                    key=request.key,
                    round=progress.round,
                    index=index + 1,
                    count=len(asked.requests),
                )
                answered = await self.answer_request(plan, question, request, restored)
                restored = False
                if isinstance(answered, Moved):
                    return answered  # `progress` goes to the next run with the question
                if isinstance(answered, Failure):
                    self.progress.pop(call_id, None)
                    return answered
                answers = {**progress.answers, request.key: answered}
                progress = progress.model_copy(update={"answers": answers})
            # No wait moves while an activity of the call runs: nothing to carry.
            self.progress.pop(call_id, None)
            resume = InputResume(
                responses=progress.answers, request_state=asked.request_state, round=progress.round
            )
            async with limit:
                out = await execute(plan, toolkit, resume)
            restarted, next_round = progress.restarted, progress.round + 1
            if isinstance(out, Failure) and out.kind == STATE_REJECTED and not restarted:
                restarted, next_round = True, 1
                self._event(
                    "tool_attempt_failed",
                    call_id=call_id,
                    tool=call.name,
                    reason=f"{out.reason} (the call is started again, once)",
                )
                async with limit:
                    out = await execute(plan, toolkit, None)
            if not isinstance(out, InputRequired):
                return out
            progress = InputProgress(
                asked=out, round=next_round, restarted=restarted, answers=dict(out.answered)
            )

    async def answer_request(
        self, plan: PlannedCall, question: InputQuestion, request: InputRequest, restored: bool
    ) -> InputAnswer | Failure | Moved:
        """One request's answer: a person's (form, link) or the model's (sampling).

        Args:
            plan: The call's plan.
            question: The question shown (its round, key, position).
            request: The checked request it asks.
            restored: It was asked in the previous run (its pending entry came along).

        Returns:
            The answer, the `Failure` that ends the call (expired,
            superseded, denied, refused), or `MOVED`.
        """
        if request.kind == "form":
            return await self._ask(plan, question, request.answer_schema, restored)
        if request.kind == "url" and not request.approval:
            answer = await self._ask(plan, question, None, restored)
            return (
                answer.model_copy(update={"kind": "url"})
                if isinstance(answer, InputAnswer)
                else answer
            )
        ask = request.sampling
        if request.approval:
            shown = ask.model_dump(mode="json") if ask is not None else None
            approved = await self.approvals.approve(plan, question, shown, restored)
            if not isinstance(approved, Decision):
                return approved
            if request.kind == "url":
                return InputAnswer(kind="url", action="accept")
        if ask is None or self.sampler is None:
            return failed(
                plan.call,
                "unsupported_input_request",
                f"MCP server {question.server!r} asked for {question.kind}, which this "
                "conversation cannot answer; the call was not completed",
            )
        # Counted as running: no wait of the turn moves to a new run meanwhile.
        self._calls.running += 1
        try:
            reply = await self.sampler.sample(plan, question.server, ask)
        finally:
            self._calls.running -= 1
        if isinstance(reply, Failure):
            return reply
        return InputAnswer(kind="sampling", sampled=reply)

    async def _ask(
        self,
        plan: PlannedCall,
        question: InputQuestion,
        schema: dict[str, Any] | None,
        restored: bool,
    ) -> InputAnswer | Failure | Moved:
        """One question: pending until answered, superseded, past its deadline, or moved.

        `restored`: the question was asked in the previous run, which
        published it; its pending entry (and any answer) came with the call.
        """
        call, calls = plan.call, self._calls
        book = calls.book
        call_id = call.call_id
        seconds = book.deadline(plan)
        pending = book.interactions.get(call_id) if restored else None
        if pending is None:
            now = workflow.now()
            pending = PendingInteraction(
                call_id=call_id,
                tool=call.name,
                arguments=call.arguments,
                arguments_hash=question_digest(plan.arguments_hash, question, schema),
                answer_schema=schema,
                requested_at=now,
                deadline=now + timedelta(seconds=seconds),
                input_request=question,
            )
            book.answers.pop(call_id, None)  # an earlier question's answer, already used
            book.interactions[call_id] = pending
            self._event(
                "question_asked",
                call_id=call_id,
                tool=call.name,
                # A link may carry a one-time token: events name its host only.
                text=question.message
                if question.kind == "form"
                else f"{question.message} (a link to {question.host})",
                answer_schema=schema,
            )
            book.notifier.notify(
                plan,
                "question_asked",
                requested_at=pending.requested_at,
                deadline=pending.deadline,
                patch=MCP_QUESTION_WEBHOOKS_PATCH,
            )
        self._set_state("waiting")
        calls.publish()
        timed_out = False
        try:
            await calls.waits.wait(
                lambda: calls.move_now() or call_id in book.answers or calls.superseded,
                pending.deadline,
                f"answer deadline of {plan.summary}",
            )
        except builtins.TimeoutError:
            timed_out = True
        finally:
            if not calls.moving:  # else the question (and any answer) goes to the next run
                book.interactions.pop(call_id, None)
            self._set_state(calls.calls_state())
            calls.publish()
        if timed_out:
            return self._finished(
                plan,
                pending.requested_at,
                expired(
                    call,
                    f"no answer to MCP server {question.server!r}'s question within "
                    f"{seconds_text(seconds)}; the server ran until it asked, and the call "
                    "was not completed",
                ),
            )
        if calls.moving:
            return MOVED
        answer = book.answers.get(call_id)
        if answer is None:
            return self._finished(
                plan,
                pending.requested_at,
                interrupted(
                    call,
                    f"a new user message arrived before MCP server {question.server!r}'s "
                    "question was answered; the server ran until it asked, and the call was "
                    "not completed",
                ),
                calls.superseded_by,
            )
        sent_by = clean_sender(answer.answered_by)
        self._event(
            "question_answered",
            call_id=call_id,
            tool=call.name,
            outcome=answer.action,
            sent_by=sent_by or None,
        )
        book.notifier.notify(
            plan,
            "question_answered",
            requested_at=pending.requested_at,
            outcome=answer.action,
            decided_by=sent_by or None,
            patch=MCP_QUESTION_WEBHOOKS_PATCH,
        )
        if answer.action != "accept":
            return InputAnswer(action=answer.action)
        # SEP-1034: fields the person left out take the requested schema's defaults.
        value: Any = answer.value
        if isinstance(value, dict):
            value = with_defaults(schema, cast(dict[str, Any], value))
        return InputAnswer(action="accept", content=value)

    def _finished(
        self, plan: PlannedCall, requested_at: datetime, result: Failure, sent_by: str = ""
    ) -> Failure:
        """Publish how a question ended without an answer; `result` is the call's output."""
        call = plan.call
        self._event(
            "question_answered",
            call_id=call.call_id,
            tool=call.name,
            outcome=result.kind,
            sent_by=sent_by or None,
        )
        self._calls.book.notifier.notify(
            plan,
            "question_expired" if result.kind == "expired" else "question_answered",
            requested_at=requested_at,
            outcome=result.kind,
            decided_by=sent_by or None,
            patch=MCP_QUESTION_WEBHOOKS_PATCH,
        )
        return result
