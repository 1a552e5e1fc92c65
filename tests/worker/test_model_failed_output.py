"""`durable-tools run`, `status` and `pending` print a model failure's one-line message."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import typer
from rich.console import Console

from durable_tools.conversation import ConversationStatus, ModelFailure, PendingState
from durable_tools.worker import cli
from durable_tools.worker.follow import Commands, Followed
from durable_tools.worker.render import render_pending, render_status

FAILURE = ModelFailure(
    message="OpenAI answered HTTP 401 for model 'gpt': Incorrect API key — check OPENAI_API_KEY",
    type="ProviderAuthentication",
    turn=3,
    failed_at=datetime(2026, 11, 22, tzinfo=UTC),
)


def _text(renderable: object) -> str:
    console = Console(width=400, record=True)
    console.print(renderable)
    return console.export_text()


def test_status_shows_the_state_and_the_message() -> None:
    status = ConversationStatus(
        state="model_failed",
        agent="main",
        turns=2,
        runs=1,
        pending_approvals=0,
        pending_interactions=0,
        running_tools=0,
        transcript_items=5,
        reconciled=True,
        model_failed=FAILURE,
    )
    text = _text(render_status("conv-1", status))
    assert "model_failed" in text
    assert f"turn 3 (ProviderAuthentication): {FAILURE.message}" in text


def test_pending_shows_the_message_and_how_to_go_on() -> None:
    text = _text(render_pending(PendingState(model_failed=FAILURE)))
    assert "nothing pending" not in text
    assert FAILURE.message in text
    assert "durable-tools retry" in text


def test_run_prints_the_commands_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    commands = Commands(address="localhost:7233", namespace="default")
    with pytest.raises(typer.Exit) as exited:
        cli._print_followed(  # pyright: ignore[reportPrivateUsage]
            Followed(outcome="model_failed", failure=FAILURE), "conv-1", commands
        )
    assert exited.value.exit_code == 1
    out = capsys.readouterr().out
    assert "durable-tools retry conv-1" in out
    assert "durable-tools send conv-1 MESSAGE" in out
