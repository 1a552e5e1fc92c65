"""Google Gemini `generateContent` wire format (REST JSON, camelCase).

| durable-tools | Gemini |
|---|---|
| function descriptors (any kind but `provider`) | one `functionDeclarations` tool |
| descriptor (`provider`, `provider="google"`) | its `provider_config` (`{"googleSearch": {}}`) |
| `UserMessage` | a `user` content with a `text` part |
| `AssistantMessage` | a `model` content: provider parts, `text`, `functionCall` parts |
| `ToolCallOutput` | a `functionResponse` part `{name, id, response}` in a `user` content |
| instructions | the top-level `systemInstruction` |

A declaration is `{name, description, parametersJsonSchema}`: schemas go in
`parametersJsonSchema`, which takes JSON Schema as it is (`$ref`, `$defs`,
`anyOf` included), rather than `parameters`, which takes only Gemini's
OpenAPI-style subset. A tool output becomes `{"output": value}` on success
(the content decoded as JSON, or the text when it is not JSON) and the error
object `{"error": kind, "reason": …}` on failure, the keys Gemini's
documentation gives for function responses.

**Call ids.** Gemini may send a `functionCall` without an `id`.
`parse_response` then synthesizes `call_<h>_<k>`: `<h>` is the first 16 hex
digits of the SHA-256 of the whole response (canonical JSON; it includes
`responseId` and the growing token counts, so ids differ between turns even
when a model repeats a call), `<k>` the call's position in the turn. The same
response always yields the same ids. Ids are sent back on `functionCall` and
`functionResponse` parts.

**Thought signatures.** Gemini 3 rejects (HTTP 400) a request whose
`functionCall` parts lack the `thoughtSignature` they came with. When any part
of a response carries one, `parse_response` keeps *every* part verbatim in
`provider_items` (adding only the synthesized `id` to `functionCall` parts
that had none) and `render_transcript` replays them in their original order.
Otherwise `provider_items` holds the parts that are neither plain text nor
function calls (`thought` summaries, `executableCode`, `codeExecutionResult`,
…). They are Gemini's own shapes: send them back to Gemini only.

Example:
    ```python
    body = render_transcript(history, instructions=system)
    if tools := render_tools(descriptors):
        body["tools"] = tools
    turn = parse_response(response_json)
    ```
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from durable_tools.descriptor import ToolDescriptor
from durable_tools.providers._wire import (
    as_list,
    as_object,
    config_of,
    dump_arguments,
    json_or_text,
    load_object,
    parameters_of,
    require_str,
)
from durable_tools.results import ToolCall
from durable_tools.transcript import (
    AssistantMessage,
    ContextSummary,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
)

__all__ = ["PROVIDER", "parse_response", "render_tools", "render_transcript"]

PROVIDER = "google"
"""The `ToolDescriptor.provider` whose provider tools this API runs."""


def render_tools(descriptors: Iterable[ToolDescriptor]) -> list[dict[str, Any]]:
    """Render descriptors as Gemini `tools`.

    All function tools go into one `functionDeclarations` tool, first; each
    Google provider tool follows as its `provider_config` (`{name: {}}`, e.g.
    `{"google_search": {}}`, when the config is empty). Provider tools of other
    providers are left out; `strict` is not sent.

    Args:
        descriptors: The tools the model may call, in the order it sees them.

    Returns:
        The tool dicts; empty when there are none.
    """
    declarations: list[dict[str, Any]] = []
    provider: list[dict[str, Any]] = []
    for descriptor in descriptors:
        if descriptor.kind == "provider":
            if descriptor.provider == PROVIDER:
                provider.append(config_of(descriptor) or {descriptor.name: {}})
            continue
        declaration: dict[str, Any] = {"name": descriptor.name}
        if descriptor.description:
            declaration["description"] = descriptor.description
        declaration["parametersJsonSchema"] = parameters_of(descriptor)
        declarations.append(declaration)
    tools: list[dict[str, Any]] = [{"functionDeclarations": declarations}] if declarations else []
    return tools + provider


def _function_call_id(part: Mapping[str, Any]) -> Any:
    call = part.get("functionCall")
    return cast(dict[str, Any], call).get("id") if isinstance(call, dict) else None


def _is_plain_text(part: Mapping[str, Any]) -> bool:
    return isinstance(part.get("text"), str) and not part.get("thought")


def _model_parts(message: AssistantMessage) -> list[dict[str, Any]]:
    """The parts of one model turn: replayed provider parts first."""
    call_ids = {call.call_id for call in message.tool_calls}
    parts: list[dict[str, Any]] = []
    replayed_calls: set[str] = set()
    replayed_text = False
    for raw in message.provider_items:
        if "functionCall" in raw:
            call_id = _function_call_id(raw)
            if call_id not in call_ids or call_id in replayed_calls:
                continue  # tool_calls is the source of truth for what was asked
            replayed_calls.add(str(call_id))
        elif _is_plain_text(raw):
            replayed_text = True
        parts.append(copy.deepcopy(raw))
    if message.text and not replayed_text:
        parts.append({"text": message.text})
    for call in message.tool_calls:
        if call.call_id in replayed_calls:
            continue
        # `args` must be an object. A call whose arguments are not one was
        # answered with an input_validation_error; send it with `{}`.
        args = load_object(call.arguments) or {}
        parts.append({"functionCall": {"name": call.name, "args": args, "id": call.call_id}})
    return parts


def _function_response(output: ToolCallOutput) -> dict[str, Any]:
    value = json_or_text(output.content)
    response: dict[str, Any]
    if output.is_error and isinstance(value, dict) and "error" in value:
        response = cast(dict[str, Any], value)
    else:
        response = {"error" if output.is_error else "output": value}
    return {"functionResponse": {"name": output.tool, "id": output.call_id, "response": response}}


def render_transcript(
    transcript: Iterable[TranscriptItem], *, instructions: str | None = None
) -> dict[str, Any]:
    """Render a transcript as the `contents` (and `systemInstruction`) of a request.

    Items keep their transcript order. Consecutive tool outputs, and a user
    message right after them, share one `user` content, so the responses to
    a turn's parallel calls arrive together. A model turn with no text, calls
    or provider parts is left out (Gemini rejects empty contents).

    Args:
        transcript: The (reconciled) transcript.
        instructions: System instructions for `systemInstruction`; `None` or
            empty sends none.

    Returns:
        `{"contents": [...]}` plus `"systemInstruction"` when given, ready to
        merge into the request body.
    """
    contents: list[dict[str, Any]] = []

    def user_parts() -> list[dict[str, Any]]:
        if contents and contents[-1]["role"] == "user":
            parts: list[dict[str, Any]] = contents[-1]["parts"]
            return parts
        fresh: list[dict[str, Any]] = []
        contents.append({"role": "user", "parts": fresh})
        return fresh

    for item in transcript:
        if isinstance(item, ContextSummary):
            user_parts().append({"text": item.as_user_text()})
        elif isinstance(item, UserMessage):
            user_parts().append({"text": item.text})
        elif isinstance(item, AssistantMessage):
            parts = _model_parts(item)
            if parts:
                contents.append({"role": "model", "parts": parts})
        else:
            user_parts().append(_function_response(item))
    body: dict[str, Any] = {"contents": contents}
    if instructions:
        body["systemInstruction"] = {"parts": [{"text": instructions}]}
    return body


def _digest(response: Mapping[str, Any]) -> str:
    text = json.dumps(response, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


def parse_response(response: Mapping[str, Any]) -> AssistantMessage:
    """Read a `generateContent` response (`candidates[0].content.parts`) as one turn.

    Plain `text` parts are concatenated; each `functionCall` part becomes a
    `ToolCall` whose `arguments` is `json.dumps(args)` (`{}` when Gemini
    omits `args`) and whose id is Gemini's or a synthesized one (see the
    module docstring); other parts go to `provider_items`. A candidate with
    no content (e.g. `finishReason` `SAFETY` or `MALFORMED_FUNCTION_CALL`)
    gives an empty message.

    Args:
        response: The decoded JSON body of a `GenerateContentResponse`.

    Returns:
        An `AssistantMessage`.

    Raises:
        ValueError: There is no candidate (the message includes
            `promptFeedback.blockReason` when the prompt was blocked), a part
            is not an object, or a `functionCall` lacks `name`.
    """
    candidates = response.get("candidates")
    if not candidates:
        feedback = response.get("promptFeedback")
        reason = (
            cast(dict[str, Any], feedback).get("blockReason")
            if isinstance(feedback, dict)
            else None
        )
        blocked = f" (prompt blocked: {reason})" if reason else ""
        raise ValueError(f"generateContent response has no candidates{blocked}")
    candidate = as_object(as_list(candidates, "candidates")[0], "candidates[0]")
    content = candidate.get("content")
    if content is None:
        return AssistantMessage()
    content = as_object(content, "candidates[0].content")
    raw_parts = as_list(content.get("parts") or [], "candidates[0].content.parts")
    parts = [as_object(p, f"candidates[0].content.parts[{i}]") for i, p in enumerate(raw_parts)]
    keep_all = any("thoughtSignature" in part for part in parts)
    digest: str | None = None
    texts: list[str] = []
    calls: list[ToolCall] = []
    provider_items: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        where = f"candidates[0].content.parts[{i}]"
        if "functionCall" in part:
            function_call = as_object(part["functionCall"], f"{where}.functionCall")
            call_id = function_call.get("id")
            if not isinstance(call_id, str) or not call_id:
                digest = digest or _digest(response)
                call_id = f"call_{digest}_{len(calls)}"
                part = {**part, "functionCall": {**function_call, "id": call_id}}
            args = function_call.get("args")
            calls.append(
                ToolCall(
                    call_id=call_id,
                    name=require_str(function_call, "name", f"{where}.functionCall"),
                    arguments=dump_arguments({} if args is None else args),
                )
            )
            if keep_all:
                provider_items.append(part)
        elif _is_plain_text(part):
            texts.append(part["text"])
            if keep_all:
                provider_items.append(part)
        else:
            provider_items.append(part)
    return AssistantMessage(
        text="".join(texts), tool_calls=tuple(calls), provider_items=tuple(provider_items)
    )
