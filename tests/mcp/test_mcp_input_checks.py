"""An MCP input-required result is checked on the worker before the loop sees it.

What a server asks is untrusted (DESIGN.md invariant 7): requests the loop
cannot ask (unsafe links, malformed sampling requests) and requests it could not
keep (bad schemas, too many, a `requestState` that is not UTF-8) become a
`ToolFailure` the model reads, never a result that fails to serialize. A
result that carries only a `requestState` is retried within the activity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp_support import started, stdio_test_server

from durable_tools.input_requests import InputAnswer, InputResume
from durable_tools.mcp.input_required import (
    MAX_REQUESTS,
    input_required_of,
    input_responses_of,
)
from durable_tools.tools import ToolContext, ToolFailure

FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _form(schema: Any = FORM, message: str = "Name?") -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


def _result(requests: dict[str, Any], state: str | None = "s1") -> types.InputRequiredResult:
    return types.InputRequiredResult(input_requests=requests, request_state=state)


def test_a_form_request_is_kept_with_its_schema_and_state() -> None:
    required = input_required_of("notes", _result({"k": _form(message="x" * 5000)}))
    (request,) = required.requests
    assert (request.key, request.kind, request.answer_schema) == ("k", "form", FORM)
    assert len(request.message) == 2000
    assert required.request_state == "s1"
    assert "s1" not in repr(required)  # never in a repr, so never in a log line


@pytest.mark.parametrize(
    ("request_", "kind", "words"),
    [
        (
            types.ElicitRequest(
                params=types.ElicitRequestURLParams(message="m", url="javascript:alert(1)")
            ),
            "invalid_input_request",
            "not http or https",
        ),
        (
            types.CreateMessageRequest(
                params=types.CreateMessageRequestParams(messages=[], max_tokens=5)
            ),
            "invalid_input_request",
            "sampling request of 0 messages",
        ),
        (_form({"type": "string"}), "invalid_input_request", "not an object schema"),
        (_form({"type": "object", "properties": 3}), "invalid_input_request", "invalid"),
        (_form({"type": "object", "x": "y" * 70_000}), "invalid_input_request", "bytes"),
    ],
)
def test_what_the_loop_cannot_ask_is_a_failure(request_: Any, kind: str, words: str) -> None:
    with pytest.raises(ToolFailure) as failure:
        input_required_of("notes", _result({"k": request_}))
    assert failure.value.kind == kind and words in failure.value.reason


def test_requests_and_state_that_cannot_be_kept_are_failures() -> None:
    many = {f"k{i}": _form() for i in range(MAX_REQUESTS + 1)}
    for result in (
        _result(many),
        _result({"k": _form()}, state="\ud800"),
        _result({"\ud800": _form()}),
        _result({"": _form()}),
    ):
        with pytest.raises(ToolFailure) as failure:
            input_required_of("notes", result)
        assert failure.value.kind == "invalid_input_request"


def test_answers_become_elicit_results() -> None:
    resume = InputResume(
        responses={
            "a": InputAnswer(content={"name": "Ada"}),
            "b": InputAnswer(action="decline", content={"ignored": 1}),
            "c": InputAnswer(action="cancel"),
        },
        request_state="s",
    )
    responses = input_responses_of("notes", resume)
    assert responses["a"] == types.ElicitResult(action="accept", content={"name": "Ada"})
    assert responses["b"] == types.ElicitResult(action="decline")
    assert responses["c"] == types.ElicitResult(action="cancel")
    nested = InputResume(responses={"a": InputAnswer(content={"name": {"deep": 1}})})
    with pytest.raises(ToolFailure) as failure:
        input_responses_of("notes", nested)
    assert failure.value.kind == "invalid_input_response"


async def test_a_result_with_only_a_request_state_is_retried_in_the_activity(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.jsonl"
    async with started(stdio_test_server(log, trust_annotations=True)) as toolsets:
        tool = toolsets.toolkit().tools["notes__patience"]
        ctx = ToolContext(call_id="c", tool="notes__patience", idempotency_key="wf/c")
        value = await tool.run({"rounds": 3}, lambda _: None, ctx)
        assert value == {"result": "answered after 3 retries"}
        with pytest.raises(ToolFailure) as failure:
            await tool.run({"rounds": 100}, lambda _: None, ctx)
    assert failure.value.kind == "invalid_input_request"
    assert "kept asking" in failure.value.reason
