"""A provider-neutral transcript: messages, tool calls and tool call outputs.

The transcript is a list of `TranscriptItem`s. An assistant message may carry
tool calls; each call must be answered by exactly one `ToolCallOutput` before
the next model request (a *reconciled* transcript). Provider adapters in
`durable_tools.providers` render it to their wire formats.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic_core import to_jsonable_python

from durable_tools.results import Failure, Ok, ToolCall, cancelled

__all__ = [
    "OPERATOR_NOTE",
    "SUMMARY_HEADING",
    "AssistantMessage",
    "ContextSummary",
    "ToolCallOutput",
    "TranscriptItem",
    "Usage",
    "UserMessage",
    "append_turn",
    "cancel_all_pending",
    "find_unanswered_calls",
    "is_reconciled",
    "to_tool_call_output",
]


OPERATOR_NOTE = "[Note from operator{name}, not from the user]"
"""How a model receives an operator's message (`UserMessage.as_model_text`):
this line (`{name}` is `" NAME"`, or `""` when unknown), a space, the text."""


def _drop_empty(dumped: Any, item: BaseModel, names: tuple[str, ...]) -> Any:
    """`dumped` without the fields `names` while they are empty.

    Items are digested and paged by their JSON (`transcript_digest.item_json`),
    and recorded histories hold items from before these fields existed: an
    item that leaves them empty keeps the JSON, and so the digest, it had.
    """
    if not isinstance(dumped, dict):
        return dumped
    fields = cast(dict[str, Any], dumped)
    for name in names:
        if not getattr(item, name):
            fields.pop(name, None)
    return fields


class UserMessage(BaseModel):
    """A message for the model: the user's words, or an operator's note.

    Attributes:
        text: The message text.
        sent_by: Who sent it, as the client said (the inbox sends the
            signed-in identity; cleaned by `handler_input.clean_sender`);
            `""`: not said (messages recorded before this field existed, the
            conversation's first message).
        operator: The message is an operator's note, not the user's words:
            models receive it as one (`as_model_text`). Default False.
    """

    model_config = ConfigDict(frozen=True)

    role: Literal["user"] = "user"
    text: str
    sent_by: str = ""
    operator: bool = False

    # No return annotation: pydantic would take it as the serialization schema
    # (the inbox's OpenAPI shows the model's own).
    @model_serializer(mode="wrap")
    def _without_empty(self, handler: SerializerFunctionWrapHandler):
        return _drop_empty(handler(self), self, ("sent_by", "operator"))

    def as_model_text(self) -> str:
        """The text a model receives: the user's text as it is, an operator's as a note.

        The one rendering every provider (`durable_tools.providers`) and the
        context window use, so a model can never take an operator's note for
        the user's words: `OPERATOR_NOTE` with the sender's name (square
        brackets in it become round ones), a space, then the text.
        """
        if not self.operator:
            return self.text
        who = self.sent_by.replace("[", "(").replace("]", ")")
        return f"{OPERATOR_NOTE.format(name=f' {who}' if who else '')} {self.text}"


class AssistantMessage(BaseModel):
    """One model turn: text and/or tool calls.

    Attributes:
        text: Text the model produced (may be empty when it only calls tools).
        tool_calls: The tool calls of this turn, in the model's order.
        provider_items: Provider-executed tool activity inside the turn (web
            search results, code execution output), kept verbatim so it can be
            sent back to the same provider.
        usage: Tokens the provider counted for this turn, when it reports them.
        stop_reason: Why the model stopped, normalized: `"end_turn"`,
            `"tool_calls"`, `"max_tokens"`, `"refusal"`, `"stop_sequence"`, or
            the provider's own value; `""` when unknown.
    """

    model_config = ConfigDict(frozen=True)

    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    provider_items: tuple[dict[str, Any], ...] = ()
    usage: Usage | None = None
    stop_reason: str = ""


class Usage(BaseModel):
    """Token counts of one model turn.

    Attributes:
        input_tokens: Tokens in the request (prompt, tools, transcript).
        output_tokens: Tokens the model generated.
        cached_input_tokens: Input tokens served from the provider's prompt
            cache (already included in `input_tokens`).
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        """The sum of two counts, field by field."""
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )


class ToolCallOutput(BaseModel):
    """The output of one tool call, shaped for the wire.

    Attributes:
        call_id: The call this answers.
        tool: The tool name of the call.
        content: The text the model reads: the JSON of an `Ok` value (strings
            as they are) or the JSON of a failure `{"error": kind, "reason": …}`.
        is_error: True for failures (Anthropic's `is_error`).
        failure_kind: The failure kind, `None` on success.
        sent_by: Who gave this output, for outputs a person's input made: who
            answered the question (interaction tools), resumed the pause,
            denied the call, or cancelled the conversation (its open calls);
            as the client said, cleaned. `""` for the rest (a tool's result,
            an expiry) and in outputs recorded before this field existed.
            Models do not receive it.
    """

    model_config = ConfigDict(frozen=True)

    role: Literal["tool"] = "tool"
    call_id: str
    tool: str
    content: str
    is_error: bool = False
    failure_kind: str | None = None
    sent_by: str = ""

    @model_serializer(mode="wrap")
    def _without_empty(self, handler: SerializerFunctionWrapHandler):
        return _drop_empty(handler(self), self, ("sent_by",))


SUMMARY_HEADING = "Summary of the earlier conversation (written for you; not shown to the user):"
"""The line a `ContextSummary` starts with when a model receives it."""


class ContextSummary(BaseModel):
    """A summary of the transcript's first items, written by a model for the model.

    Made by the `summarize` context strategy (`durable_tools.context`) and
    recorded once, as one item appended where the model turn that needed it
    starts; later turns send the summary in place of the items it covers
    instead of summarizing again. It is not part of the conversation's
    order of calls and outputs: it comes only after every earlier call was
    answered.

    Attributes:
        covers_upto: The summary stands for items `[0, covers_upto)` of the
            transcript (including any earlier summary among them).
        text: The summary.
        usage: Tokens the summarizing model call used, when reported; they
            count in the conversation's usage totals.
        model: The model that wrote it (`""`: the model of the turn it was
            made for).
    """

    model_config = ConfigDict(frozen=True)

    role: Literal["summary"] = "summary"
    covers_upto: int = Field(ge=0)
    text: str
    usage: Usage | None = None
    model: str = ""

    def as_user_text(self) -> str:
        """The text a model receives in place of the items it covers (a user message)."""
        return f"{SUMMARY_HEADING}\n{self.text}"


TranscriptItem = Annotated[
    UserMessage | AssistantMessage | ToolCallOutput | ContextSummary, Field(discriminator="role")
]
"""One transcript entry, discriminated by `role` (`user`, `assistant`, `tool`, `summary`)."""


def to_tool_call_output(result: Ok | Failure, *, sent_by: str = "") -> ToolCallOutput:
    """Convert a structured tool result into its wire-shaped output.

    This is the single conversion used everywhere (executor, durable loop,
    provider adapters), so every provider sees the same text for a result.

    Args:
        result: An `Ok` or a `Failure`.
        sent_by: Who gave it (`ToolCallOutput.sent_by`; default `""`).

    Returns:
        A `ToolCallOutput`: for `Ok`, `content` is the value itself when it is
        a string, else its compact JSON; for `Failure`, `content` is
        `{"error": kind, "reason": reason}` as JSON and `is_error` is True.
    """
    if isinstance(result, Ok):
        value = result.value
        content = (
            value
            if isinstance(value, str)
            else json.dumps(to_jsonable_python(value), ensure_ascii=False, separators=(",", ":"))
        )
        return ToolCallOutput(
            call_id=result.call_id, tool=result.tool, content=content, sent_by=sent_by
        )
    content = json.dumps({"error": result.kind, "reason": result.reason}, ensure_ascii=False)
    return ToolCallOutput(
        call_id=result.call_id,
        tool=result.tool,
        content=content,
        is_error=True,
        failure_kind=result.kind,
        sent_by=sent_by,
    )


def _answered_ids(history: Iterable[TranscriptItem]) -> set[str]:
    return {item.call_id for item in history if isinstance(item, ToolCallOutput)}


def find_unanswered_calls(history: Sequence[TranscriptItem]) -> list[ToolCall]:
    """List the tool calls in `history` that have no output yet.

    Args:
        history: The transcript.

    Returns:
        The unanswered calls, in transcript order.
    """
    answered = _answered_ids(history)
    return [
        call
        for item in history
        if isinstance(item, AssistantMessage)
        for call in item.tool_calls
        if call.call_id not in answered
    ]


def is_reconciled(history: Sequence[TranscriptItem]) -> bool:
    """Whether the transcript can be sent to a model as it is.

    That is: every tool call has exactly one output, every output answers a
    call, call ids are unique, and each output sits in the run of outputs right
    after the assistant message that made its call (before the next user or
    assistant message), the order OpenAI, Anthropic and Gemini all require.

    Args:
        history: The transcript.

    Returns:
        True when every call is answered, once, in its place.
    """
    calls: set[str] = set()
    answered: set[str] = set()
    open_calls: set[str] = set()  # calls of the latest assistant message
    for item in history:
        if isinstance(item, ToolCallOutput):
            if item.call_id not in open_calls or item.call_id in answered:
                return False
            answered.add(item.call_id)
            continue
        if open_calls - answered:
            return False  # a call left unanswered before the conversation moved on
        open_calls = set()
        if isinstance(item, AssistantMessage):
            for call in item.tool_calls:
                if call.call_id in calls:
                    return False
                calls.add(call.call_id)
                open_calls.add(call.call_id)
    return calls == answered


def cancel_all_pending(
    history: Sequence[TranscriptItem], reason: str = "cancelled before it started"
) -> list[TranscriptItem]:
    """Answer every unanswered call with a `cancelled` failure.

    Each synthesized output is placed right after the outputs already given for
    its turn, so the transcript stays in the order providers require (outputs
    follow their assistant message, before the next user message).

    Args:
        history: The transcript (not modified).
        reason: The reason recorded in each `cancelled` failure.

    Returns:
        A new, reconciled transcript.
    """
    answered = _answered_ids(history)
    result: list[TranscriptItem] = []
    pending: list[ToolCall] = []

    def flush() -> None:
        result.extend(to_tool_call_output(cancelled(call, reason)) for call in pending)
        pending.clear()

    for item in history:
        if not isinstance(item, ToolCallOutput):
            flush()
        result.append(item)
        if isinstance(item, AssistantMessage):
            pending.extend(c for c in item.tool_calls if c.call_id not in answered)
    flush()
    return result


def append_turn(
    history: Sequence[TranscriptItem],
    turn: AssistantMessage,
    outputs: Iterable[Ok | Failure | ToolCallOutput],
) -> list[TranscriptItem]:
    """Append a model turn and the outputs of its tool calls.

    Args:
        history: The transcript so far (not modified).
        turn: The assistant message of the turn.
        outputs: Results or wire outputs for the turn's calls, in any order;
            they are appended in the order of the turn's calls.

    Returns:
        The new transcript.

    Raises:
        ValueError: An output answers no call of `turn`, or answers one twice.
    """
    by_id: dict[str, ToolCallOutput] = {}
    for output in outputs:
        wire = output if isinstance(output, ToolCallOutput) else to_tool_call_output(output)
        if wire.call_id in by_id:
            raise ValueError(f"two outputs for tool call {wire.call_id!r}")
        by_id[wire.call_id] = wire
    ids = {c.call_id for c in turn.tool_calls}
    stray = sorted(set(by_id) - ids)
    if stray:
        raise ValueError(f"outputs answer no call of this turn: {stray}")
    ordered = [by_id[c.call_id] for c in turn.tool_calls if c.call_id in by_id]
    return [*history, turn, *ordered]
