"""The inbox's HTML pages: the list, a conversation, and the forms' targets.

Server-rendered Jinja templates, plain JavaScript, no build step; every form
is CSRF-checked and answers with a redirect back to its page (see the table
in `durable_tools.worker.inbox.app`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from durable_tools.input_requests import ElicitAction
from durable_tools.worker.inbox.auth import CSRF_FIELD, Identity, already_approved, refusal
from durable_tools.worker.inbox.conflicts import Conflict
from durable_tools.worker.inbox.params import filter_waiting, parse_ages
from durable_tools.worker.inbox.paths import quote_segment
from durable_tools.worker.inbox.views import failure_mark, retry_outcome
from durable_tools.worker.inbox.web import (
    SIGNALLED,
    BadInput,
    CsrfFailed,
    CsrfToken,
    State,
    Who,
    read_nonce,
    set_nonce,
)

__all__ = ["AGE_CHOICES", "add_page_routes"]

AGE_CHOICES = [("5m", "5 min"), ("1h", "1 hour"), ("1d", "1 day"), ("7d", "7 days")]
"""The ages the list page offers (the API takes any)."""

ANSWERED: dict[str, tuple[ElicitAction, str]] = {
    "accept": ("accept", "Answered"),
    "decline": ("decline", "Declined"),
    "cancel": ("cancel", "Cancelled"),
}
"""An answer form's `action` button: what is sent, and the notice's verb."""


def add_page_routes(app: FastAPI, state: State, templates: Jinja2Templates) -> None:
    """Register the HTML pages and the forms' targets on `app`.

    Args:
        app: The inbox app.
        state: What its routes use (the service, auth, CSRF, refresh interval).
        templates: The pages' templates.
    """

    def _page(
        request: Request,
        who: Identity,
        template: str,
        context: dict[str, Any],
        status_code: int = 200,
    ) -> Response:
        nonce, fresh = read_nonce(request)
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
        set_nonce(request, response, nonce, fresh)
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
            ages = parse_ages(older_than, newer_than)
        except BadInput as exc:
            ages, problem = (None, None), exc.message
            older_than = newer_than = ""
        try:
            waiting = await state.service.waiting(who)
        except Conflict as exc:
            waiting, problem = [], exc.message
        tools = sorted({i.tool for w in waiting for i in w.items if i.tool})
        agents = sorted({w.agent for w in waiting if w.agent})
        shown = filter_waiting(
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
        retried: str | None = None,
        conflict: Conflict | None = None,
    ) -> Response:
        """The conversation's page; after a retry (`retried`), the notice tells its outcome."""
        try:
            view = await state.service.conversation(workflow_id, who)
        except Conflict as exc:
            return _page(
                request,
                who,
                "conversation.html",
                {"workflow_id": workflow_id, "view": None, "conflict": conflict or exc},
                status_code=exc.status_code if conflict is None else conflict.status_code,
            )
        notice_failed = False
        if retried is not None:
            outcome = retry_outcome(view, retried)
            notice, notice_failed = outcome.message, outcome.failed
        refusals = {
            item.call_id: reason
            for item in view.items
            if item.kind == "approval" and (reason := refusal(who, item.approvers)) is not None
        }
        # Someone already counted toward a quorum may deny, not approve again.
        counted = {
            item.call_id: note
            for item in view.items
            if item.kind == "approval"
            and (note := already_approved(who, item.approved_by, item.quorum)) is not None
        }
        return _page(
            request,
            who,
            "conversation.html",
            {
                "workflow_id": workflow_id,
                "view": view,
                "counted": counted,
                "notice": notice,
                "notice_failed": notice_failed,
                "retried": retried,
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
        request: Request, workflow_id: str, who: Who, notice: str = "", retried: str | None = None
    ) -> Response:
        return await _conversation_page(request, who, workflow_id, notice=notice, retried=retried)

    def _form_checked(request: Request, who: Identity, token: str) -> None:
        if who.needs_csrf and not state.csrf.check(token, request.cookies, who):
            raise CsrfFailed()

    async def _act(
        request: Request,
        who: Identity,
        workflow_id: str,
        action: Awaitable[Any],
        notice: str | Callable[[Any], str],
        *,
        signalled: str = "",
    ) -> Response:
        """Do a form's action: back to the page with `notice`, or the page with the conflict.

        `notice` may be made from the action's outcome. A decision or an
        answer that returns no receipt went as the durable signal: the
        notice is then `signalled` (accepted, not confirmed).
        """
        try:
            outcome = await action
        except Conflict as exc:
            return await _conversation_page(request, who, workflow_id, conflict=exc)
        if callable(notice):
            notice = notice(outcome)
        if signalled and outcome is None:
            notice = signalled
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
        grant: Annotated[str, Form()] = "",
        grant_fields: Annotated[str, Form()] = "",
        grant_for: Annotated[str, Form()] = "",
    ) -> Response:
        _form_checked(request, who, csrf)
        if decision not in ("approve", "deny"):
            conflict = Conflict("not_waiting", "Choose Approve or Deny.")
            return await _conversation_page(request, who, workflow_id, conflict=conflict)
        try:  # seconds; the scope's own bounds are checked with the rest of it
            expires_after = float(grant_for) if grant_for.strip() else None
        except ValueError:
            conflict = Conflict("invalid_grant", "Choose how long the grant lasts.")
            return await _conversation_page(request, who, workflow_id, conflict=conflict)
        decide = state.service.decide(
            workflow_id,
            call_id,
            who,
            approved=decision == "approve",
            arguments_hash=arguments_hash,
            reason=reason.strip(),
            # "for the rest of this conversation": the named fields' values must match
            grant=grant_fields.split(",") if grant and decision == "approve" else None,
            grant_for=expires_after,
        )
        verb = "Approved" if decision == "approve" else "Denied"
        return await _act(
            request,
            who,
            workflow_id,
            decide,
            f"{verb} call {call_id}.",
            signalled=f"{verb} call {call_id}. " + SIGNALLED.format(what="decision"),
        )

    @app.post("/conversations/{workflow_id:segment}/answer", include_in_schema=False)
    async def answer_form(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        csrf: CsrfToken = "",
        call_id: Annotated[str, Form()] = "",
        arguments_hash: Annotated[str, Form()] = "",
        value_json: Annotated[str, Form()] = "",
        action: Annotated[str, Form()] = "accept",
    ) -> Response:
        _form_checked(request, who, csrf)
        if action not in ANSWERED:
            conflict = Conflict("invalid_answer", "Choose Send answer, Decline or Cancel.")
            return await _conversation_page(request, who, workflow_id, conflict=conflict)
        try:
            # Decline and Cancel (an MCP server's question) carry no value.
            value = json.loads(value_json) if action == "accept" else None
        except ValueError:
            conflict = Conflict("invalid_answer", "The answer is not valid JSON.")
            return await _conversation_page(request, who, workflow_id, conflict=conflict)
        answer = state.service.answer(
            workflow_id,
            call_id,
            who,
            value=value,
            arguments_hash=arguments_hash,
            action=ANSWERED[action][0],
        )
        said = f"{ANSWERED[action][1]} call {call_id}."
        return await _act(
            request,
            who,
            workflow_id,
            answer,
            said,
            signalled=f"{said} " + SIGNALLED.format(what="answer"),
        )

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

    @app.post("/conversations/{workflow_id:segment}/budget", include_in_schema=False)
    async def budget_form(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        csrf: CsrfToken = "",
        max_tokens: Annotated[str, Form()] = "",
        max_cost_usd: Annotated[str, Form()] = "",
    ) -> Response:
        _form_checked(request, who, csrf)
        try:
            tokens = int(max_tokens) if max_tokens.strip() else None
            cost = float(max_cost_usd) if max_cost_usd.strip() else None
        except ValueError:
            problem = Conflict("invalid_budget", "limits are numbers: tokens whole, USD decimal")
            return await _conversation_page(request, who, workflow_id, conflict=problem)
        raised = state.service.raise_budget(workflow_id, who, max_tokens=tokens, max_cost_usd=cost)
        return await _act(request, who, workflow_id, raised, "Budget raised.")

    @app.post("/conversations/{workflow_id:segment}/policy", include_in_schema=False)
    async def policy_form(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        csrf: CsrfToken = "",
        policy: Annotated[str, Form()] = "",
        reason: Annotated[str, Form()] = "",
    ) -> Response:
        _form_checked(request, who, csrf)
        if not policy.strip():
            conflict = Conflict("invalid_policy", "Write a policy first (YAML or JSON).")
            return await _conversation_page(request, who, workflow_id, conflict=conflict)
        install = state.service.set_policy(workflow_id, who, policy, reason=reason.strip()[:500])
        return await _act(
            request, who, workflow_id, install, lambda version: f"Policy {version} installed."
        )

    @app.post("/conversations/{workflow_id:segment}/revoke", include_in_schema=False)
    async def revoke_form(  # pyright: ignore[reportUnusedFunction]
        request: Request,
        workflow_id: str,
        who: Who,
        csrf: CsrfToken = "",
        grant_id: Annotated[str, Form()] = "",
        reason: Annotated[str, Form()] = "",
    ) -> Response:
        _form_checked(request, who, csrf)
        revoke = state.service.revoke_grant(
            workflow_id, who, grant_id.strip(), reason=reason.strip()[:500]
        )
        return await _act(request, who, workflow_id, revoke, f"Grant {grant_id} revoked.")

    @app.post("/conversations/{workflow_id:segment}/retry", include_in_schema=False)
    async def retry_form(  # pyright: ignore[reportUnusedFunction]
        request: Request, workflow_id: str, who: Who, csrf: CsrfToken = ""
    ) -> Response:
        _form_checked(request, who, csrf)
        try:
            failure = await state.service.retry(workflow_id, who)
        except Conflict as exc:
            return await _conversation_page(request, who, workflow_id, conflict=exc)
        # The page compares the failure retried with the one it finds (`retry_outcome`).
        retried = failure_mark(failure) if failure is not None else ""
        url = f"/conversations/{quote_segment(workflow_id)}?{urlencode({'retried': retried})}"
        return RedirectResponse(url, status_code=303)
