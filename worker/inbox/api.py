"""The inbox's JSON API: its models and its routes under `/api/`.

`/api/openapi.json` describes it; the same auth as the pages; a CSRF header
unless a bearer token (see the table in `durable_tools.worker.inbox.app`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from durable_tools.conversation import DecisionReceipt
from durable_tools.grants import GrantScope
from durable_tools.worker.inbox.conflicts import Conflict
from durable_tools.worker.inbox.params import AGE_PATTERN, filter_waiting, parse_ages, parse_offset
from durable_tools.worker.inbox.views import ConversationView, WaitingConversation
from durable_tools.worker.inbox.web import (
    SIGNALLED,
    BadInput,
    Checked,
    State,
    Who,
    read_nonce,
    set_nonce,
)

__all__ = [
    "Accepted",
    "AnswerBody",
    "DecisionBody",
    "MessageBody",
    "Problem",
    "ResumeBody",
    "Session",
    "add_api_routes",
]

_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])

_KEEPALIVE = 15.0
"""Seconds between comment lines on a quiet event stream (proxies close idle connections)."""


class Problem(BaseModel):
    """An API error: what kind, and a sentence for a person."""

    error: str
    message: str


class Session(BaseModel):
    """Who the request authenticated as, and the CSRF token for state-changing calls."""

    name: str
    groups: list[str]
    method: str
    csrf_token: str


class DecisionBody(BaseModel):
    """A decision on an approval, for the arguments hash that was shown.

    `grant` (with an approval): also approve later calls of the tool in this
    conversation whose arguments match (`{"tool": "refund", "arguments":
    {"/order": "A-1"}}`; docs/policies.md, "Grants").
    """

    approved: bool
    arguments_hash: str = Field(min_length=1)
    reason: str = ""
    grant: GrantScope | None = None


class AnswerBody(BaseModel):
    """An answer to a question, for the arguments hash that was shown."""

    value: Any = None
    arguments_hash: str = Field(min_length=1)
    action: Literal["accept", "decline", "cancel"] = Field(
        default="accept",
        description="`decline` or `cancel` (with no value) a question an MCP server asked; "
        "the server is told which.",
    )


class MessageBody(BaseModel):
    """A user message."""

    text: str = Field(min_length=1)


class ResumeBody(BaseModel):
    """The message that answers the `pause` call."""

    message: str = "resumed"


class BudgetBody(BaseModel):
    """New limits for a conversation's budget (`None`: unchanged; at least one)."""

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    scope: Literal["conversation", "agent"] = "conversation"


class RevokeBody(BaseModel):
    """Why a grant is revoked (recorded with it)."""

    reason: str = Field(default="", max_length=500)


class PolicyBody(BaseModel):
    """A policy version to install in the conversation (`set_policy`).

    Attributes:
        policy: The policy as YAML or JSON text (`name`, `rules`, `default`).
        reason: Why (recorded with the change).
    """

    policy: str = Field(max_length=256 * 1024)
    reason: str = Field(default="", max_length=500)


class Accepted(BaseModel):
    """An accepted operation.

    A decision or an answer is `delivery: "confirmed"` with the workflow's
    `receipt` (the validated update), or `delivery: "signal"` with no
    receipt: Temporal refused the update (the conversation's 10 in-flight
    updates were taken), so it was sent as the durable signal, accepted for
    delivery but not confirmed; `note` says so. Other operations leave both unset.
    """

    accepted: bool = True
    receipt: DecisionReceipt | None = None
    delivery: Literal["confirmed", "signal"] | None = None
    note: str = ""

    @classmethod
    def decided(cls, receipt: DecisionReceipt | None, what: str) -> Accepted:
        """A decision or answer (`what`) accepted: confirmed by `receipt`, else signalled."""
        if receipt is not None:
            return cls(receipt=receipt, delivery="confirmed")
        return cls(delivery="signal", note=SIGNALLED.format(what=what))


def add_api_routes(app: FastAPI, state: State) -> None:
    """Register the JSON API's routes on `app`.

    Args:
        app: The inbox app.
        state: What its routes use (the service, auth, CSRF, refresh interval).
    """
    problems: dict[int | str, dict[str, Any]] = {
        401: {"model": Problem, "description": "Not authenticated."},
        403: {"model": Problem, "description": "CSRF token missing, or not allowed."},
        404: {"model": Problem, "description": "No such conversation."},
        409: {"model": Problem, "description": "Conflict: decided, changed, expired, ended."},
        503: {"model": Problem, "description": "No worker answered."},
    }

    def _action(path: str, *, tag: str) -> Callable[[_Endpoint], _Endpoint]:
        """Register an API action: a POST answered `Accepted`, or a `Problem`."""
        return app.post(path, response_model=Accepted, responses=problems, tags=[tag])

    @app.get("/api/session", response_model=Session, responses=problems, tags=["session"])
    async def api_session(request: Request, who: Who) -> Response:  # pyright: ignore[reportUnusedFunction]
        """Who you are, and the CSRF token to send as `X-CSRF-Token` (sets its cookie)."""
        nonce, fresh = read_nonce(request)
        session = Session(
            name=who.name,
            groups=list(who.groups),
            method=who.method,
            csrf_token=state.csrf.token(nonce, who),
        )
        response = JSONResponse(session.model_dump())
        set_nonce(request, response, nonce, fresh)
        return response

    @app.get(
        "/api/pending",
        response_model=list[WaitingConversation],
        responses=problems,
        tags=["conversations"],
    )
    async def api_pending(  # pyright: ignore[reportUnusedFunction]
        who: Who,
        tool: str | None = None,
        kind: str | None = None,
        agent: str | None = None,
        older_than: Annotated[
            str | None,
            Query(
                description="Asked at least this long ago: 90s, 15m, 2h, 7d.",
                # Documented, not enforced here: a bad age is a Problem (`invalid_filter`).
                json_schema_extra={"pattern": AGE_PATTERN},
            ),
        ] = None,
        newer_than: Annotated[
            str | None,
            Query(
                description="Asked at most this long ago: 90s, 15m, 2h, 7d.",
                # Documented, not enforced here: a bad age is a Problem (`invalid_filter`).
                json_schema_extra={"pattern": AGE_PATTERN},
            ),
        ] = None,
    ) -> list[WaitingConversation]:
        """Every conversation waiting for a person, with what it waits for.

        Filters: `tool` (a tool name), `kind` (`approval`, `question`, `pause`,
        `model_failed`), `agent` (the agent configuration's name), `older_than`
        and `newer_than` (how long ago the item was asked, or the conversation
        started for a pause: a number and a unit `s`, `m`, `h`, `d`, `w`;
        422 `invalid_filter` otherwise).
        """
        ages = parse_ages(older_than or "", newer_than or "")
        return filter_waiting(
            await state.service.waiting(who), tool=tool, kind=kind, agent=agent, ages=ages
        )

    @app.get(
        "/api/pending/events",
        responses={
            **problems,
            200: {"content": {"text/event-stream": {}}, "description": "The event stream."},
        },
        response_class=StreamingResponse,
        tags=["conversations"],
    )
    async def api_pending_events(request: Request, who: Who) -> Response:  # pyright: ignore[reportUnusedFunction]
        """Server-sent events of the list's changes.

        `event: changed` with `{"version": ...}` now and whenever the set of
        waiting conversations (ids, runs, pending counts and kinds, from
        Temporal visibility) changes; checked every `refresh_seconds` (one
        visibility query per interval, shared by every open stream).
        `event: conflict` (`{"error", "message"}`) and the end when
        visibility cannot be read.
        """
        interval = state.refresh_seconds or 5.0
        first = await state.service.listing_version(interval, who)

        async def stream() -> AsyncIterator[str]:
            yield f"retry: {int(interval * 1000)}\n\n" + _event("changed", {"version": first})
            last = first
            try:
                while True:
                    await asyncio.sleep(interval)
                    if await request.is_disconnected():
                        return
                    version = await state.service.listing_version(interval, who)
                    if version != last:
                        last = version
                        yield _event("changed", {"version": version})
            except Conflict as exc:
                yield _event("conflict", {"error": exc.kind, "message": exc.message})

        return _sse(stream())

    @app.get(
        "/api/conversations/{workflow_id:segment}",
        response_model=ConversationView,
        responses=problems,
        tags=["conversations"],
    )
    async def api_conversation(workflow_id: str, who: Who) -> ConversationView:  # pyright: ignore[reportUnusedFunction]
        """A conversation's status, what it waits for and its transcript."""
        return await state.service.conversation(workflow_id, who)

    @app.get(
        "/api/conversations/{workflow_id:segment}/version",
        responses=problems,
        tags=["conversations"],
    )
    async def api_version(workflow_id: str, who: Who) -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        """A string that changes whenever the conversation does (pages poll it)."""
        return {"version": await state.service.version(workflow_id, who)}

    @app.get(
        "/api/conversations/{workflow_id:segment}/events",
        responses={
            **problems,
            200: {"content": {"text/event-stream": {}}, "description": "The event stream."},
            422: {"model": Problem, "description": "Not an event offset."},
            429: {
                "model": Problem,
                "description": "`too_many_streams`: this identity holds its streams already.",
            },
        },
        response_class=StreamingResponse,
        tags=["conversations"],
    )
    async def api_events(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        after: Annotated[
            str | None, Query(description="Offset of the last event already seen (-1: all).")
        ] = None,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> Response:
        """Server-sent events of the conversation's event stream, live and resumable.

        Each event is a message whose `id` is its offset and whose `data` is
        the `ConversationEvent` as JSON (`kind`, `at`, `offset`, `call_id`,
        `tool`, ...; kinds in docs/observability.md; new kinds may appear:
        ignore those you do not know). Starts after `Last-Event-ID` (a
        browser's `EventSource` sends it when it reconnects), else after
        `?after=`, else from the first retained event. `event: end` once the
        conversation ended and its last event was sent; `event: conflict`
        (`{"error", "message"}`) and the end when the stream fails; a comment
        line every 15 s while quiet.

        Every stream of a conversation in this inbox process shares one reader
        of it (one long-poll update in flight, nothing per stream in the
        conversation's history). An identity holds at most its
        `streams_per_identity` streams at once: one more is 429
        `too_many_streams`.
        """
        try:
            start = parse_offset(last_event_id)
            if start is None:
                start = parse_offset(after)
        except ValueError as exc:
            raise BadInput("invalid_offset", str(exc)) from exc
        events = await state.service.follow(
            workflow_id, who, after=-1 if start is None else start, keepalive=_KEEPALIVE
        )

        async def stream() -> AsyncIterator[str]:
            yield "retry: 2000\n\n"
            try:
                async for event in events:
                    if await request.is_disconnected():
                        return
                    if event is None:
                        yield ": keepalive\n\n"
                        continue
                    yield f"id: {event.offset}\ndata: {event.model_dump_json()}\n\n"
                yield _event("end", {})
            except Conflict as exc:
                yield _event("conflict", {"error": exc.kind, "message": exc.message})
            finally:
                await events.aclose()

        return _sse(stream())

    @_action(
        "/api/conversations/{workflow_id:segment}/calls/{call_id:segment}/decision", tag="decisions"
    )
    async def api_decide(  # pyright: ignore[reportUnusedFunction]
        workflow_id: str, call_id: str, body: DecisionBody, who: Checked
    ) -> Accepted:
        """Approve or deny a call; `arguments_hash` is the one you showed."""
        receipt = await state.service.decide(
            workflow_id,
            call_id,
            who,
            approved=body.approved,
            arguments_hash=body.arguments_hash,
            reason=body.reason,
            grant=body.grant,
        )
        return Accepted.decided(receipt, "decision")

    @app.post(
        "/api/conversations/{workflow_id:segment}/calls/{call_id:segment}/answer",
        response_model=Accepted,
        responses={**problems, 422: {"model": Problem, "description": "Invalid answer."}},
        tags=["decisions"],
    )
    async def api_answer(  # pyright: ignore[reportUnusedFunction]
        workflow_id: str, call_id: str, body: AnswerBody, who: Checked
    ) -> Accepted:
        """Answer a question; the value must satisfy its answer schema."""
        receipt = await state.service.answer(
            workflow_id,
            call_id,
            who,
            value=body.value,
            arguments_hash=body.arguments_hash,
            action=body.action,
        )
        return Accepted.decided(receipt, "answer")

    @_action("/api/conversations/{workflow_id:segment}/messages", tag="conversations")
    async def api_send(workflow_id: str, body: MessageBody, who: Checked) -> Accepted:  # pyright: ignore[reportUnusedFunction]
        """Send a message as an operator's note, in the authenticated person's name.

        Refused (403 `not_allowed`) while an approval waits that this person
        may not decide: a message would cancel it (unless the conversation's
        `messages_supersede` is `anyone`).
        """
        await state.service.send(workflow_id, who, body.text)
        return Accepted()

    @_action("/api/conversations/{workflow_id:segment}/resume", tag="conversations")
    async def api_resume(workflow_id: str, body: ResumeBody, who: Checked) -> Accepted:  # pyright: ignore[reportUnusedFunction]
        """Resume a paused conversation."""
        await state.service.resume(workflow_id, who, body.message)
        return Accepted()

    @_action("/api/conversations/{workflow_id:segment}/retry", tag="conversations")
    async def api_retry(workflow_id: str, who: Checked) -> Accepted:  # pyright: ignore[reportUnusedFunction]
        """Run a failed model turn again."""
        await state.service.retry(workflow_id, who)
        return Accepted()

    @_action("/api/conversations/{workflow_id:segment}/budget", tag="conversations")
    async def api_budget(workflow_id: str, body: BudgetBody, who: Checked) -> Accepted:  # pyright: ignore[reportUnusedFunction]
        """Raise (or set) the conversation's budget; one in `budget_exceeded` goes on.

        Refused (422 `invalid_budget`) without a limit, or with a negative or
        non-finite one.
        """
        await state.service.raise_budget(
            workflow_id,
            who,
            max_tokens=body.max_tokens,
            max_cost_usd=body.max_cost_usd,
            scope=body.scope,
        )
        return Accepted()

    @_action(
        "/api/conversations/{workflow_id:segment}/grants/{grant_id:segment}/revoke",
        tag="conversations",
    )
    async def api_revoke(  # pyright: ignore[reportUnusedFunction]
        workflow_id: str, grant_id: str, body: RevokeBody, who: Checked
    ) -> Accepted:
        """Revoke a grant: later calls it would have run wait for approval again.

        For who may decide the conversation's calls. The conversation
        refuses an id it does not hold, a grant revoked already or expired
        (`pending().rejected`); 422 `invalid_grant` for an empty or too
        long id.
        """
        await state.service.revoke_grant(workflow_id, who, grant_id, reason=body.reason)
        return Accepted()

    @_action("/api/conversations/{workflow_id:segment}/policy", tag="conversations")
    async def api_policy(workflow_id: str, body: PolicyBody, who: Checked) -> Accepted:  # pyright: ignore[reportUnusedFunction]
        """Install a policy version in the conversation, in the authenticated person's name.

        Calls waiting for approval are decided again under it; later calls
        are planned with it (docs/policies.md, "Live change"). `note` holds
        the version. Refused (422 `invalid_policy`) for text that is not a
        policy.
        """
        version = await state.service.set_policy(workflow_id, who, body.policy, reason=body.reason)
        return Accepted(note=version)


def _event(name: str, data: dict[str, str]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _sse(stream: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
