"""Recorded provider HTTP exchanges, replayed through the SDKs' own transport.

A `Replay` is an `httpx.MockTransport` handler (the SDKs use `httpx2`): each
request the SDK sends is recorded (method, path, headers, JSON body) and
answered with the next queued answer: a status with a JSON body and
headers, a server-sent event stream (`answer_sse`, from a `.sse` fixture in
the provider's documented format), or a transport error (e.g. connection
refused). Nothing leaves the
process. The shared transcript, tools and settings below are what the
adapter tests render into each provider's request.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from durable_tools.descriptor import ToolDescriptor
from durable_tools.results import Failure, Ok, ToolCall
from durable_tools.transcript import (
    AssistantMessage,
    TranscriptItem,
    UserMessage,
    to_tool_call_output,
)

FIXTURES = Path(__file__).parent / "fixtures" / "providers"


def fixture(name: str) -> dict[str, Any]:
    """A recorded exchange: `{"request": expected body, "response": body}`."""
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return data


@dataclass
class Sent:
    method: str
    path: str
    headers: httpx2.Headers
    body: dict[str, Any]


@dataclass
class Replay:
    """Answers requests in order from `answers`; records what was sent."""

    answers: deque[httpx2.Response | Exception] = field(
        default_factory=deque[httpx2.Response | Exception]
    )
    sent: list[Sent] = field(default_factory=list[Sent])

    def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> Replay:
        self.answers.append(httpx2.Response(status, json=body, headers=headers))
        return self

    def answer_sse(self, name: str) -> Replay:
        """Answer with the `text/event-stream` body of fixture `name` (a `.sse` file)."""
        body = (FIXTURES / name).read_bytes()
        headers = {"content-type": "text/event-stream; charset=utf-8"}
        self.answers.append(httpx2.Response(200, content=body, headers=headers))
        return self

    def fail(self, error: Exception) -> Replay:
        self.answers.append(error)
        return self

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(
            Sent(request.method, request.url.path, request.headers, json.loads(request.content))
        )
        if not self.answers:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        answer = self.answers.popleft()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self))


INSTRUCTIONS = "You are a weather assistant. Log what you find."

TOOLS = [
    ToolDescriptor(
        name="get_weather",
        description="Current weather for a city.",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        strict=True,
    ),
    ToolDescriptor(
        name="log_note",
        description="Write a note to the log.",
        parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    ),
]

BOSTON = ToolCall(call_id="call_boston", name="get_weather", arguments='{"city":"Boston"}')
PARIS = ToolCall(call_id="call_paris", name="get_weather", arguments='{"city":"Paris"}')

# A user question, a turn with two calls, one answered with a value and one
# with a failure: the request after it carries calls and both kinds of output.
TRANSCRIPT: list[TranscriptItem] = [
    UserMessage(text="What's the weather in Boston and Paris? Log it."),
    AssistantMessage(text="Checking both cities.", tool_calls=(BOSTON, PARIS)),
    to_tool_call_output(
        Ok(call_id="call_boston", tool="get_weather", value={"city": "Boston", "temp_c": 21})
    ),
    to_tool_call_output(
        Failure(
            call_id="call_paris",
            tool="get_weather",
            kind="execution_error",
            reason="upstream unavailable",
        )
    ),
]
