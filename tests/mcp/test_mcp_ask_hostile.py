"""Hostile links and sampling requests from a real server never escape as an error (hypothesis).

The test server's `raw_ask` answers input-required with whatever requests
it is given (the SDK server still checks their shape; anything it lets
through reaches the client as sent). Every link and sampling request,
however long, odd or unsafe, ends in one of two ways on the worker: a
request the loop can keep (it serializes; links are http or https) or a
`ToolFailure` of a known kind. A shape the SDK's server refuses reaches the
call as Failure `execution_error`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_support import started
from pydantic_core import to_json

from durable_tools.input_requests import NeedsInput
from durable_tools.mcp import McpServerConfig, McpToolsets
from durable_tools.tools import ToolContext, ToolFailure

SERVER = Path(__file__).with_name("mcp_test_server.py")
KINDS = {"invalid_input_request", "unsupported_input_request", "execution_error"}


@pytest.fixture(scope="module")
async def toolsets(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[McpToolsets]:
    log = tmp_path_factory.mktemp("hostile") / "server.jsonl"
    config = McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log)],
        trust_annotations=True,
    )
    async with started(config) as toolsets:
        yield toolsets


def _ask(toolsets: McpToolsets, requests: dict[str, Any]) -> Any:
    """Run `raw_ask` once: the checked requests, or the `ToolFailure`."""
    tool = toolsets.toolkit().tools["notes__raw_ask"]
    ctx = ToolContext(call_id="c", tool="notes__raw_ask", idempotency_key="wf/c")

    async def run() -> Any:
        try:
            await asyncio.wait_for(tool.run({"requests": requests}, lambda _: None, ctx), 20)
        except NeedsInput as asked:
            return asked.required
        except ToolFailure as failure:
            return failure
        raise AssertionError("the server answered without asking")

    return run()


text = st.text(max_size=3000)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    url=st.one_of(text, st.sampled_from(["javascript:alert(1)", "file:///etc/passwd"])),
    message=text,
    texts=st.lists(text, max_size=5),
    max_tokens=st.integers(min_value=-5, max_value=10**9),
)
async def test_hostile_links_and_sampling_requests_are_kept_or_fail_clearly(
    toolsets: McpToolsets, url: str, message: str, texts: list[str], max_tokens: int
) -> None:
    requests = {
        "link": {
            "method": "elicitation/create",
            "params": {"mode": "url", "message": message, "url": url},
        },
        "sample": {
            "method": "sampling/createMessage",
            "params": {
                "messages": [
                    {"role": "user", "content": {"type": "text", "text": t}} for t in texts
                ],
                "maxTokens": max_tokens,
            },
        },
    }
    out = await _ask(toolsets, requests)
    if isinstance(out, ToolFailure):
        assert out.kind in KINDS, out
        return
    to_json(out)  # what the tool activity returns always serializes
    link = next(r for r in out.requests if r.kind == "url")
    assert link.url == url and url.lower().startswith(("http://", "https://")) and link.host
    sample = next(r for r in out.requests if r.kind == "sampling")
    assert sample.sampling is not None and 1 <= sample.sampling.max_tokens <= 32768
