"""The model activity's `ContextWindow`: what a summarizing model returns is untrusted."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from durable_tools.activities.context_window import SUMMARY_FAILED, ContextWindow, Window
from durable_tools.context import ContextPolicy, CustomStrategy, Summarize
from durable_tools.transcript import AssistantMessage, ContextSummary, TranscriptItem, UserMessage

TRANSCRIPT: list[TranscriptItem] = [
    UserMessage(text="a" * 400),
    AssistantMessage(text="b" * 400),
    UserMessage(text="c" * 400),
    AssistantMessage(text="d" * 400),
    UserMessage(text="e"),
]
POLICY = ContextPolicy(budget_tokens=100, strategies=(Summarize(keep_last_turns=1),))


async def prepare(summary_text: str) -> Window:
    async def summarize(strategy: Summarize, text: str) -> AssistantMessage:
        return AssistantMessage(text=summary_text)

    return await ContextWindow().prepare(
        POLICY, TRANSCRIPT, instructions="", tools=[], summarize=summarize
    )


async def test_a_summary_is_made_safe_to_record_and_bounded() -> None:
    window = await prepare("\ud800 lone surrogate " + "z" * 50_000)
    assert window.summary is not None
    assert window.summary.covers_upto == 2
    assert len(window.summary.text) == Summarize().max_summary_chars
    assert window.summary.text.startswith("\ufffd lone surrogate")
    ContextSummary.model_validate_json(window.summary.model_dump_json())  # it encodes


@pytest.mark.parametrize("text", ["", "  \n "])
async def test_an_empty_summary_fails_the_attempt_retryably(text: str) -> None:
    with pytest.raises(ApplicationError) as caught:
        await prepare(text)
    assert caught.value.type == SUMMARY_FAILED and not caught.value.non_retryable


async def test_an_unregistered_custom_strategy_is_a_configuration_error() -> None:
    policy = ContextPolicy(strategies=(CustomStrategy(name="gone"),))

    async def summarize(strategy: Summarize, text: str) -> AssistantMessage:
        raise AssertionError("not called")

    with pytest.raises(ApplicationError) as caught:
        await ContextWindow({"other": lambda r: r.items}).prepare(
            policy, TRANSCRIPT, instructions="", tools=[], summarize=summarize
        )
    assert caught.value.type == "ConfigurationError" and caught.value.non_retryable
    assert "registered: other" in str(caught.value)


async def test_only_new_items_are_looked_at_for_a_summary() -> None:
    window = ContextWindow()
    run = ("wf", "run")
    grown = list(TRANSCRIPT)
    seen = window._summary_at(run, grown)  # pyright: ignore[reportPrivateUsage]
    assert seen == -1
    grown.append(ContextSummary(covers_upto=2, text="s"))
    grown.append(AssistantMessage(text="f"))
    assert window._summary_at(run, grown) == 5  # pyright: ignore[reportPrivateUsage]
    # A transcript that changed other than by growing is looked at whole.
    other = [UserMessage(text="x"), ContextSummary(covers_upto=1, text="t")]
    assert window._summary_at(run, other) == 1  # pyright: ignore[reportPrivateUsage]
    # Items already seen are not looked at again: a summary put into the
    # prefix (which the workflow never does: it only appends) stays unseen.
    grown = [*other, UserMessage(text="y"), UserMessage(text="z")]
    assert window._summary_at(run, grown) == 1  # pyright: ignore[reportPrivateUsage]
    grown[2] = ContextSummary(covers_upto=0, text="planted")
    grown.append(UserMessage(text="w"))
    assert window._summary_at(run, grown) == 1  # pyright: ignore[reportPrivateUsage]
    assert ContextWindow()._summary_at(run, grown) == 2  # pyright: ignore[reportPrivateUsage]
