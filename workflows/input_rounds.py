"""A call that asked for input: questions for a person, then its retry (MCP MRTR).

When a tool activity returns `InputRequired` (an MCP server's input-required
result), `InputRounds.follow` asks a person each input request in turn, as a
question of the call (a `PendingInteraction` with `input_request` set, in
`pending`, the inbox and a `question_asked` event carrying the message and
the requested schema), checks each answer strictly against that schema (as
interaction tools' answers are, by `DecisionBook.answer_problem`), then
retries the call in a new activity with the answers and the server's exact
`requestState`. No activity runs while a person decides, so no worker slot
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
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol

from temporalio import workflow

from durable_tools.workflows.waits import Waits, seconds_text

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import PlannedCall
    from durable_tools.conversation import PendingInteraction
    from durable_tools.handler_input import clean_sender
    from durable_tools.input_requests import (
        MAX_INPUT_ROUNDS,
        STATE_REJECTED,
        InputAnswer,
        InputQuestion,
        InputRequired,
        InputResume,
        question_digest,
    )
    from durable_tools.results import Failure, Ok, expired, failed, interrupted
    from durable_tools.workflows.decision_book import DecisionBook

__all__ = ["InputRounds"]

Execute = Callable[[PlannedCall, str, InputResume | None], Awaitable[Ok | Failure | InputRequired]]
"""Runs one activity of a call (`TurnCalls.execute`)."""


class _Calls(Protocol):
    """What `InputRounds` needs of the turn's calls (`TurnCalls`)."""

    book: DecisionBook
    waits: Waits
    superseded: bool
    superseded_by: str

    def publish(self) -> None: ...

    def calls_state(self) -> str: ...


class InputRounds:
    """Questions and retries of the turn's calls that asked for input.

    Args:
        calls: The turn's calls (their book, waits and supersession).
        event: Publishes a `ConversationEvent` (`kind`, then its fields).
        set_state: Sets the loop's visible state (`"waiting"` while a person decides).
    """

    def __init__(
        self, calls: _Calls, event: Callable[..., None], set_state: Callable[[str], None]
    ) -> None:
        self._calls = calls
        self._event = event
        self._set_state = set_state

    async def follow(
        self,
        plan: PlannedCall,
        toolkit: str,
        asked: InputRequired,
        execute: Execute,
        limit: asyncio.Semaphore,
    ) -> Ok | Failure:
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
            `requestState`, or of too many rounds.
        """
        call = plan.call
        restarted = False
        round_ = 0
        while True:
            round_ += 1
            if round_ > MAX_INPUT_ROUNDS:
                return failed(
                    call,
                    "input_rounds_exceeded",
                    f"MCP server {asked.server!r} asked for input more than "
                    f"{MAX_INPUT_ROUNDS} times; the call was not completed",
                )
            answers: dict[str, InputAnswer] = {}
            for index, request in enumerate(asked.requests, start=1):
                question = InputQuestion(
                    server=asked.server,
                    message=request.message,
                    key=request.key,
                    round=round_,
                    index=index,
                    count=len(asked.requests),
                )
                answered = await self._ask(plan, question, request.answer_schema)
                if isinstance(answered, Failure):
                    return answered
                answers[request.key] = answered
            resume = InputResume(responses=answers, request_state=asked.request_state, round=round_)
            async with limit:
                out = await execute(plan, toolkit, resume)
            if isinstance(out, Failure) and out.kind == STATE_REJECTED and not restarted:
                restarted, round_ = True, 0
                self._event(
                    "tool_attempt_failed",
                    call_id=call.call_id,
                    tool=call.name,
                    reason=f"{out.reason} (the call is started again, once)",
                )
                async with limit:
                    out = await execute(plan, toolkit, None)
            if not isinstance(out, InputRequired):
                return out
            asked = out

    async def _ask(
        self, plan: PlannedCall, question: InputQuestion, schema: dict[str, Any]
    ) -> InputAnswer | Failure:
        """One question: pending until answered, superseded or past its deadline."""
        call, calls = plan.call, self._calls
        book = calls.book
        call_id = call.call_id
        now = workflow.now()
        seconds = book.deadline(plan)
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
            text=question.message,
            answer_schema=schema,
        )
        self._set_state("waiting")
        calls.publish()
        try:
            await calls.waits.wait(
                lambda: call_id in book.answers or calls.superseded,
                pending.deadline,
                f"answer deadline of {plan.summary}",
            )
        except builtins.TimeoutError:
            return self._finished(
                plan,
                expired(
                    call,
                    f"no answer to MCP server {question.server!r}'s question within "
                    f"{seconds_text(seconds)}; the server ran until it asked, and the call "
                    "was not completed",
                ),
            )
        finally:
            book.interactions.pop(call_id, None)
            self._set_state(calls.calls_state())
            calls.publish()
        answer = book.answers.get(call_id)
        if answer is None:
            return self._finished(
                plan,
                interrupted(
                    call,
                    f"a new user message arrived before MCP server {question.server!r}'s "
                    "question was answered; the server ran until it asked, and the call was "
                    "not completed",
                ),
                calls.superseded_by,
            )
        self._event(
            "question_answered",
            call_id=call_id,
            tool=call.name,
            outcome=answer.action,
            sent_by=clean_sender(answer.answered_by) or None,
        )
        if answer.action != "accept":
            return InputAnswer(action=answer.action)
        return InputAnswer(action="accept", content=answer.value)

    def _finished(self, plan: PlannedCall, result: Failure, sent_by: str = "") -> Failure:
        """Publish how a question ended without an answer; `result` is the call's output."""
        call = plan.call
        self._event(
            "question_answered",
            call_id=call.call_id,
            tool=call.name,
            outcome=result.kind,
            sent_by=sent_by or None,
        )
        return result
