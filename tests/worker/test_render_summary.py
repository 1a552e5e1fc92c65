"""`durable-tools history` shows a context summary as its own row, marked as the model's."""

from __future__ import annotations

from rich.console import Console

from durable_tools.transcript import AssistantMessage, ContextSummary, UserMessage
from durable_tools.worker.render import render_transcript


def test_a_summary_row_names_what_it_covers() -> None:
    table = render_transcript(
        [
            UserMessage(text="hello"),
            AssistantMessage(text="hi"),
            UserMessage(text="next"),
            ContextSummary(covers_upto=2, text="they greeted [b]each other[/b]"),
            AssistantMessage(text="ok"),
        ]
    )
    console = Console(width=120, record=True)
    console.print(table)
    text = console.export_text()
    assert "summary" in text
    assert "of items 1-2 (for the model): they greeted [b]each other[/b]" in text
