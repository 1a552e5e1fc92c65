"""Roots requests inside input-required results, answered by the tool activity itself.

The test server's `files` (the `mcp` SDK's `Resolve`/`ListRoots`) asks for
the client's roots inside an input-required result; `nosy` asks for them
round after round (a new key each time). The activity answers from the
server's configuration (`McpServerConfig.roots`) and calls again at once:
no person, no durable wait, at most `MAX_INPUT_ROUNDS` roots-only rounds.
A server whose configuration lists no roots is sent an empty list; the
SDK's own servers refuse to ask a client that did not declare roots.
Hostile roots requests (any keys, `_meta`, mixed with forms) become a kept
request, an answer, or a `ToolFailure` of a known kind (hypothesis).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_support import started, stdio_test_server
from pydantic_core import to_json
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_tools.input_requests import (
    MAX_INPUT_ROUNDS,
    InputAnswer,
    InputRequired,
    InputResume,
    ListedRoot,
    NeedsInput,
)
from durable_tools.mcp import McpServerConfig, McpToolsets
from durable_tools.mcp.input_required import input_required_of, input_responses_of
from durable_tools.tools import ToolContext, ToolFailure

ROOTS = ["/srv/data", "file:///home/ada/"]
LISTED = [["file:///srv/data", "data"], ["file:///home/ada/", "ada"]]
FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _rows(log: Path, event: str, tool: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event and r.get("tool") == tool]


async def _run(toolsets: McpToolsets, name: str, arguments: dict[str, Any]) -> Any:
    tool = toolsets.toolkit().tools[f"notes__{name}"]
    ctx = ToolContext(call_id="c", tool=f"notes__{name}", idempotency_key="wf/c")
    return await asyncio.wait_for(tool.run(arguments, lambda _: None, ctx), 30)


def _result(requests: dict[str, Any], state: str | None = "s1") -> types.InputRequiredResult:
    return types.InputRequiredResult(input_requests=requests, request_state=state)


def test_roots_requests_are_answered_from_the_configuration() -> None:
    config = McpServerConfig(name="notes", command="x", roots=ROOTS)
    form = types.ElicitRequest(
        params=types.ElicitRequestFormParams(message="Name?", requested_schema=FORM)
    )
    asked = input_required_of("notes", _result({"r": types.ListRootsRequest(), "f": form}), config)
    assert [r.key for r in asked.requests] == ["f"]  # the person is asked only the form
    answer = asked.answered["r"]
    assert answer.kind == "roots" and answer.roots is not None
    assert [[r.uri, r.name] for r in answer.roots] == LISTED
    # Recorded in the activity's result (it crosses Temporal as JSON) ...
    payload = pydantic_data_converter.payload_converter.to_payload(asked)
    back = pydantic_data_converter.payload_converter.from_payload(payload, InputRequired)
    assert back == asked and "s1" not in repr(back)
    # ... and sent as a ListRootsResult beside the person's answer.
    resume = InputResume(
        responses={**back.answered, "f": InputAnswer(content={"name": "Ada"})}, request_state="s1"
    )
    responses = input_responses_of("notes", resume)
    assert responses["r"] == types.ListRootsResult(
        roots=[
            types.Root(uri="file:///srv/data", name="data"),
            types.Root(uri="file:///home/ada/", name="ada"),
        ]  # pyright: ignore[reportArgumentType]
    )
    assert responses["f"] == types.ElicitResult(action="accept", content={"name": "Ada"})
    # Without roots configured (or without a configuration): an empty list.
    for bare in (McpServerConfig(name="notes", command="x"), None):
        only = input_required_of("notes", _result({"r": types.ListRootsRequest()}), bare)
        assert only.requests == [] and only.answered["r"].roots == []
    # Results without roots serialize as they did before roots were answered.
    plain = input_required_of("notes", _result({"f": form}), config)
    assert "answered" not in plain.model_dump(mode="json")
    assert "roots" not in InputAnswer(content={"name": "Ada"}).model_dump(mode="json")


def test_a_roots_answer_that_cannot_be_sent_is_a_failure() -> None:
    bad = InputAnswer(kind="roots", roots=[ListedRoot(uri="not a uri")])
    with pytest.raises(ToolFailure) as failure:
        input_responses_of("notes", InputResume(responses={"r": bad}))
    assert failure.value.kind == "invalid_input_response"


async def test_roots_only_rounds_are_retried_in_the_activity(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    config = stdio_test_server(log, trust_annotations=True, roots=ROOTS)
    async with started(config) as toolsets:
        # The SDK's resolver: one roots round, answered and retried at once.
        value = await _run(toolsets, "files", {})
        assert json.loads(value["result"]) == {"roots": LISTED}
        # Several roots-only rounds, each a new key, in the same activity.
        value = await _run(toolsets, "nosy", {"rounds": 3})
        assert json.loads(value["result"]) == {"rounds": 3, "roots": LISTED}
        # Bounded: a server that never stops asking for roots fails the call.
        with pytest.raises(ToolFailure) as failure:
            await _run(toolsets, "nosy", {"rounds": MAX_INPUT_ROUNDS + 1})
    assert failure.value.kind == "input_rounds_exceeded"
    assert "roots" in failure.value.reason
    assert [r["answered"] for r in _rows(log, "round", "nosy")[:4]] == [
        [],
        ["roots-0"],
        ["roots-1"],
        ["roots-2"],
    ]
    assert len(_rows(log, "call", "files")) == 1
    assert len(_rows(log, "round", "nosy")) == 4 + MAX_INPUT_ROUNDS + 1


async def test_a_server_without_configured_roots(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    async with started(stdio_test_server(log, trust_annotations=True)) as toolsets:
        # A server that asks anyway gets the truth: no roots.
        value = await _run(toolsets, "nosy", {"rounds": 1})
        assert json.loads(value["result"]) == {"rounds": 1, "roots": []}
        # The SDK's servers do not ask a client that did not declare roots.
        with pytest.raises(ToolFailure) as failure:
            await _run(toolsets, "files", {})
    assert failure.value.kind == "execution_error"
    assert "roots capability" in failure.value.reason


@pytest.fixture(scope="module")
async def toolsets(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[McpToolsets]:
    log = tmp_path_factory.mktemp("roots") / "server.jsonl"
    async with started(stdio_test_server(log, trust_annotations=True, roots=ROOTS)) as toolsets:
        yield toolsets


KINDS = {"invalid_input_request", "unsupported_input_request", "execution_error"}
# Keys the client can send as `raw_ask`'s arguments (a lone surrogate cannot
# leave the client; `test_mcp_input_checks.py` covers such keys).
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=250)
_keys = st.one_of(_text, st.sampled_from(["", "r" * 201]))
_meta = st.one_of(
    st.none(),
    st.dictionaries(
        st.text(max_size=20), st.one_of(st.none(), st.text(max_size=50), st.integers())
    ),
)


def _roots_request(meta: Any) -> dict[str, Any]:
    if meta is None:
        return {"method": "roots/list"}
    return {"method": "roots/list", "params": {"_meta": meta}}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    requests=st.dictionaries(
        _keys,
        st.one_of(
            _meta.map(_roots_request),
            st.just(
                {
                    "method": "elicitation/create",
                    "params": {"message": "Name?", "requestedSchema": FORM},
                }
            ),
        ),
        max_size=20,
    )
)
async def test_hostile_roots_requests_are_answered_kept_or_fail_clearly(
    toolsets: McpToolsets, requests: dict[str, Any]
) -> None:
    tool = toolsets.toolkit().tools["notes__raw_ask"]
    ctx = ToolContext(call_id="c", tool="notes__raw_ask", idempotency_key="wf/c")
    try:
        value = await asyncio.wait_for(tool.run({"requests": requests}, lambda _: None, ctx), 20)
    except NeedsInput as asked:
        required = asked.required
        to_json(required)  # the activity's result serializes
        roots = {k for k, v in requests.items() if v["method"] == "roots/list"}
        assert set(required.answered) == roots
        assert all(a.roots is not None and len(a.roots) == 2 for a in required.answered.values())
        assert {r.key for r in required.requests} == set(requests) - roots
        assert required.requests  # never returned with nothing for the loop to ask
    except ToolFailure as failure:
        assert failure.kind in KINDS, failure
    else:
        # Only roots requests (or none: called again with the state alone),
        # answered and called again within the activity.
        assert value == {"result": "answered"}
        assert all(v["method"] == "roots/list" for v in requests.values())
