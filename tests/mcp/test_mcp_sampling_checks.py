"""Sampling requests and links in input-required results, checked on the worker (no server).

Whatever a server sends (hypothesis: any messages, sizes, settings, links)
either becomes a request the loop can keep (it serializes, bounded) or a
`ToolFailure` with a clear kind: never an exception of another type, so
never a failed workflow task or activity serialization (DESIGN.md
invariant 7).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_core import to_json

from durable_tools.input_requests import InputAnswer, InputResume, SampledReply
from durable_tools.mcp import McpServerConfig
from durable_tools.mcp.input_required import (
    MAX_SAMPLING_CHARS,
    checked_url,
    input_required_of,
    input_responses_of,
)
from durable_tools.tools import ToolFailure

KINDS = {"invalid_input_request", "unsupported_input_request", "input_request_refused"}


def _config(**fields: Any) -> McpServerConfig:
    return McpServerConfig(name="notes", command="x", **fields)


def _sample(*texts: str, **params: Any) -> types.CreateMessageRequest:
    messages = [
        types.SamplingMessage(role="user", content=types.TextContent(type="text", text=t))
        for t in texts
    ]
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=messages, **{"max_tokens": 50, **params})
    )


def _url(url: str) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestURLParams(message="Sign in", url=url))


def _asked(request: Any, config: McpServerConfig | None = None) -> Any:
    result = types.InputRequiredResult(input_requests={"k": request}, request_state="s")
    return input_required_of("notes", result, config)


def test_a_sampling_request_is_kept_for_approval_by_default() -> None:
    (request,) = _asked(_sample("Hi", system_prompt="Be brief", temperature=0.5)).requests
    assert (request.kind, request.approval, request.message) == ("sampling", "approve", "Hi")
    ask = request.sampling
    assert ask.system_prompt == "Be brief" and ask.max_tokens == 50 and ask.temperature == 0.5
    (allowed,) = _asked(_sample("Hi"), _config(sampling="allow")).requests
    assert allowed.approval == ""
    with pytest.raises(ToolFailure) as failure:
        _asked(_sample("Hi"), _config(sampling="refuse"))
    assert failure.value.kind == "input_request_refused"


def test_sampling_requests_the_worker_cannot_answer_are_failures() -> None:
    image = types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[
                types.SamplingMessage(
                    role="user", content=types.ImageContent(type="image", data="", mime_type="x")
                )
            ],
            max_tokens=5,
        )
    )
    tool = types.Tool(name="t", input_schema={"type": "object"})
    cases = [
        (image, "unsupported_input_request", "image"),
        (_sample("x", tools=[tool]), "unsupported_input_request", "with tools"),
        (_sample("x" * (MAX_SAMPLING_CHARS + 1)), "invalid_input_request", "characters"),
        (_sample(*["x"] * 65), "invalid_input_request", "65 messages"),
        (_sample("x", system_prompt="y" * 9000), "invalid_input_request", "system prompt"),
        (_sample("x", temperature=9.0), "invalid_input_request", "temperature"),
        (_sample("x", stop_sequences=["s"] * 9), "invalid_input_request", "stop"),
    ]
    for request, kind, words in cases:
        with pytest.raises(ToolFailure) as failure:
            _asked(request)
        assert failure.value.kind == kind and words in failure.value.reason, words


def test_max_tokens_is_bounded() -> None:
    (request,) = _asked(_sample("x", max_tokens=10**9)).requests
    assert request.sampling.max_tokens == 32768


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "data:text/html,<b>x</b>",
        "file:///etc/passwd",
        "ftp://example.com/x",
        "https://user:secret@example.com/",
        "https:///no-host",
        "https://exa mple.com/",
        "https://example.com/\x00",
        "https://ex\u0430mple.com/",  # a Cyrillic a: shown hosts are ASCII only
        "https://example.com:99999/",
        "",
        "https://example.com/" + "x" * 3000,
    ],
)
def test_links_that_must_not_be_shown_are_refused(url: str) -> None:
    with pytest.raises(ToolFailure) as failure:
        _asked(_url(url))
    assert failure.value.kind == "invalid_input_request"


def test_a_link_is_kept_with_its_host_and_policy() -> None:
    (request,) = _asked(_url("https://Auth.Example.com/login?token=abc")).requests
    assert (request.kind, request.host, request.approval) == ("url", "auth.example.com", "")
    assert request.url == "https://Auth.Example.com/login?token=abc"
    (gated,) = _asked(_url("http://127.0.0.1:8000/x"), _config(url_elicitation="approver")).requests
    assert gated.approval == "approve" and gated.host == "127.0.0.1"
    with pytest.raises(ToolFailure) as failure:
        _asked(_url("https://example.com"), _config(url_elicitation="refuse"))
    assert failure.value.kind == "input_request_refused"


def test_answers_become_sampling_results_and_url_outcomes() -> None:
    resume = InputResume(
        responses={
            "s": InputAnswer(kind="sampling", sampled=SampledReply(text="Hi", model="m")),
            "u": InputAnswer(kind="url", action="accept"),
            "d": InputAnswer(kind="url", action="decline"),
        }
    )
    responses = input_responses_of("notes", resume)
    assert responses["s"] == types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="Hi"),
        model="m",
        stop_reason="endTurn",
    )
    assert responses["u"] == types.ElicitResult(action="accept")
    assert responses["d"] == types.ElicitResult(action="decline")


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    texts=st.lists(st.text(max_size=300), min_size=0, max_size=70),
    system=st.one_of(st.none(), st.text(max_size=9000)),
    max_tokens=st.integers(min_value=-(10**12), max_value=10**12),
    temperature=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    stops=st.one_of(st.none(), st.lists(st.text(max_size=300), max_size=10)),
)
def test_any_sampling_request_is_kept_or_a_failure(
    texts: list[str],
    system: str | None,
    max_tokens: int,
    temperature: float | None,
    stops: list[str] | None,
) -> None:
    request = _sample(
        *texts,
        system_prompt=system,
        max_tokens=max_tokens,
        temperature=temperature,
        stop_sequences=stops,
    )
    try:
        asked = _asked(request)
    except ToolFailure as failure:
        assert failure.kind in KINDS
        return
    to_json(asked)  # what the tool activity returns always serializes
    (kept,) = asked.requests
    assert kept.sampling is not None and 1 <= kept.sampling.max_tokens <= 32768


@settings(max_examples=300, deadline=None)
@given(url=st.one_of(st.text(max_size=200), st.from_regex(r"[a-z]{1,8}:[^ ]{0,80}")))
def test_any_link_is_kept_as_http_or_refused(url: str) -> None:
    try:
        kept, host = checked_url("notes", url)
    except ToolFailure as failure:
        assert failure.kind == "invalid_input_request"
        return
    assert kept == url and host
    assert url.lower().startswith(("http://", "https://"))
