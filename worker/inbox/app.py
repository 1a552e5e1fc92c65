"""The inbox web app: HTML pages for people and a JSON API, on one FastAPI app.

Pages (server-rendered Jinja templates, plain JavaScript, no build step):

| path | what |
|---|---|
| `GET /` | every conversation waiting for a person; filters (tool, kind, agent, age) |
| `GET /conversations/{id}` | the transcript and the forms to decide, answer, send, resume, retry |
| `POST /conversations/{id}/decide` ... | the forms' targets (CSRF-checked), then back to the page |

API (`/api/openapi.json` describes it; the same auth; CSRF header unless a bearer token):

| operation | path |
|---|---|
| who am I, a CSRF token | `GET /api/session` |
| list pending | `GET /api/pending` |
| get a conversation | `GET /api/conversations/{id}` |
| its events, live (server-sent events, resumable) | `GET /api/conversations/{id}/events` |
| the list's changes (server-sent events) | `GET /api/pending/events` |
| decide | `POST /api/conversations/{id}/calls/{call_id}/decision` |
| answer | `POST /api/conversations/{id}/calls/{call_id}/answer` |
| send | `POST /api/conversations/{id}/messages` |
| resume | `POST /api/conversations/{id}/resume` |
| retry | `POST /api/conversations/{id}/retry` |
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, Form, Header, Query, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, Field

from durable_tools.client import Conversations
from durable_tools.conversation import DecisionReceipt
from durable_tools.worker.inbox.auth import (
    CSRF_COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    Authenticators,
    Csrf,
    Identity,
    refusal,
)
from durable_tools.worker.inbox.paths import KeepEncodedSlashes, quote_segment
from durable_tools.worker.inbox.render import register_filters
from durable_tools.worker.inbox.service import (
    Conflict,
    ConversationView,
    InboxService,
    WaitingConversation,
)

__all__ = ["MAX_AGE_SECONDS", "create_app", "parse_age", "parse_offset"]

_HERE = Path(__file__).parent
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])

MAX_AGE_SECONDS = 3650 * 86400
"""The longest age a filter takes (ten years)."""

_AGE = re.compile(r"(\d{1,10}(?:\.\d{1,6})?)\s*(s|sec|m|min|h|d|w)?", re.ASCII)
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_KEEPALIVE = 15.0
"""Seconds between comment lines on a quiet event stream (proxies close idle connections)."""
_MAX_OFFSET = 2**53


def parse_age(text: str) -> float | None:
    """An age filter's value in seconds: `90`, `90s`, `15m`, `15min`, `2h`, `7d`, `1w`.

    Args:
        text: The value as given (surrounding blanks ignored; `""`: no filter).

    Returns:
        Seconds (0 to `MAX_AGE_SECONDS`), or `None` for `""`.

    Raises:
        ValueError: Not a number with an optional unit, or beyond ten years.
    """
    text = text.strip().lower()
    if not text:
        return None
    match = _AGE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{text[:40]!r} is not an age: write a number and a unit, e.g. 30m, 2h, 7d"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    if seconds > MAX_AGE_SECONDS:
        raise ValueError(f"{text[:40]!r} is longer than ten years")
    return seconds


def parse_offset(text: str | None) -> int | None:
    """An event offset from `Last-Event-ID` or `?after=`: an integer from -1 to 2**53.

    Returns:
        The offset, or `None` when `text` is `None` or blank.

    Raises:
        ValueError: Anything else.
    """
    if text is None or not text.strip():
        return None
    text = text.strip()
    if not re.fullmatch(r"-?\d{1,16}", text, re.ASCII):
        raise ValueError(f"{text[:40]!r} is not an event offset")
    value = int(text)
    if not -1 <= value <= _MAX_OFFSET:
        raise ValueError(f"{text[:40]!r} is not an event offset")
    return value


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
    """A decision on an approval, for the arguments hash that was shown."""

    approved: bool
    arguments_hash: str = Field(min_length=1)
    reason: str = ""


class AnswerBody(BaseModel):
    """An answer to a question, for the arguments hash that was shown."""

    value: Any = None
    arguments_hash: str = Field(min_length=1)


class MessageBody(BaseModel):
    """A user message."""

    text: str = Field(min_length=1)


class ResumeBody(BaseModel):
    """The message that answers the `pause` call."""

    message: str = "resumed"


class Accepted(BaseModel):
    """An accepted operation."""

    accepted: bool = True
    receipt: DecisionReceipt | None = None


class _Unauthenticated(Exception):
    pass


class _CsrfFailed(Exception):
    pass


class _BadInput(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass
class _State:
    service: InboxService
    auth: Authenticators
    csrf: Csrf
    refresh_seconds: float


def _state(request: Request) -> _State:
    state: _State = request.app.state.inbox
    return state


def _identity(request: Request) -> Identity:
    found = _state(request).auth.authenticate(request)
    if found is None:
        raise _Unauthenticated()
    return found


Who = Annotated[Identity, Depends(_identity)]


def _api_csrf(request: Request, who: Who) -> Identity:
    state = _state(request)
    if who.needs_csrf and not state.csrf.check(
        request.headers.get(CSRF_HEADER, ""), request.cookies, who
    ):
        raise _CsrfFailed()
    return who


Checked = Annotated[Identity, Depends(_api_csrf)]
CsrfToken = Annotated[str, Form(alias=CSRF_FIELD)]


def create_app(
    conversations: Conversations,
    auth: Authenticators,
    *,
    csrf_secret: bytes | None = None,
    refresh_seconds: float = 5.0,
    decision_key: tuple[str, bytes] | None = None,
) -> FastAPI:
    """Build the inbox app.

    Args:
        conversations: The client API on the namespace to serve.
        auth: How requests authenticate.
        csrf_secret: HMAC key of CSRF tokens (default: random per process).
        refresh_seconds: How often, in seconds, the list's event stream
            (`GET /api/pending/events`) asks Temporal visibility for changes:
            one query per interval however many pages are open (default 5).
            `0` turns the pages' live updates off (the API's streams still
            work; the list's then checks every 5 s).
        decision_key: `(key_id, key)`: sign every decision with it
            (HMAC-SHA256; the worker holds the same key in
            `DURABLE_TOOLS_DECISION_KEYS`). `None`: decisions are unsigned,
            and calls that need a signed decision cannot be decided here.

    Returns:
        An ASGI app (serve it with uvicorn).
    """
    state = _State(
        InboxService(conversations, decision_key), auth, Csrf(csrf_secret), refresh_seconds
    )
    app = FastAPI(
        title="durable-tools inbox",
        summary="Approvals, questions, pauses and failed model turns waiting for a person.",
        version="1",
        openapi_url="/api/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.state.inbox = state
    app.add_middleware(KeepEncodedSlashes)  # ids with `/`: see paths.py
    templates = Jinja2Templates(directory=str(_HERE / "templates"))
    register_filters(templates.env)
    app.mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static")

    @app.exception_handler(_Unauthenticated)
    async def _unauthenticated(request: Request, exc: _Unauthenticated) -> Response:  # pyright: ignore[reportUnusedFunction]
        headers = (
            {"WWW-Authenticate": f'Basic realm="{state.auth.basic_realm}"'}
            if state.auth.basic_realm
            else {}
        )
        body = Problem(error="unauthenticated", message="Sign in to use the inbox.")
        if request.url.path.startswith("/api/"):
            return JSONResponse(body.model_dump(), status_code=401, headers=headers)
        return HTMLResponse(
            "<!doctype html><html lang=en><title>Sign in</title>"
            "<p>Sign in to use the durable-tools inbox.</p></html>",
            status_code=401,
            headers=headers,
        )

    @app.exception_handler(_CsrfFailed)
    async def _csrf_failed(request: Request, exc: _CsrfFailed) -> Response:  # pyright: ignore[reportUnusedFunction]
        body = Problem(
            error="csrf",
            message="The form's security token is missing or stale; reload the page and retry.",
        )
        if request.url.path.startswith("/api/"):
            return JSONResponse(body.model_dump(), status_code=403)
        return HTMLResponse(
            f"<!doctype html><html lang=en><title>Reload</title><p role=alert>{body.message}</p>"
            "</html>",
            status_code=403,
        )

    @app.exception_handler(_BadInput)
    async def _bad_input(request: Request, exc: _BadInput) -> Response:  # pyright: ignore[reportUnusedFunction]
        body = Problem(error=exc.kind, message=exc.message)
        return JSONResponse(body.model_dump(), status_code=422)

    @app.exception_handler(Conflict)
    async def _conflict(request: Request, exc: Conflict) -> Response:  # pyright: ignore[reportUnusedFunction]
        body = Problem(error=exc.kind, message=exc.message)
        return JSONResponse(body.model_dump(), status_code=exc.status_code)

    def _nonce(request: Request) -> tuple[str, bool]:
        nonce = request.cookies.get(CSRF_COOKIE, "")
        return (nonce, False) if nonce else (Csrf.new_nonce(), True)

    def _set_nonce(request: Request, response: Response, nonce: str, fresh: bool) -> None:
        if fresh:
            secure = request.url.scheme == "https"
            response.set_cookie(
                CSRF_COOKIE, nonce, httponly=True, samesite="strict", secure=secure, path="/"
            )

    # ------------------------------------------------------------------ API

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
        nonce, fresh = _nonce(request)
        session = Session(
            name=who.name,
            groups=list(who.groups),
            method=who.method,
            csrf_token=state.csrf.token(nonce, who),
        )
        response = JSONResponse(session.model_dump())
        _set_nonce(request, response, nonce, fresh)
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
            str | None, Query(description="Asked at least this long ago: 90s, 15m, 2h, 7d.")
        ] = None,
        newer_than: Annotated[
            str | None, Query(description="Asked at most this long ago: 90s, 15m, 2h, 7d.")
        ] = None,
    ) -> list[WaitingConversation]:
        """Every conversation waiting for a person, with what it waits for.

        Filters: `tool` (a tool name), `kind` (`approval`, `question`, `pause`,
        `model_failed`), `agent` (the agent configuration's name), `older_than`
        and `newer_than` (how long ago the item was asked, or the conversation
        started for a pause: a number and a unit `s`, `m`, `h`, `d`, `w`;
        422 `invalid_filter` otherwise).
        """
        ages = _ages(older_than or "", newer_than or "")
        return _filtered(
            await state.service.waiting(), tool=tool, kind=kind, agent=agent, ages=ages
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
        first = await state.service.listing_version(interval)

        async def stream() -> AsyncIterator[str]:
            yield f"retry: {int(interval * 1000)}\n\n" + _event("changed", {"version": first})
            last = first
            try:
                while True:
                    await asyncio.sleep(interval)
                    if await request.is_disconnected():
                        return
                    version = await state.service.listing_version(interval)
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
        return await state.service.conversation(workflow_id)

    @app.get(
        "/api/conversations/{workflow_id:segment}/version",
        responses=problems,
        tags=["conversations"],
    )
    async def api_version(workflow_id: str, who: Who) -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        """A string that changes whenever the conversation does (pages poll it)."""
        return {"version": await state.service.version(workflow_id)}

    @app.get(
        "/api/conversations/{workflow_id:segment}/events",
        responses={
            **problems,
            200: {"content": {"text/event-stream": {}}, "description": "The event stream."},
            422: {"model": Problem, "description": "Not an event offset."},
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
        """
        try:
            start = parse_offset(last_event_id)
            if start is None:
                start = parse_offset(after)
        except ValueError as exc:
            raise _BadInput("invalid_offset", str(exc)) from exc
        events = await state.service.follow(
            workflow_id, after=-1 if start is None else start, keepalive=_KEEPALIVE
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
        )
        return Accepted(receipt=receipt)

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
            workflow_id, call_id, who, value=body.value, arguments_hash=body.arguments_hash
        )
        return Accepted(receipt=receipt)

    @_action("/api/conversations/{workflow_id:segment}/messages", tag="conversations")
    async def api_send(workflow_id: str, body: MessageBody, who: Checked) -> Accepted:  # pyright: ignore[reportUnusedFunction]
        """Send a user message."""
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

    # ---------------------------------------------------------------- pages

    def _page(
        request: Request,
        who: Identity,
        template: str,
        context: dict[str, Any],
        status_code: int = 200,
    ) -> Response:
        nonce, fresh = _nonce(request)
        response = templates.TemplateResponse(
            request,
            template,
            {
                "who": who,
                "csrf_field": CSRF_FIELD,
                "csrf_token": state.csrf.token(nonce, who),
                "live": state.refresh_seconds > 0,
                **context,
            },
            status_code=status_code,
        )
        _set_nonce(request, response, nonce, fresh)
        return response

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def inbox_page(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        who: Who,
        tool: str = "",
        kind: str = "",
        agent: str = "",
        older_than: str = "",
        newer_than: str = "",
    ) -> Response:
        problem = ""
        try:
            ages = _ages(older_than, newer_than)
        except _BadInput as exc:
            ages, problem = (None, None), exc.message
            older_than = newer_than = ""
        try:
            waiting = await state.service.waiting()
        except Conflict as exc:
            waiting, problem = [], exc.message
        tools = sorted({i.tool for w in waiting for i in w.items if i.tool})
        agents = sorted({w.agent for w in waiting if w.agent})
        shown = _filtered(
            waiting, tool=tool or None, kind=kind or None, agent=agent or None, ages=ages
        )
        return _page(
            request,
            who,
            "inbox.html",
            {
                "waiting": shown,
                "tools": tools,
                "tool": tool,
                "agents": agents,
                "agent": agent,
                "kind": kind,
                "older_than": older_than.strip(),
                "newer_than": newer_than.strip(),
                "ages": AGE_CHOICES,
                "problem": problem,
                "total": sum(len(w.items) for w in shown),
            },
        )

    async def _conversation_page(
        request: Request,
        who: Identity,
        workflow_id: str,
        *,
        notice: str = "",
        conflict: Conflict | None = None,
    ) -> Response:
        try:
            view = await state.service.conversation(workflow_id)
        except Conflict as exc:
            return _page(
                request,
                who,
                "conversation.html",
                {"workflow_id": workflow_id, "view": None, "conflict": conflict or exc},
                status_code=exc.status_code if conflict is None else conflict.status_code,
            )
        refusals = {
            item.call_id: reason
            for item in view.items
            if item.kind == "approval" and (reason := refusal(who, item.approvers)) is not None
        }
        return _page(
            request,
            who,
            "conversation.html",
            {
                "workflow_id": workflow_id,
                "view": view,
                "notice": notice,
                "conflict": conflict,
                "refusals": refusals,
                "signing": state.service.decision_key is not None,
            },
            status_code=conflict.status_code if conflict else 200,
        )

    @app.get(
        "/conversations/{workflow_id:segment}",
        response_class=HTMLResponse,
        include_in_schema=False,
    )
    async def conversation_page(  # pyright: ignore[reportUnusedFunction]
        request: Request, workflow_id: str, who: Who, notice: str = ""
    ) -> Response:
        return await _conversation_page(request, who, workflow_id, notice=notice)

    def _form_checked(request: Request, who: Identity, token: str) -> None:
        if who.needs_csrf and not state.csrf.check(token, request.cookies, who):
            raise _CsrfFailed()

    async def _act(
        request: Request, who: Identity, workflow_id: str, action: Awaitable[Any], notice: str
    ) -> Response:
        """Do a form's action: back to the page with `notice`, or the page with the conflict."""
        try:
            await action
        except Conflict as exc:
            return await _conversation_page(request, who, workflow_id, conflict=exc)
        url = f"/conversations/{quote_segment(workflow_id)}?{urlencode({'notice': notice})}"
        return RedirectResponse(url, status_code=303)

    @app.post("/conversations/{workflow_id:segment}/decide", include_in_schema=False)
    async def decide_form(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        csrf: CsrfToken = "",
        call_id: Annotated[str, Form()] = "",
        arguments_hash: Annotated[str, Form()] = "",
        decision: Annotated[str, Form()] = "",
        reason: Annotated[str, Form()] = "",
    ) -> Response:
        _form_checked(request, who, csrf)
        if decision not in ("approve", "deny"):
            conflict = Conflict("not_waiting", "Choose Approve or Deny.")
            return await _conversation_page(request, who, workflow_id, conflict=conflict)
        decide = state.service.decide(
            workflow_id,
            call_id,
            who,
            approved=decision == "approve",
            arguments_hash=arguments_hash,
            reason=reason.strip(),
        )
        verb = "Approved" if decision == "approve" else "Denied"
        return await _act(request, who, workflow_id, decide, f"{verb} call {call_id}.")

    @app.post("/conversations/{workflow_id:segment}/answer", include_in_schema=False)
    async def answer_form(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        csrf: CsrfToken = "",
        call_id: Annotated[str, Form()] = "",
        arguments_hash: Annotated[str, Form()] = "",
        value_json: Annotated[str, Form()] = "",
    ) -> Response:
        _form_checked(request, who, csrf)
        try:
            value = json.loads(value_json)
        except ValueError:
            conflict = Conflict("invalid_answer", "The answer is not valid JSON.")
            return await _conversation_page(request, who, workflow_id, conflict=conflict)
        answer = state.service.answer(
            workflow_id, call_id, who, value=value, arguments_hash=arguments_hash
        )
        return await _act(request, who, workflow_id, answer, f"Answered call {call_id}.")

    @app.post("/conversations/{workflow_id:segment}/send", include_in_schema=False)
    async def send_form(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        csrf: CsrfToken = "",
        text: Annotated[str, Form()] = "",
    ) -> Response:
        _form_checked(request, who, csrf)
        if not text.strip():
            conflict = Conflict("not_waiting", "Write a message first.")
            return await _conversation_page(request, who, workflow_id, conflict=conflict)
        send = state.service.send(workflow_id, who, text)
        return await _act(request, who, workflow_id, send, "Message sent.")

    @app.post("/conversations/{workflow_id:segment}/resume", include_in_schema=False)
    async def resume_form(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        csrf: CsrfToken = "",
        message: Annotated[str, Form()] = "",
    ) -> Response:
        _form_checked(request, who, csrf)
        resume = state.service.resume(workflow_id, who, message.strip())
        return await _act(request, who, workflow_id, resume, "Resumed.")

    @app.post("/conversations/{workflow_id:segment}/retry", include_in_schema=False)
    async def retry_form(  # pyright: ignore[reportUnusedFunction]
        request: Request, workflow_id: str, who: Who, csrf: CsrfToken = ""
    ) -> Response:
        _form_checked(request, who, csrf)
        retry = state.service.retry(workflow_id, who)
        return await _act(request, who, workflow_id, retry, "Retrying the model turn.")

    return app


AGE_CHOICES = [("5m", "5 min"), ("1h", "1 hour"), ("1d", "1 day"), ("7d", "7 days")]
"""The ages the list page offers (the API takes any)."""


def _event(name: str, data: dict[str, str]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _sse(stream: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _ages(older_than: str, newer_than: str) -> tuple[float | None, float | None]:
    try:
        return parse_age(older_than), parse_age(newer_than)
    except ValueError as exc:
        raise _BadInput("invalid_filter", f"Age filter: {exc}.") from exc


def _filtered(
    waiting: list[WaitingConversation],
    *,
    tool: str | None,
    kind: str | None,
    agent: str | None = None,
    ages: tuple[float | None, float | None] = (None, None),
) -> list[WaitingConversation]:
    """The conversations and items that pass the filters.

    `ages` is `(older_than, newer_than)` in seconds: an item passes when it
    was asked (`requested_at`, else the conversation's start) at least
    `older_than` and at most `newer_than` ago; an item with neither time
    fails an age filter.
    """
    older_than, newer_than = ages
    if not tool and not kind and not agent and older_than is None and newer_than is None:
        return waiting
    now = datetime.now(UTC)
    shown: list[WaitingConversation] = []
    for conversation in waiting:
        if agent and conversation.agent != agent:
            continue
        items = [
            i
            for i in conversation.items
            if (not tool or i.tool == tool)
            and (not kind or i.kind == kind)
            and _age_passes(i.requested_at or conversation.started, now, older_than, newer_than)
        ]
        if items:
            shown.append(conversation.model_copy(update={"items": items}))
    return shown


def _age_passes(
    asked: datetime | None, now: datetime, older_than: float | None, newer_than: float | None
) -> bool:
    if older_than is None and newer_than is None:
        return True
    if asked is None:
        return False
    if asked.tzinfo is None:
        asked = asked.replace(tzinfo=UTC)
    age = now - asked
    if older_than is not None and age < timedelta(seconds=older_than):
        return False
    return newer_than is None or age <= timedelta(seconds=newer_than)
