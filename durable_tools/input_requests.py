"""Input a tool asks for mid-call: MCP input-required results as durable questions.

An MCP server at protocol 2026-07-28 may answer `tools/call` with an
*input-required* result: input requests (a form to fill, a URL to visit, a
sampling request) and an opaque `requestState`; the client retries the call
with `inputResponses` and that exact `requestState` (multi-round-trip
requests, MRTR). Here the tool activity does not answer them itself: its
tool raises `NeedsInput` with what the server asked (`InputRequired`), the
activity returns that to the loop, the loop asks a person (one question per
request, `InputQuestion`, shown in `pending`, the inbox and the events) and
retries the call in a new activity with the answers (`InputResume`). No
worker slot is held while a person decides.

`requestState` is opaque and may be secret: it travels only in the tool
activity's result and the next activity's input (workflow history, which a
codec encrypts when configured), never in `pending`, events, spans or logs.

The types here cross the activity boundary or the public protocol:

```
InputRequired ── tool activity result ──▶ loop: a question per request
InputQuestion ── PendingInteraction.input_request ──▶ clients, CLI, inbox
InputResume   ── next tool activity's input ──▶ ToolContext.resume
```
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from durable_tools.transcript import Usage

__all__ = [
    "ELICIT_ACTIONS",
    "MAX_INPUT_ROUNDS",
    "SAMPLE_ACTIVITY",
    "STATE_REJECTED",
    "ElicitAction",
    "InputAnswer",
    "InputKind",
    "InputProgress",
    "InputQuestion",
    "InputRequest",
    "InputRequired",
    "InputResume",
    "ListedRoot",
    "NeedsInput",
    "SampleRequest",
    "SampledMessage",
    "SampledReply",
    "SamplingAsk",
    "TaskAction",
    "question_digest",
    "sendable",
    "with_defaults",
]

ElicitAction = Literal["accept", "decline", "cancel"]
"""What a person did with a form (MCP `ElicitResult.action`)."""

InputKind = Literal["form", "url", "sampling"]
"""What an input request asks: a form to fill, a link to visit, a model completion."""

SAMPLE_ACTIVITY: Final[str] = "model.sample-v1"
"""The activity that answers an MCP sampling request with the conversation's model."""

ELICIT_ACTIONS: Final[tuple[ElicitAction, ...]] = ("accept", "decline", "cancel")

MAX_INPUT_ROUNDS: Final[int] = 10
"""Input-required rounds one call may take before it becomes Failure `input_rounds_exceeded`."""

STATE_REJECTED: Final[str] = "request_state_rejected"
"""Failure kind of a retry whose `requestState` the server refused (expired or invalid).

The loop restarts the call once (a fresh call, without responses); a second
refusal reaches the model as this `Failure`."""


class SampledMessage(BaseModel):
    """One message of a sampling request (text only).

    Attributes:
        role: `user` or `assistant`.
        text: The message's text (cleaned; the request's texts are bounded together).
    """

    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant"]
    text: str


class SamplingAsk(BaseModel):
    """An MCP sampling request (`sampling/createMessage`), as the worker checked it.

    Attributes:
        messages: The conversation to sample from (at least one; at most 64,
            their texts at most 64 Ki characters together).
        system_prompt: The server's system prompt (at most 8,000 characters),
            used instead of the agent's instructions, which stay private.
        max_tokens: Tokens the server asks for at most (1 to 32,768).
        temperature: The server's temperature, if any (0 to 2).
        stop_sequences: The server's stop sequences (at most 8 of 200 characters).
    """

    model_config = ConfigDict(frozen=True)

    messages: list[SampledMessage] = Field(min_length=1)
    system_prompt: str | None = None
    max_tokens: int = Field(default=1024, ge=1)
    temperature: float | None = None
    stop_sequences: list[str] = Field(default_factory=list[str])


class InputRequest(BaseModel):
    """One input request of an input-required result, as the worker checked it.

    Attributes:
        key: The server's key for the request (echoed in `inputResponses`).
        kind: `"form"` (form elicitation), `"url"` (URL elicitation: a link
            to visit) or `"sampling"` (a model completion).
        message: What the server asks, cleaned and at most 2,000 characters
            (for sampling, a preview of its last message).
        answer_schema: The requested schema (a flat JSON Schema object) a
            form's answer must satisfy (`{}` for other kinds).
        url: The link of a URL elicitation (`http`/`https`, checked).
        host: The link's host, shown beside it.
        sampling: The sampling request.
        approval: `"approve"`: a person approves the sampling request first,
            or (URL) only an approver of the tool may answer; `""`: none
            (the server's configuration, `McpServerConfig.sampling` / `.url_elicitation`).
    """

    model_config = ConfigDict(frozen=True)

    key: str
    kind: InputKind = "form"
    message: str
    answer_schema: dict[str, Any] = Field(default_factory=dict[str, Any])
    url: str | None = None
    host: str | None = None
    sampling: SamplingAsk | None = None
    approval: Literal["", "approve"] = ""


class ListedRoot(BaseModel):
    """One root the worker gives a server (`McpServerConfig.roots`, as a `file://` URI).

    Attributes:
        uri: The root's `file://` URI.
        name: Its name (the URI's last part).
    """

    model_config = ConfigDict(frozen=True)

    uri: str
    name: str | None = None


class InputAnswer(BaseModel):
    """A person's answer to one input request, the model's to a sampling request, or the roots.

    Attributes:
        action: `accept` (with `content`), `decline` or `cancel`.
        content: The form's values (`accept` only), as the person sent them
            and the requested schema accepted them; the activity checks that
            MCP can carry them. `None` for a URL elicitation.
        kind: What it answers (default `"form"`; `"roots"`: a roots request
            the worker answered from the server's configuration).
        sampled: The model's completion (`kind="sampling"`).
        roots: The roots sent (`kind="roots"`; empty when the server's
            configuration lists none).
    """

    action: ElicitAction = "accept"
    content: Any = None
    kind: InputKind | Literal["roots"] = "form"
    sampled: SampledReply | None = None
    roots: list[ListedRoot] | None = None

    @model_serializer(mode="wrap")
    def _without_roots(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if dumped.get("roots") is None:  # answers recorded before roots look as they did
            dumped.pop("roots", None)
        return dumped


class SampledReply(BaseModel):
    """The conversation's model's completion of a sampling request (`SAMPLE_ACTIVITY`'s result).

    Attributes:
        text: The completion's text (at most 64 Ki characters).
        model: The model's name (`AgentConfig.model`), reported to the server.
        stop_reason: `endTurn` or `maxTokens`.
        usage: Tokens the completion took, counted in the conversation's usage.
    """

    text: str
    model: str
    stop_reason: str = "endTurn"
    usage: Usage | None = None


class InputRequired(BaseModel):
    """A tool call's input-required result, returned by its activity to the loop.

    Attributes:
        server: The MCP server that asked.
        requests: Its input requests for a person or the model, in the
            server's order (empty only when the worker answered every
            request itself: `answered`; the tool activity then retries the
            call at once and never returns such a result).
        request_state: The opaque state to echo byte for byte (`None`: none
            was sent). Never shown, logged or published.
        answered: Answers the worker gave without anyone deciding, by
            request key: the server's configured roots for its roots
            requests (`roots/list`). The loop sends them with the round's
            other answers.
    """

    server: str
    requests: list[InputRequest] = Field(default_factory=list[InputRequest])
    request_state: str | None = Field(default=None, repr=False)
    answered: dict[str, InputAnswer] = Field(default_factory=dict[str, InputAnswer])

    @model_serializer(mode="wrap")
    def _without_answered(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if not dumped.get("answered"):  # results without roots look as they did
            dumped.pop("answered", None)
        return dumped


class SampleRequest(BaseModel):
    """The input of `SAMPLE_ACTIVITY`: which conversation's model answers what.

    Attributes:
        workflow_id: The conversation.
        run_id: Its run (the agent's configuration is read from it by name).
        agent_name: The agent whose model and settings answer.
        agent: Its configuration whole, when the run cannot be queried
            (`transcript_in_activity_input`); `None` otherwise.
        turn: The turn the call belongs to.
        call_id: The call whose server asked.
        server: The MCP server that asked.
        ask: The sampling request.
    """

    workflow_id: str
    run_id: str
    agent_name: str
    agent: Any = None
    turn: int = 0
    call_id: str
    server: str
    ask: SamplingAsk


class TaskAction(BaseModel):
    """What the next activity of a call that runs as a task does (`InputResume.task`).

    Attributes:
        action: `get` (poll with `tasks/get`), `update` (send
            `InputResume.responses` with `tasks/update`, then poll) or
            `cancel` (`tasks/cancel`).
        task_id: The server's task id.
    """

    model_config = ConfigDict(frozen=True)

    action: Literal["get", "update", "cancel"] = "get"
    task_id: str


class InputResume(BaseModel):
    """What a retried call sends: the answers and the exact `requestState`.

    Attributes:
        responses: The answers, by input request key.
        request_state: The state the server sent with the requests, unchanged.
        round: The round these answer (1-based).
        task: Set for a call that runs as a task (`durable_tools.tool_tasks`):
            the activity polls, updates or cancels that task instead of
            calling the tool again. Left out otherwise.
    """

    responses: dict[str, InputAnswer]
    request_state: str | None = Field(default=None, repr=False)
    round: int = 1
    task: TaskAction | None = None

    @model_serializer(mode="wrap")
    def _without_task(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if dumped.get("task") is None:
            dumped.pop("task", None)
        return dumped


class InputProgress(BaseModel):
    """Where a call that asked for input stands, carried when its wait moves to a new run.

    Attributes:
        asked: What the server asked this round (with its `requestState`).
        round: The round (1-based).
        index: The request being asked (0-based into `asked.requests`).
        answers: The answers of the round so far, by request key.
        restarted: The call was started again once after a refused `requestState`.
    """

    asked: InputRequired
    round: int = 1
    index: int = 0
    answers: dict[str, InputAnswer] = Field(default_factory=dict[str, InputAnswer])
    restarted: bool = False


class InputQuestion(BaseModel):
    """What a question of an input-required call asks (`PendingInteraction.input_request`).

    Attributes:
        server: The MCP server that asked.
        kind: `"form"`: answer with the form's values (the `answer_schema`),
            or decline or cancel it (`Conversations.answer(..., action=...)`).
            `"url"`: open `url`, then answer with no value once done (or
            decline / cancel). `"sampling"` (`PendingApproval.input_request`):
            approve or deny the server's use of the conversation's model.
        message: The server's message to the person (sampling: the request's
            messages, as `role: text` lines).
        url: The link to open (`"url"`).
        host: The link's host, to show beside it (`"url"`).
        key: The server's key for the request.
        round: The input round of the call (1-based).
        index: The request's position in its round (1-based), of `count`.
        count: The requests of the round, asked one after another.
    """

    model_config = ConfigDict(frozen=True)

    server: str
    kind: InputKind = "form"
    message: str
    url: str | None = None
    host: str | None = None
    key: str
    round: int = 1
    index: int = 1
    count: int = 1


class NeedsInput(Exception):  # noqa: N818 (control flow, not an error)
    """Raised by a tool's run: the call needs input before it can finish.

    The tool activity returns `required` to the loop instead of a result.

    Args:
        required: What the server asked.
    """

    def __init__(self, required: InputRequired) -> None:
        super().__init__(f"{required.server} asks for input ({len(required.requests)} requests)")
        self.required = required


def question_digest(arguments_hash: str, question: InputQuestion, schema: Any) -> str:
    """The digest an answer to one input question must carry.

    Binds the answer to the call (its `arguments_hash`) and to this very
    question: its round, key, position and what it showed (message and
    schema), so an answer to an earlier round or request never applies to a
    later one. SHA-256 over canonical JSON, hex.

    Args:
        arguments_hash: The call's digest (`PlannedCall.arguments_hash`).
        question: The question.
        schema: The answer schema shown with it.

    Returns:
        64 hex characters.
    """
    shown = {
        "call": arguments_hash,
        # None fields left out: a form's digest is what it was before URL questions.
        "question": question.model_dump(mode="json", exclude_none=True),
        "schema": schema,
    }
    text = json.dumps(shown, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def sendable(value: Any) -> bool:
    """Whether an answer can travel to a server: JSON, encodable as UTF-8.

    A lone surrogate (which JSON text may carry escaped) would fail the
    serialization of the retry's activity input, so such an answer is refused.

    Args:
        value: The answer's value (any JSON a client sent).

    Returns:
        True when `value` serializes to UTF-8 JSON.
    """
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return False
    return True


def _form_value(value: Any) -> bool:
    """Whether `value` is what an elicitation form field may hold (MCP: a primitive)."""
    if value is None or isinstance(value, str | bool | int | float):
        return not isinstance(value, float) or value == value and abs(value) != float("inf")
    return isinstance(value, list) and all(isinstance(v, str) for v in cast(list[Any], value))


def with_defaults(schema: Any, content: Mapping[str, Any] | None) -> dict[str, Any]:
    """An accepted form answer with the schema's defaults for the fields it leaves out.

    SEP-1034: a requested schema's properties may carry `default`; a client
    applies them to fields the answer omits. Only a default a form field
    can hold (a string, number, boolean, list of strings or null) is
    applied; the answer's own values always win. Pure: the loop applies it
    to a recorded answer, and a replay sends the same values.

    Args:
        schema: The requested schema (`{"type": "object", "properties": ...}`;
            anything else adds nothing).
        content: The answer's values (`None`: none given).

    Returns:
        A new dict: the answer's values, then the missing defaults.
    """
    values = dict(content or {})
    properties = (
        cast(Mapping[str, Any], schema).get("properties") if isinstance(schema, Mapping) else None
    )
    if not isinstance(properties, Mapping):
        return values
    for name, field in cast(Mapping[Any, Any], properties).items():
        if not isinstance(name, str) or name in values or not isinstance(field, Mapping):
            continue
        field = cast(Mapping[str, Any], field)
        if "default" in field and _form_value(field["default"]):
            values[name] = field["default"]
    return values
