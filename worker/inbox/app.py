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

This module wires the app; the routes live in `api.py` (the API) and
`pages.py` (the pages), what they share in `web.py`, the filters in `params.py`.
"""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from durable_tools.client import Conversations
from durable_tools.decision_keys import SigningKey
from durable_tools.worker.inbox.api import Problem, add_api_routes
from durable_tools.worker.inbox.auth import Authenticators, Csrf, DevAuth
from durable_tools.worker.inbox.authz import Authorizer, TeamAuthorizer
from durable_tools.worker.inbox.conflicts import Conflict
from durable_tools.worker.inbox.feeds import STREAMS_PER_IDENTITY
from durable_tools.worker.inbox.headers import SecurityHeaders
from durable_tools.worker.inbox.pages import add_page_routes
from durable_tools.worker.inbox.paths import KeepEncodedSlashes
from durable_tools.worker.inbox.render import register_filters
from durable_tools.worker.inbox.service import InboxService
from durable_tools.worker.inbox.web import BadInput, CsrfFailed, State, Unauthenticated
from durable_tools.worker.loopback import LoopbackHostOnly

__all__ = ["create_app"]

_HERE = Path(__file__).parent


def create_app(
    conversations: Conversations,
    auth: Authenticators,
    *,
    csrf_secret: bytes | None = None,
    refresh_seconds: float = 5.0,
    decision_key: tuple[str, SigningKey] | None = None,
    authorizer: Authorizer | None = None,
    streams_per_identity: int = STREAMS_PER_IDENTITY,
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
        authorizer: What each identity may see and do (`authz.py`). `None`
            (default): `TeamAuthorizer()`, teams from groups.
        streams_per_identity: Conversation event streams one identity name
            may hold open at once (default 16); one more is answered 429
            `too_many_streams`. Every open stream of a conversation shares one
            reader of it (`feeds.py`).

    Returns:
        An ASGI app (serve it with uvicorn). In dev mode (`DevAuth` among the
        authenticators) it answers only loopback `Host` names (400 otherwise:
        `durable_tools.worker.loopback`), so a DNS-rebinding page cannot
        act as the dev user.
    """
    service = InboxService(
        conversations,
        decision_key,
        authorizer or TeamAuthorizer(),
        streams_per_identity=streams_per_identity,
    )
    state = State(service, auth, Csrf(csrf_secret), refresh_seconds)
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
    app.add_middleware(SecurityHeaders)  # CSP, no framing, nosniff: headers.py
    if any(isinstance(a, DevAuth) for a in auth.chain):
        app.add_middleware(LoopbackHostOnly)  # added last: runs first
    templates = Jinja2Templates(directory=str(_HERE / "templates"))
    register_filters(templates.env)
    app.mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static")

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(request: Request, exc: Unauthenticated) -> Response:  # pyright: ignore[reportUnusedFunction]
        headers = (
            {"WWW-Authenticate": f'Basic realm="{state.auth.basic_realm}"'}
            if state.auth.basic_realm
            else {}
        )
        message = f"Not signed in: {exc.reason}." if exc.reason else "Sign in to use the inbox."
        body = Problem(error="unauthenticated", message=message)
        if request.url.path.startswith("/api/"):
            return JSONResponse(body.model_dump(), status_code=401, headers=headers)
        shown = (
            html.escape(exc.reason) + "."
            if exc.reason
            else "Sign in to use the durable-tools inbox."
        )
        return HTMLResponse(
            f"<!doctype html><html lang=en><title>Sign in</title><p>{shown}</p></html>",
            status_code=401,
            headers=headers,
        )

    @app.exception_handler(CsrfFailed)
    async def _csrf_failed(request: Request, exc: CsrfFailed) -> Response:  # pyright: ignore[reportUnusedFunction]
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

    @app.exception_handler(BadInput)
    async def _bad_input(request: Request, exc: BadInput) -> Response:  # pyright: ignore[reportUnusedFunction]
        body = Problem(error=exc.kind, message=exc.message)
        return JSONResponse(body.model_dump(), status_code=422)

    @app.exception_handler(Conflict)
    async def _conflict(request: Request, exc: Conflict) -> Response:  # pyright: ignore[reportUnusedFunction]
        body = Problem(error=exc.kind, message=exc.message)
        return JSONResponse(body.model_dump(), status_code=exc.status_code)

    add_api_routes(app, state)
    add_page_routes(app, state, templates)
    return app
