"""Provider errors as Temporal retry behaviour.

Model adapters run inside the `model.turn` activity, so what they raise is
what Temporal retries. The SDK clients are built with `max_retries=0`: the
activity's retry policy (backoff, maximum interval, the conversation's
deadline) owns every retry, each attempt is visible in the workflow history,
and no SDK back-off sleeps inside an attempt against its start-to-close
timeout. Each provider failure is raised as a
`temporalio.exceptions.ApplicationError`:

| the provider answered | `type` | retried |
|---|---|---|
| HTTP 429 | `ProviderRateLimited` | yes, after `retry-after-ms` / `retry-after` |
| HTTP 429 `insufficient_quota` (OpenAI) | `ProviderQuotaExceeded` | no |
| HTTP 408, 409, 425, 5xx (and Anthropic's 529) | `ProviderUnavailable` | yes |
| no answer: connection refused or reset, DNS | `ProviderUnavailable` | yes |
| no answer in time | `ProviderTimeout` | yes |
| HTTP 400, 413, 422 saying the context window is exceeded | `ContextLengthExceeded` | no |
| HTTP 400, 413, 422 | `ProviderBadRequest` | no |
| HTTP 401 | `ProviderAuthentication` | no |
| HTTP 403 | `ProviderPermissionDenied` | no |
| HTTP 404 | `ProviderNotFound` | no |
| any other 4xx | `ProviderRequestRejected` | no |
| a 2xx body that is not the API's shape | `ProviderResponseInvalid` | no |
| a stream broken off midway (error event, reset) | `ProviderStreamBroken` | yes |

A retryable error carries the server's `retry-after` as `next_retry_delay`,
which replaces the retry policy's backoff for that one attempt. A
non-retryable error fails the activity at once with a one-line message: the
provider, the HTTP status and code, the provider's own message, and a hint
(for 401: which environment variable holds the key). `details[0]` is a dict
`{"provider", "status", "code", "request_id", "retry_after"}` (seconds;
absent values are `None`).

A context-length error is raised as `ContextLengthExceeded` (an
`ApplicationError` subclass whose `type` is `"ContextLengthExceeded"`), so
code that shortens the transcript can tell it from other bad requests: in the
model activity by class, in the workflow by the failure's `type`.

Whatever a model adapter raises, the model activity passes it on through
`bounded_failure`: one line of at most `MAX_FAILURE_MESSAGE_CHARS`, with no
cause chain and small details, so the failure always fits Temporal's failure
size limit (a failure over it is replaced by "Failure exceeds size limit.");
the full text goes to the worker's log, scrubbed of secrets (at DEBUG, beside one WARNING line,
for these expected failures: `activities/failure_log.py`).
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, cast

from pydantic_core import to_json
from temporalio.exceptions import ApplicationError

from durable_tools.conversation import MAX_FAILURE_MESSAGE_CHARS

__all__ = [
    "CONTEXT_LENGTH_EXCEEDED",
    "ContextLengthExceeded",
    "MAX_FAILURE_MESSAGE_CHARS",
    "NON_RETRYABLE_TYPES",
    "ProviderContext",
    "RETRYABLE_TYPES",
    "bounded_failure",
    "connection_error",
    "invalid_response",
    "is_context_length_error",
    "retry_after",
    "status_error",
    "stream_broken",
]

RETRYABLE_TYPES: Final = (
    "ProviderRateLimited",
    "ProviderUnavailable",
    "ProviderTimeout",
    "ProviderStreamBroken",
)
"""`ApplicationError.type`s raised retryable."""

CONTEXT_LENGTH_EXCEEDED: Final = "ContextLengthExceeded"
"""`ApplicationError.type` of a request over the model's context window."""

NON_RETRYABLE_TYPES: Final = (
    CONTEXT_LENGTH_EXCEEDED,
    "ProviderAuthentication",
    "ProviderBadRequest",
    "ProviderNotFound",
    "ProviderPermissionDenied",
    "ProviderQuotaExceeded",
    "ProviderRequestRejected",
    "ProviderResponseInvalid",
)
"""`ApplicationError.type`s raised with `non_retryable=True`."""

_RETRYABLE_STATUSES: Final = frozenset({408, 409, 425, 429})
_MAX_MESSAGE_CHARS: Final = 500


_MAX_DETAILS_BYTES: Final = 4096

# Codes and phrases providers use for a request over the context window:
# OpenAI `context_length_exceeded`; llama.cpp's server `exceed_context_size_error`;
# Anthropic "prompt is too long: 210000 tokens > 200000 maximum"; vLLM "This
# model's maximum context length is 4096 tokens"; Gemini "exceeds the maximum
# number of tokens".
_CONTEXT_CODES: Final = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_PHRASES: Final = re.compile(
    r"context[ _-]?(length|window|size)|prompt is too long|maximum context|"
    r"exceeds the maximum number of tokens|too many tokens",
    re.IGNORECASE,
)


class ContextLengthExceeded(ApplicationError):
    """The request was over the model's context window (non-retryable).

    Its `type` is `CONTEXT_LENGTH_EXCEEDED`; `details[0]` is the same dict as
    the other provider errors'. Retrying the same transcript cannot succeed:
    shorten it (drop or summarize old turns) or use a model with a larger
    window.
    """

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        """Build the error (see the class docstring)."""
        super().__init__(message, details, type=CONTEXT_LENGTH_EXCEEDED, non_retryable=True)


def is_context_length_error(status: int, code: str | None, message: str) -> bool:
    """Whether an HTTP error answer says the request is over the context window.

    Args:
        status: The HTTP status (only 400, 413 and 422 can say so).
        code: The provider's error code, if any.
        message: The provider's error message.

    Returns:
        True for OpenAI's `context_length_exceeded`, llama.cpp's
        `exceed_context_size_error`, and messages such as Anthropic's
        "prompt is too long".
    """
    if status not in (400, 413, 422):
        return False
    return (code or "") in _CONTEXT_CODES or _CONTEXT_PHRASES.search(message) is not None


def bounded_failure(
    error: BaseException, redact: Callable[[str], str] | None = None
) -> ApplicationError:
    """`error` as an `ApplicationError` that always fits Temporal's failure size limit.

    The message becomes one line of at most `MAX_FAILURE_MESSAGE_CHARS`
    characters (an exception that is not an `ApplicationError` is prefixed
    with its class name, and its class name becomes the `type`); the cause
    chain is dropped; details over 4 KB of JSON are dropped. `type`,
    `non_retryable`, `next_retry_delay` and the class (e.g.
    `ContextLengthExceeded`) are kept. Raise the result `from None`.

    Args:
        error: What the model adapter (or the activity) raised.
        redact: Applied to the message first (the worker's
            `durable_tools.redact.Redactor`: secrets become `[redacted]`).

    Returns:
        The bounded error.
    """
    if isinstance(error, ApplicationError):
        message, kind = error.message, error.type
        details: tuple[Any, ...] = tuple(error.details)
        non_retryable, delay = error.non_retryable, error.next_retry_delay
    else:
        message, kind = f"{type(error).__name__}: {error}", type(error).__name__
        details, non_retryable, delay = (), False, None
    line = " ".join((redact(message) if redact is not None else message).split())
    if len(line) > MAX_FAILURE_MESSAGE_CHARS:
        line = line[: MAX_FAILURE_MESSAGE_CHARS - 1] + "…"
    try:
        if len(to_json(details, fallback=str)) > _MAX_DETAILS_BYTES:
            details = ()
    except ValueError:  # e.g. an unpaired surrogate: not JSON at all
        details = ()
    if isinstance(error, ContextLengthExceeded):
        first: Any = details[0] if details else None
        fields = cast(dict[str, Any], first) if isinstance(first, dict) else {}
        return ContextLengthExceeded(line, fields)
    return ApplicationError(
        line, *details, type=kind, non_retryable=non_retryable, next_retry_delay=delay
    )


@dataclass(frozen=True, kw_only=True)
class ProviderContext:
    """Who was called, for error messages.

    Attributes:
        provider: The provider's display name (`"OpenAI"`, `"Anthropic"`).
        api: The API called (`"Chat Completions"`, `"Responses"`, `"Messages"`).
        model: The model name sent in the request.
        base_url: The API base URL the client calls.
        key_env: The environment variable the SDK reads the API key from.
    """

    provider: str
    api: str
    model: str
    base_url: str
    key_env: str


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> timedelta | None:
    """Read how long the server asks to wait before the next attempt.

    `retry-after-ms` (milliseconds, OpenAI's and Anthropic's) wins over
    `retry-after` (seconds, or an HTTP date per RFC 9110 §10.2.3).

    Args:
        headers: Response headers; keys are looked up lower-case, so pass a
            case-insensitive mapping (`httpx.Headers`) or lower-case keys.
        now: The current Unix time in seconds, for an HTTP-date value
            (default `time.time()`).

    Returns:
        The delay, or `None` when neither header holds a positive, finite one.
    """
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            if name == "retry-after-ms":
                continue
            parsed = email.utils.parsedate_tz(value)
            if parsed is None:
                continue
            seconds = email.utils.mktime_tz(parsed) - (time.time() if now is None else now)
        if math.isfinite(seconds) and seconds > 0:
            return timedelta(seconds=seconds)
    return None


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_MESSAGE_CHARS else line[: _MAX_MESSAGE_CHARS - 1] + "…"


def _error_fields(body: object, fallback: str) -> tuple[str, str | None]:
    """The provider's message and code from an error body.

    OpenAI sends `{"error": {"message", "type", "code", "param"}}`, Anthropic
    `{"type": "error", "error": {"type", "message"}}`, and both SDKs hand on
    the inner object; Ollama sends `{"error": "model 'x' not found"}`.
    Anything else falls back to the SDK's message.
    """
    error: Any = body
    if isinstance(error, dict) and "error" in error:
        error = cast(dict[str, Any], error)["error"]
    if isinstance(error, dict):
        fields = cast(dict[str, Any], error)
        message = fields.get("message")
        code = fields.get("code") or fields.get("type")
        return (
            message if isinstance(message, str) and message else fallback,
            code if isinstance(code, str) and code else None,
        )
    if isinstance(error, str) and error:
        return error, None
    return fallback, None


def _hint(context: ProviderContext, status: int, code: str | None) -> str:
    if status == 401:
        return f"check the API key in {context.key_env} (or the adapter's api_key argument)"
    if status == 403:
        return "the key has no access to this model or endpoint; check its project permissions"
    if status == 404:
        return (
            f"check the model name {context.model!r} and the base URL {context.base_url} "
            "(is that model available there?)"
        )
    if status == 413:
        return "the request is too large; shorten the transcript or the tool outputs"
    if code == "insufficient_quota":
        return "the account is out of quota; check its plan and billing"
    if status in (400, 422):
        return "the request was refused as invalid; check the agent's settings and tool schemas"
    return "the request was refused; retrying will not help"


def status_error(
    context: ProviderContext,
    *,
    status: int,
    headers: Mapping[str, str],
    body: object,
    fallback_message: str,
    request_id: str | None = None,
) -> ApplicationError:
    """Map an HTTP error answer to a retryable or non-retryable `ApplicationError`.

    Args:
        context: Who was called.
        status: The HTTP status code (4xx or 5xx).
        headers: The response headers (for `retry-after`).
        body: The decoded error body (a dict for JSON, else anything).
        fallback_message: The SDK's message, used when the body has none.
        request_id: The provider's request id, when the response has one.

    Returns:
        The error to raise (see the module docstring for the types).
    """
    message, code = _error_fields(body, fallback_message)
    message = message.strip().rstrip(".")
    delay = retry_after(headers)
    details: dict[str, Any] = {
        "provider": context.provider,
        "status": status,
        "code": code,
        "request_id": request_id,
        "retry_after": delay.total_seconds() if delay is not None else None,
    }
    what = f"{context.provider} answered HTTP {status}{f' ({code})' if code else ''}"
    where = f" for model {context.model!r}"
    suffix = f" [request id {request_id}]" if request_id else ""
    retryable = (status in _RETRYABLE_STATUSES or status >= 500) and code != "insufficient_quota"
    if not retryable and is_context_length_error(status, code, message):
        return ContextLengthExceeded(
            _one_line(
                f"{what}{where}: {message} — the transcript is over the model's context "
                f"window; shorten it or use a model with a larger one{suffix}"
            ),
            details,
        )
    if retryable:
        kind = "ProviderRateLimited" if status == 429 else "ProviderUnavailable"
        return ApplicationError(
            _one_line(f"{what}{where}: {message}; Temporal retries the model turn{suffix}"),
            details,
            type=kind,
            next_retry_delay=delay,
        )
    kind = {
        401: "ProviderAuthentication",
        403: "ProviderPermissionDenied",
        404: "ProviderNotFound",
        400: "ProviderBadRequest",
        413: "ProviderBadRequest",
        422: "ProviderBadRequest",
        429: "ProviderQuotaExceeded",
    }.get(status, "ProviderRequestRejected")
    return ApplicationError(
        _one_line(f"{what}{where}: {message} — {_hint(context, status, code)}{suffix}"),
        details,
        type=kind,
        non_retryable=True,
    )


def connection_error(
    context: ProviderContext, error: BaseException, *, timed_out: bool
) -> ApplicationError:
    """Map a request that got no answer to a retryable `ApplicationError`.

    Args:
        context: Who was called.
        error: The SDK's connection or timeout error; its cause (the
            transport's error, e.g. connection refused) is named in the message.
        timed_out: True for a timeout (`ProviderTimeout`), False for a
            connection failure (`ProviderUnavailable`).

    Returns:
        The error to raise.
    """
    cause = error.__cause__ or error.__context__
    because = f": {type(cause).__name__}: {cause}" if cause is not None else f": {error}"
    what = "did not answer in time" if timed_out else "could not be reached"
    details = _no_response_details(context)
    return ApplicationError(
        _one_line(
            f"{context.provider} at {context.base_url} {what}{because}; "
            "Temporal retries the model turn"
        ),
        details,
        type="ProviderTimeout" if timed_out else "ProviderUnavailable",
    )


def invalid_response(context: ProviderContext, error: ValueError) -> ApplicationError:
    """Map a 2xx answer whose body is not the API's shape to a non-retryable error.

    That happens when `base_url` points at a server speaking another API (or
    a proxy's HTML page); sending the same request again gets the same answer.

    Args:
        context: Who was called.
        error: What reading the body raised (`json` or `parse_response`).

    Returns:
        The error to raise (`ProviderResponseInvalid`, non-retryable).
    """
    details = _no_response_details(context)
    return ApplicationError(
        _one_line(
            f"{context.provider} at {context.base_url} sent a response durable-tools cannot "
            f"read ({error}) — does this base URL serve the {context.provider} "
            f"{context.api} API?"
        ),
        details,
        type="ProviderResponseInvalid",
        non_retryable=True,
    )


def stream_broken(context: ProviderContext, error: BaseException | str) -> ApplicationError:
    """Map a streamed answer that broke off midway to a retryable error.

    The provider accepted the request and started streaming, then sent an
    `error` event (e.g. Anthropic's `overloaded_error`), the connection
    dropped, or the stream ended without its final event. A new attempt
    streams the turn again from the start (its text deltas carry the new
    attempt number).

    Args:
        context: Who was called.
        error: What the stream raised, or a description.

    Returns:
        The error to raise (`ProviderStreamBroken`, retryable).
    """
    what = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    details = _no_response_details(context)
    return ApplicationError(
        _one_line(
            f"{context.provider} at {context.base_url} broke off its streamed answer "
            f"({what}); Temporal retries the model turn"
        ),
        details,
        type="ProviderStreamBroken",
    )


def _no_response_details(context: ProviderContext) -> dict[str, Any]:
    """The failure details when no HTTP response says more (all but the provider `None`)."""
    return {
        "provider": context.provider,
        "status": None,
        "code": None,
        "request_id": None,
        "retry_after": None,
    }
