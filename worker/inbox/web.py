"""What the inbox's routes share: its state, authentication, CSRF, input errors, notices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import Depends, Form, Request
from fastapi.responses import Response

from durable_tools.worker.inbox.auth import (
    CSRF_COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    Authenticators,
    Csrf,
    Identity,
    Rejected,
)
from durable_tools.worker.inbox.service import InboxService

__all__ = [
    "BadInput",
    "Checked",
    "CsrfFailed",
    "CsrfToken",
    "SIGNALLED",
    "State",
    "Unauthenticated",
    "Who",
    "read_nonce",
    "set_nonce",
]


SIGNALLED: Final[str] = (
    "Sent as a signal: Temporal refused one more update on this conversation "
    "(its 10 in-flight updates are taken), so the {what} was accepted for delivery, "
    "not confirmed; the conversation checks it when it runs."
)
"""What a person is told of a decision or an answer (`{what}`) sent as the durable signal."""


class Unauthenticated(Exception):
    """No authenticator accepted the request, or one refused it (401).

    Args:
        reason: Why, when an authenticator said (`Rejected`); `None`: no credentials.
    """

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "no credentials")
        self.reason = reason


class CsrfFailed(Exception):
    """The CSRF token is missing or stale (403)."""


class BadInput(Exception):
    """A query parameter or header the API cannot read (422)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass
class State:
    """What the routes use: the service, auth, CSRF tokens, the list's refresh interval."""

    service: InboxService
    auth: Authenticators
    csrf: Csrf
    refresh_seconds: float


def _state(request: Request) -> State:
    state: State = request.app.state.inbox
    return state


def _identity(request: Request) -> Identity:
    try:
        found = _state(request).auth.authenticate(request)
    except Rejected as exc:
        raise Unauthenticated(exc.reason) from None
    if found is None:
        raise Unauthenticated()
    return found


Who = Annotated[Identity, Depends(_identity)]


def _api_csrf(request: Request, who: Who) -> Identity:
    state = _state(request)
    if who.needs_csrf and not state.csrf.check(
        request.headers.get(CSRF_HEADER, ""), request.cookies, who
    ):
        raise CsrfFailed()
    return who


Checked = Annotated[Identity, Depends(_api_csrf)]
CsrfToken = Annotated[str, Form(alias=CSRF_FIELD)]


def read_nonce(request: Request) -> tuple[str, bool]:
    """The request's CSRF nonce cookie, or a new one: `(nonce, fresh)`."""
    nonce = request.cookies.get(CSRF_COOKIE, "")
    return (nonce, False) if nonce else (Csrf.new_nonce(), True)


def set_nonce(request: Request, response: Response, nonce: str, fresh: bool) -> None:
    """Set the CSRF nonce cookie on `response` when `fresh`."""
    if fresh:
        secure = request.url.scheme == "https"
        response.set_cookie(
            CSRF_COOKIE, nonce, httponly=True, samesite="strict", secure=secure, path="/"
        )
