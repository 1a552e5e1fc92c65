"""A model that plays its turns from a JSON or YAML script file (spec `scripted:FILE`).

The script is a list of turns, or a mapping `{"turns": [...]}`. Turn *n* of the
conversation (`ModelRequest.turn`, from 1) plays the script's *n*-th turn;
past the last one the model answers with the text `"done"` (like
`durable_tools.testing.ScriptedModel`). Each turn has:

* `text` (optional): the assistant text. `{{ ID }}` is replaced by the output
  content of the tool call with id `ID` (a JSON string value loses its
  quotes), and `{{ ID.field.sub }}` by a field of that output read as JSON
  (a number in the path indexes a list). A reference that cannot be resolved
  at run time (the tool failed, the field is missing) renders as
  `<ID.field: missing>`. Only ids of tool calls of *earlier* turns may be
  referenced; anything else is rejected when the script is loaded.
* `tool_calls` (optional): a list of `{name, arguments, id}`; `name` is
  required, `arguments` is a JSON object (default `{}`), `id` defaults to
  `t{turn}c{index}` (both from 1: `t1c1` is the first call of the first turn).

A turn needs text or tool calls. Example (YAML; the same shape in JSON):

```yaml
turns:
  - text: Let me check.
    tool_calls:
      - name: get_time
        arguments: {city: Paris}
        id: c1
  - text: "It is {{ c1.datetime }} in Paris ({{ c1 }})."
```

Files named `*.json` are parsed as JSON, anything else as YAML (which also
reads JSON). The script is read and validated when the model is built, so a
command line can reject a bad script before a conversation starts; each
problem raises `ConfigurationError` with one line naming the file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from durable_tools.errors import ConfigurationError
from durable_tools.models.base import ModelRequest
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, ToolCallOutput

__all__ = ["END_OF_SCRIPT_TEXT", "ScriptedFileModel", "load_script", "render_text"]

END_OF_SCRIPT_TEXT = "done"
"""The text of every turn past the end of the script."""

_TEMPLATE = re.compile(r"\{\{\s*([^{}\s.]+)((?:\.[^{}\s.]+)*)\s*\}\}")


class _ScriptCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict[str, Any])
    id: str | None = Field(default=None, min_length=1)


class _ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = ""
    tool_calls: list[_ScriptCall] = Field(default_factory=list[_ScriptCall])


class _Script(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    turns: list[_ScriptTurn]


@dataclass(frozen=True, kw_only=True)
class _Stamp:
    """What identifies one version of a file in the cache."""

    path: Path
    mtime_ns: int
    size: int


_cache: dict[Path, tuple[_Stamp, tuple[AssistantMessage, ...]]] = {}


def load_script(path: str | os.PathLike[str]) -> tuple[AssistantMessage, ...]:
    """Read, validate and build the turns of a script file.

    Results are cached per file (keyed by its resolved path, modification time
    and size), so building many models from one script reads it once.

    Args:
        path: The script file (`.json`: JSON; otherwise YAML).

    Returns:
        One `AssistantMessage` per script turn, with tool call ids filled in
        (templates in `text` are still unrendered).

    Raises:
        ConfigurationError: The file cannot be read, is not valid JSON / YAML
            (the message gives the line), does not have the script's shape,
            repeats a tool call id, or references a call id no earlier turn
            makes. The message is one line and starts with the file name.
    """
    file = Path(path).expanduser().resolve()
    try:
        st = file.stat()
        stamp = _Stamp(path=file, mtime_ns=st.st_mtime_ns, size=st.st_size)
        cached = _cache.get(file)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(f"script {path}: cannot read the file: {reason}") from None
    turns = _build(str(path), _parse(str(path), file.suffix.lower(), text))
    _cache[file] = (stamp, turns)
    return turns


def _parse(name: str, suffix: str, text: str) -> Any:
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"script {name}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "unreadable YAML"
        raise ConfigurationError(f"script {name}: invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"script {name}: invalid YAML: {exc}") from None


def _build(name: str, data: Any) -> tuple[AssistantMessage, ...]:
    if data is None:
        raise ConfigurationError(f"script {name}: the file is empty; expected a list of turns")
    try:
        script = _Script.model_validate({"turns": data} if isinstance(data, list) else data)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = exc.error_count() - 1
        extra = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise ConfigurationError(
            f"script {name}: {_location(first['loc'])}: {first['msg']}{extra}; "
            "expected a list of turns (or {turns: [...]}), each with optional `text` "
            "and `tool_calls: [{name, arguments: {...}, id?}]`"
        ) from None
    seen: set[str] = set()
    turns: list[AssistantMessage] = []
    for t, turn in enumerate(script.turns, start=1):
        if not turn.text and not turn.tool_calls:
            raise ConfigurationError(f"script {name}: turn {t}: a turn needs text or tool_calls")
        for match in _TEMPLATE.finditer(turn.text):
            if match.group(1) not in seen:
                raise ConfigurationError(
                    f"script {name}: turn {t}: {match.group(0)} names no tool call of an "
                    f"earlier turn (known ids: {', '.join(sorted(seen)) or 'none'})"
                )
        calls: list[ToolCall] = []
        for c, spec in enumerate(turn.tool_calls, start=1):
            call_id = spec.id or f"t{t}c{c}"
            if call_id in seen:
                raise ConfigurationError(
                    f"script {name}: turn {t}, tool call {c}: the id {call_id!r} is used twice"
                )
            seen.add(call_id)
            calls.append(
                ToolCall(call_id=call_id, name=spec.name, arguments=json.dumps(spec.arguments))
            )
        turns.append(AssistantMessage(text=turn.text, tool_calls=tuple(calls)))
    return tuple(turns)


def _location(loc: tuple[int | str, ...]) -> str:
    """`("turns", 1, "tool_calls", 0, "name")` → `turn 2, tool call 1, name`."""
    parts: list[str] = []
    i = 0
    while i < len(loc):
        key = loc[i]
        nxt = loc[i + 1] if i + 1 < len(loc) else None
        if key in ("turns", "tool_calls") and isinstance(nxt, int):
            parts.append(f"{'turn' if key == 'turns' else 'tool call'} {nxt + 1}")
            i += 2
            continue
        parts.append(str(key))
        i += 1
    return ", ".join(parts) or "top level"


def render_text(text: str, outputs: dict[str, ToolCallOutput]) -> str:
    """Replace the `{{ ID }}` / `{{ ID.field }}` references of a script turn.

    Args:
        text: The turn's text.
        outputs: Tool call outputs of the conversation by call id.

    Returns:
        The text with each reference replaced (see the module docstring).
    """

    def replace(match: re.Match[str]) -> str:
        call_id, path = match.group(1), match.group(2)
        ref = call_id + path
        output = outputs.get(call_id)
        if output is None:
            return f"<{ref}: missing>"
        if not path:
            return _unquote(output.content)
        try:
            value: Any = json.loads(output.content)
        except ValueError:
            return f"<{ref}: missing>"
        for key in path[1:].split("."):
            if isinstance(value, dict) and key in value:
                value = cast(dict[str, Any], value)[key]
            elif isinstance(value, list) and key.isdigit():
                items = cast(list[Any], value)
                if int(key) >= len(items):
                    return f"<{ref}: missing>"
                value = items[int(key)]
            else:
                return f"<{ref}: missing>"
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return _TEMPLATE.sub(replace, text)


def _unquote(content: str) -> str:
    if content.startswith('"'):
        try:
            value = json.loads(content)
        except ValueError:
            return content
        if isinstance(value, str):
            return value
    return content


class ScriptedFileModel:
    """A model whose turns come from a script file (see the module docstring).

    Args:
        path: The script file; a relative path is relative to the worker's
            working directory.

    Raises:
        ConfigurationError: The script cannot be read or is malformed (raised
            here, when the model is built).

    Example:
        ```python
        model = ScriptedFileModel("demo/weather.yaml")
        worker_models = {"demo": model}
        ```
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.turns = load_script(path)

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Play the script turn numbered `request.turn` (or `"done"` past the end)."""
        index = request.turn - 1
        if not 0 <= index < len(self.turns):
            return AssistantMessage(text=END_OF_SCRIPT_TEXT, stop_reason="end_turn")
        turn = self.turns[index]
        outputs = {i.call_id: i for i in request.transcript if isinstance(i, ToolCallOutput)}
        stop_reason = "tool_calls" if turn.tool_calls else "end_turn"
        return turn.model_copy(
            update={"text": render_text(turn.text, outputs), "stop_reason": stop_reason}
        )
