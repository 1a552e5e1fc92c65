"""Provider errors as Temporal retry behaviour: the parts no SDK exchange reaches."""

from __future__ import annotations

import email.utils
from datetime import timedelta

import httpx2
import pytest

from durable_tools.models import errors
from durable_tools.models.errors import ProviderContext, retry_after, status_error

NOW = 1_762_345_678.0
CONTEXT = ProviderContext(
    provider="OpenAI",
    api="Chat Completions",
    model="gpt-5.4",
    base_url="https://api.openai.com/v1/",
    key_env="OPENAI_API_KEY",
)


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "3"}, timedelta(seconds=3)),
        ({"retry-after": "0.5"}, timedelta(seconds=0.5)),
        ({"retry-after-ms": "1500"}, timedelta(seconds=1.5)),
        ({"retry-after-ms": "bogus", "retry-after": "2"}, timedelta(seconds=2)),
        ({"retry-after": email.utils.formatdate(NOW + 30, usegmt=True)}, timedelta(seconds=30)),
        ({"retry-after": email.utils.formatdate(NOW - 30, usegmt=True)}, None),  # past
        ({"retry-after": "0"}, None),
        ({"retry-after": "-4"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], delay: timedelta | None) -> None:
    assert retry_after(httpx2.Headers(headers), now=NOW) == delay


def test_header_names_are_case_insensitive_through_httpx_headers() -> None:
    assert retry_after(httpx2.Headers({"Retry-After": "4"})) == timedelta(seconds=4)


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(408, True), (409, True), (425, True), (429, True), (500, True), (529, True)]
    + [(400, False), (401, False), (402, False), (403, False), (404, False), (422, False)],
)
def test_which_statuses_are_retried(status: int, retryable: bool) -> None:
    error = status_error(
        CONTEXT, status=status, headers=httpx2.Headers(), body=None, fallback_message="Error code"
    )
    assert error.non_retryable is not retryable
    assert error.type in (errors.RETRYABLE_TYPES if retryable else errors.NON_RETRYABLE_TYPES)
    assert error.details[0]["status"] == status


def test_a_long_provider_message_is_cut_to_one_line() -> None:
    body = {"message": "line one\nline two " + "x" * 2000, "code": "invalid_value"}
    error = status_error(
        CONTEXT, status=400, headers=httpx2.Headers(), body=body, fallback_message=""
    )
    assert "\n" not in error.message
    assert "line one line two" in error.message
    assert len(error.message) <= 500


def test_all_is_complete_and_sorted() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if not name.startswith("_")
        and (name.isupper() or getattr(value, "__module__", None) == errors.__name__)
    }
    assert errors.__all__ == sorted(errors.__all__)
    assert set(errors.__all__) == defined
