"""Decode whatever a client sends to a signal, update or query of `AgentWorkflow`.

A client can send a handler anything: no input, several inputs, any payload
encoding (`binary/plain` and `binary/null` are what Temporal's default
converter sends for bytes and None; `json/protobuf`; an encoding nobody knows),
any JSON shape, strings no JSON encoder takes back (lone surrogates). The
workflow declares its input-taking handlers dynamic, so the SDK hands over the
raw payloads (`temporalio.common.RawValue`, which never fails to decode) and
`decode_input` turns them into the handler's pydantic model with the
workflow's own payload converter, or into an `Undecodable` holding the reason.
The workflow records that reason as a rejection (signals) or raises it from
the update's validator; nothing in this module raises, so no input can fail a
workflow task (DESIGN.md, invariant 7).

Everything here is deterministic (no clocks, no I/O), so it runs in workflow
code and replays the same way.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError
from temporalio.common import RawValue
from temporalio.converter import PayloadConverter

__all__ = [
    "MAX_REASON_CHARS",
    "MAX_SENDER_CHARS",
    "Undecodable",
    "clean_sender",
    "clean_text",
    "decode_input",
]

MAX_REASON_CHARS = 500
"""Longest reason (characters) an `Undecodable` holds; longer text is cut with `…`."""

MAX_SENDER_CHARS = 200
"""Longest identity (characters) kept of who sent a message, answer, resume, retry or cancel."""

# Control, format (bidi overrides, zero-width), surrogate and line/paragraph
# separator characters: a name holding one could break a line of a log, a
# page or the note a model reads (`UserMessage.as_model_text`).
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

_MAX_HINT_CHARS = 200
_MAX_ERRORS = 3

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Undecodable:
    """What a handler received when it cannot be decoded into the handler's model.

    Attributes:
        reason: Why, in one line (at most `MAX_REASON_CHARS` characters), e.g.
            `2 inputs; expected one Decision` or
            `payload encoding 'binary/plain' is not JSON`.
        call_id: The `call_id` the input named, when it was a JSON object with
            a string `call_id` (cleaned and cut to 200 characters), else `""`.
        sent_by: Its `decided_by` / `answered_by` / `sent_by` / `resumed_by`
            string, found the same way, else `""`.
    """

    reason: str
    call_id: str = ""
    sent_by: str = ""


def clean_text(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """Make text safe to keep in workflow state and to return from queries.

    Lone surrogates (which no UTF-8 encoder accepts, so a query result or a
    continue-as-new input holding one fails to serialize) become `?`, and text
    over `limit` characters is cut, ending with `…`.

    Args:
        text: Any Python string.
        limit: Most characters to keep (default `MAX_REASON_CHARS`).

    Returns:
        Text that encodes to UTF-8, at most `limit` characters long.
    """
    safe = text.encode("utf-8", errors="replace").decode("utf-8")
    return safe if len(safe) <= limit else safe[: max(limit - 1, 0)] + "…"


def clean_sender(sender: object) -> str:
    """Make a client-sent identity (`sent_by`, `answered_by`, ...) safe to keep and show.

    Whitespace at either end is dropped, every control, format, surrogate or
    line-separator character becomes `?`, and the result is cut to
    `MAX_SENDER_CHARS` (ending with `…`), so it encodes to UTF-8, stays on
    one line and never fails a workflow task, a query or a continue-as-new.

    Args:
        sender: What the client sent; anything but a string gives `""`.

    Returns:
        The cleaned identity (`""` for none).
    """
    if not isinstance(sender, str):
        return ""
    head = sender.strip()[: MAX_SENDER_CHARS + 1]  # cut first: cleaning is per character
    shown = "".join("?" if unicodedata.category(c) in _UNPRINTABLE else c for c in head)
    return clean_text(shown.strip(), MAX_SENDER_CHARS)


def _encoding(raw: RawValue) -> str:
    encoding = raw.payload.metadata.get("encoding")
    return encoding.decode("utf-8", errors="replace") if encoding else "<none>"


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in err['loc']) or '$'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)[:_MAX_ERRORS]
        ]
        return "; ".join(parts)
    return f"{type(exc).__name__}: {exc}"


def _hints(value: Any) -> tuple[str, str]:
    """The call id and sender an undecodable JSON object names, if any."""
    if not isinstance(value, dict):
        return "", ""
    fields = cast(dict[Any, Any], value)
    call_id = fields.get("call_id")
    sender = next(
        (
            fields[key]
            for key in ("decided_by", "answered_by", "sent_by", "resumed_by")
            if isinstance(fields.get(key), str)
        ),
        "",
    )
    return (
        clean_text(call_id, _MAX_HINT_CHARS) if isinstance(call_id, str) else "",
        clean_text(sender, _MAX_HINT_CHARS),
    )


_FAILED = object()


def _plain(raw: RawValue, converter: PayloadConverter) -> Any:
    """The payload decoded without a type (JSON as dicts), or `_FAILED`."""
    try:
        return converter.from_payload(raw.payload)
    except Exception:
        return _FAILED


def _undecodable(reason: str, raw: RawValue | None, converter: PayloadConverter) -> Undecodable:
    call_id, sender = _hints(_plain(raw, converter)) if raw is not None else ("", "")
    return Undecodable(reason=clean_text(reason), call_id=call_id, sent_by=sender)


def decode_input(
    args: Sequence[RawValue],
    model: type[M],
    converter: PayloadConverter,
    *,
    default: M | None = None,
) -> M | Undecodable:
    """Decode a handler's raw inputs into one `model`, never raising.

    The happy path is what the SDK did for a typed handler:
    `converter.from_payload(payload, model)` on the one payload. Anything else
    is an `Undecodable` with the reason.

    Args:
        args: The raw inputs as a dynamic handler receives them (any number).
        model: The pydantic model the handler takes (`Decision`, `Answer`,
            `SendMessage`, `Resume`, `TranscriptSlice`).
        converter: The workflow's payload converter
            (`workflow.payload_converter()`), so a custom converter decodes
            what its clients encode.
        default: Returned for no input or a `binary/null` or JSON `null` input, for
            models whose every field has a default (`Resume`); `None` makes
            those inputs undecodable.

    Returns:
        The decoded model, checked to encode back with `converter` (so it can
        sit in query results and continue-as-new input), or an `Undecodable`:
        no input, several inputs, an encoding the converter does not know or
        cannot decode (`json/protobuf` of an unknown message type, bytes
        that are not JSON), a value of another shape, or text that does not
        encode back (lone surrogates).
    """
    name = model.__name__
    if not args:
        return default if default is not None else Undecodable(f"no input; expected one {name}")
    if len(args) > 1:
        return _undecodable(f"{len(args)} inputs; expected one {name}", args[0], converter)
    raw = args[0]
    encoding = _encoding(raw)
    if default is not None and _plain(raw, converter) is None:
        return default  # `binary/null` or JSON `null`
    try:
        value: Any = converter.from_payload(raw.payload, model)
    except Exception as exc:
        return _undecodable(
            f"cannot decode the {encoding!r} payload as {name}: {_describe(exc)}", raw, converter
        )
    if not isinstance(value, model):
        # Converters return bytes for `binary/plain` and None for `binary/null`
        # whatever the type hint says; a custom one may return plain JSON.
        if isinstance(value, bytes | bytearray | memoryview | type(None)):
            return Undecodable(
                clean_text(f"payload encoding {encoding!r} is not JSON; expected one {name}")
            )
        try:
            # Through JSON, so strict models see what a JSON client sent
            # (a date as text, a list) and still refuse `"yes"` for a bool.
            value = model.model_validate_json(json.dumps(value))
        except Exception as exc:
            return _undecodable(f"not a {name}: {_describe(exc)}", raw, converter)
    try:
        converter.to_payload(value)
    except Exception as exc:
        return _undecodable(f"the {name} cannot be encoded back: {_describe(exc)}", raw, converter)
    return value
