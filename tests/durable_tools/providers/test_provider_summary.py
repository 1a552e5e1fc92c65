"""A `ContextSummary` reaching a request builder is sent as user text, in each API's shape."""

from __future__ import annotations

from durable_tools.providers import anthropic, openai_chat, openai_responses
from durable_tools.transcript import (
    SUMMARY_HEADING,
    AssistantMessage,
    ContextSummary,
    TranscriptItem,
    UserMessage,
)

TRANSCRIPT: list[TranscriptItem] = [
    UserMessage(text="one"),
    AssistantMessage(text="first"),
    ContextSummary(covers_upto=2, text="they said one"),
    UserMessage(text="two"),
]
TEXT = f"{SUMMARY_HEADING}\nthey said one"


def test_openai_chat() -> None:
    messages = openai_chat.render_transcript(TRANSCRIPT)["messages"]
    assert messages[2] == {"role": "user", "content": TEXT}


def test_openai_responses() -> None:
    items = openai_responses.render_transcript(TRANSCRIPT)["input"]
    assert items[2] == {"type": "message", "role": "user", "content": TEXT}


def test_anthropic() -> None:
    messages = anthropic.render_transcript(TRANSCRIPT)["messages"]
    assert messages[2] == {
        "role": "user",
        "content": [{"type": "text", "text": TEXT}, {"type": "text", "text": "two"}],
    }
