"""The `scripted:FILE` model: turns from JSON / YAML, templates, one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from durable_tools.errors import ConfigurationError
from durable_tools.models.base import ModelRequest
from durable_tools.models.scripted import ScriptedFileModel, load_script
from durable_tools.results import Ok, failed
from durable_tools.testing import call
from durable_tools.transcript import (
    AssistantMessage,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
    to_tool_call_output,
)


def request(turn: int, transcript: list[TranscriptItem] | None = None) -> ModelRequest:
    return ModelRequest(
        model="scripted", transcript=transcript or [UserMessage(text="hi")], tools=[], turn=turn
    )


def output(call_id: str, value: Any, tool: str = "t") -> ToolCallOutput:
    return to_tool_call_output(Ok(call_id=call_id, tool=tool, value=value))


YAML_SCRIPT = """\
turns:
  - text: Let me check.
    tool_calls:
      - name: get_time
        arguments: {city: Paris}
        id: c1
      - name: get_weather
        arguments:
          city: Paris
  - text: "It is {{ c1.datetime }} in Paris, {{ t1c2.temp_c }} C ({{ t1c2.tags.1 }}); raw: {{ c1 }}"
"""


async def test_yaml_script_plays_turns_in_order_with_generated_ids(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(YAML_SCRIPT)
    model = ScriptedFileModel(path)

    first = await model(request(1))
    assert first.text == "Let me check."
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("c1", "get_time", {"city": "Paris"}),
        ("t1c2", "get_weather", {"city": "Paris"}),
    ]
    assert first.stop_reason == "tool_calls"

    transcript: list[TranscriptItem] = [
        UserMessage(text="hi"),
        first,
        output("c1", {"datetime": "2026-01-02T03:04:05+01:00"}),
        output("t1c2", {"temp_c": 21, "tags": ["mild", "dry"]}),
    ]
    second = await model(request(2, transcript))
    assert second.text == (
        "It is 2026-01-02T03:04:05+01:00 in Paris, 21 C (dry); "
        'raw: {"datetime":"2026-01-02T03:04:05+01:00"}'
    )
    assert second.tool_calls == ()
    assert (await model(request(3, transcript))).text == "done"


async def test_json_script_as_a_plain_list(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "echo", "arguments": {"text": "hello"}}]},
                {"text": "The tool said {{ t1c1 }}."},
            ]
        )
    )
    model = ScriptedFileModel(str(path))
    first = await model(request(1))
    assert first.tool_calls == (call("t1c1", "echo", text="hello"),)
    transcript: list[TranscriptItem] = [UserMessage(text="x"), first, output("t1c1", "hello")]
    assert (await model(request(2, transcript))).text == "The tool said hello."


async def test_unresolvable_references_render_as_missing(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "a", "id": "a1"}, {"name": "b", "id": "b1"}]},
                {"text": "{{a1.nope}} | {{ a1.x.9 }} | {{ b1 }} | {{ b1.reason }}"},
            ]
        )
    )
    model = ScriptedFileModel(path)
    first = await model(request(1))
    failure = to_tool_call_output(failed(first.tool_calls[1], "tool_error", "boom"))
    transcript: list[TranscriptItem] = [UserMessage(text="x"), first, output("a1", {"x": [1]})]
    transcript.append(failure)
    text = (await model(request(2, transcript))).text
    assert text == (
        '<a1.nope: missing> | <a1.x.9: missing> | {"error": "tool_error", "reason": "boom"} | boom'
    )


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("bad.json", '[\n  {"text": "a"},\n  {"text": }\n]', "invalid JSON at line 3"),
        ("bad.yaml", "turns:\n  - text: a\n  - text: [unclosed\n", "invalid YAML at line"),
        ("empty.yaml", "", "the file is empty"),
        ("shape.yaml", "just a string\n", "expected a list of turns"),
        ("noturns.json", '{"steps": []}', "turns: Field required"),
        ("noname.yaml", "- tool_calls:\n    - arguments: {}\n", "turn 1, tool call 1, name"),
        (
            "args.json",
            '[{"text": "a"}, {"tool_calls": [{"name": "x", "arguments": [1, 2]}]}]',
            "turn 2, tool call 1, arguments: Input should be a valid dictionary",
        ),
        ("extra.yaml", "- text: a\n  tool_call: []\n", "turn 1, tool_call: Extra inputs"),
        ("emptyturn.yaml", "- text: a\n- {}\n", "turn 2: a turn needs text or tool_calls"),
        (
            "dup.yaml",
            "- tool_calls: [{name: a, id: x}]\n- tool_calls: [{name: b, id: x}]\n",
            "turn 2, tool call 1: the id 'x' is used twice",
        ),
        (
            "ref.yaml",
            "- text: 'It is {{ c1 }}'\n  tool_calls: [{name: a, id: c1}]\n",
            "turn 1: {{ c1 }} names no tool call of an earlier turn",
        ),
    ],
)
def test_malformed_scripts_raise_one_line_naming_the_file(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(ConfigurationError) as info:
        ScriptedFileModel(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"script {path}:")
    assert expected in message


def test_unreadable_file_raises_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigurationError) as info:
        ScriptedFileModel(missing)
    assert str(info.value) == f"script {missing}: cannot read the file: No such file or directory"
    binary = _write(tmp_path, "bin.yaml", "")
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigurationError, match="cannot read the file") as info:
        ScriptedFileModel(binary)
    assert "\n" not in str(info.value)


def test_scripts_are_cached_per_file_and_reloaded_when_changed(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.yaml", "- text: one\n")
    first = load_script(path)
    assert load_script(path) is first
    path.write_text("- text: two\n- text: three\n")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10_000_000))
    assert [t.text for t in load_script(path)] == ["two", "three"]


async def test_a_script_with_only_text_answers_then_says_done(tmp_path: Path) -> None:
    model = ScriptedFileModel(_write(tmp_path, "t.yml", "- text: hello\n"))
    assert await model(request(1)) == AssistantMessage(text="hello", stop_reason="end_turn")
    assert (await model(request(2))).text == "done"
