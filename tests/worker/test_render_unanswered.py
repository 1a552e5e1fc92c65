"""`run` and `status` print the messages a conversation ended without answering (issue 9)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from durable_tools.conversation import ConversationResult, ConversationStatus, SendMessage
from durable_tools.worker import cli
from durable_tools.worker.follow import Commands, Followed
from durable_tools.worker.render import render_status

LATE = [SendMessage(text="one more thing", sent_by="ana"), SendMessage(text="hello?")]


def _printed(monkeypatch: pytest.MonkeyPatch, followed: Followed) -> str:
    out = io.StringIO()
    monkeypatch.setattr(cli, "_out", Console(file=out, width=200, highlight=False))
    commands = Commands(
        address="localhost:7233",
        namespace="default",
        default_address="localhost:7233",
        default_namespace="default",
    )
    cli._print_followed(followed, "conv-1", commands)  # pyright: ignore[reportPrivateUsage]
    return out.getvalue()


def test_run_prints_the_unanswered_messages_after_the_final_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = ConversationResult(
        status="finished", output="closed", turns=1, transcript_items=3, unanswered_messages=LATE
    )
    text = _printed(monkeypatch, Followed(outcome="ended", result=result))
    assert "final answer: closed" in text
    assert "unanswered (sent after the model's last turn, never seen by it):" in text
    assert "'one more thing' (from ana)\n'hello?'" in text


def test_run_prints_nothing_more_when_every_message_was_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = ConversationResult(status="finished", output="closed", turns=1, transcript_items=3)
    assert "unanswered" not in _printed(monkeypatch, Followed(outcome="ended", result=result))


def test_status_shows_the_unanswered_messages() -> None:
    status = ConversationStatus(
        state="finished",
        agent="main",
        turns=1,
        runs=1,
        pending_approvals=0,
        pending_interactions=0,
        running_tools=0,
        transcript_items=3,
        reconciled=True,
        unanswered_messages=LATE,
    )
    out = io.StringIO()
    Console(file=out, width=200).print(render_status("conv-1", status))
    assert "unanswered messages" in out.getvalue()
    assert "'one more thing' (from ana)" in out.getvalue()
