"""Property: whatever the transcript, every context strategy sends a valid sequence.

Random transcripts interleave user messages, assistant messages with 0..3 tool
calls, their outputs (some in another order, some late, some missing, some
repeated, some for calls that do not exist) and context summaries covering
any prefix. Each random policy (a budget or none, any order of strategies,
a custom strategy that keeps every other item) is applied by the model
activity's `ContextWindow` with a summarizer that answers at once. For every
result:

* it is reconciled: each call followed by its one output, nothing else (a
  policy with no strategy sends a transcript with no summary as it is: the
  workflow reconciles it before every request);
* the OpenAI Chat, OpenAI Responses and Anthropic request builders render it
  into what their APIs require (each output right after the message with its
  call; Anthropic: a user message first, alternating roles with results);
* each output the model sees is the transcript's output for that call, whole
  or as the stub naming it, or a `cancelled` output for a call whose output
  is not in view;
* messages keep their transcript order;
* with a budget, it fits, or nothing more could be taken away.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_tools.activities.context_window import ContextWindow, Window
from durable_tools.context import (
    ContextPolicy,
    ContextRequest,
    ContextStrategy,
    CustomStrategy,
    ElideToolOutputs,
    KeepLastTurns,
    Summarize,
)
from durable_tools.context_view import View, base_view, estimate_tokens, keep_last_turns
from durable_tools.providers import anthropic, openai_chat, openai_responses
from durable_tools.results import ToolCall
from durable_tools.transcript import (
    SUMMARY_HEADING,
    AssistantMessage,
    ContextSummary,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
    is_reconciled,
)

TEXT = st.text(alphabet="abc xyz", max_size=60)


@st.composite
def transcripts(draw: st.DrawFn) -> list[TranscriptItem]:
    """Random transcripts: reconciled-looking ones and damaged ones."""
    items: list[TranscriptItem] = [UserMessage(text=draw(TEXT))]
    late: list[ToolCallOutput] = []
    next_id = 0
    for _ in range(draw(st.integers(0, 12))):
        step = draw(st.sampled_from(["user", "assistant", "assistant", "summary", "late"]))
        if step == "user":
            items.append(UserMessage(text=draw(TEXT)))
        elif step == "summary":
            items.append(
                ContextSummary(covers_upto=draw(st.integers(0, len(items) + 2)), text=draw(TEXT))
            )
        elif step == "late" and late:
            items.append(late.pop(draw(st.integers(0, len(late) - 1))))
        else:
            calls: list[ToolCall] = []
            for _ in range(draw(st.integers(0, 3))):
                reuse = next_id > 0 and draw(st.integers(0, 9)) == 0  # a repeated call id
                call_id = f"c{draw(st.integers(0, next_id - 1)) if reuse else next_id}"
                next_id += 0 if reuse else 1
                calls.append(ToolCall(call_id=call_id, name="t" + call_id, arguments="{}"))
            items.append(AssistantMessage(text=draw(TEXT), tool_calls=tuple(calls)))
            outputs = [
                ToolCallOutput(
                    call_id=c.call_id,
                    tool=c.name,
                    content="o" * draw(st.integers(0, 400)),
                    is_error=draw(st.booleans()),
                )
                for c in calls
            ]
            outputs = draw(st.permutations(outputs))
            for output in outputs:
                fate = draw(st.sampled_from(["here", "here", "here", "late", "lost", "twice"]))
                if fate == "late":
                    late.append(output)
                elif fate == "here":
                    items.append(output)
                elif fate == "twice":
                    items.extend([output, output])
            if draw(st.integers(0, 9)) == 0:  # an output of a call nobody made
                items.append(ToolCallOutput(call_id="stray", tool="tstray", content="x"))
    return items


def every_other(request: ContextRequest) -> Sequence[TranscriptItem]:
    return request.items[::2]


strategies: st.SearchStrategy[ContextStrategy] = st.one_of(
    st.builds(KeepLastTurns, turns=st.integers(1, 4)),
    st.builds(ElideToolOutputs, keep_last_turns=st.integers(0, 3), min_chars=st.integers(0, 100)),
    st.builds(Summarize, keep_last_turns=st.integers(0, 3)),
    st.just(CustomStrategy(name="every_other")),
)

policies = st.builds(
    ContextPolicy,
    budget_tokens=st.one_of(st.none(), st.integers(1, 600)),
    strategies=st.lists(strategies, max_size=3).map(tuple),
)


async def summarizer(strategy: Summarize, text: str) -> AssistantMessage:
    return AssistantMessage(text=f"summary of {len(text)} characters")


def prepare(policy: ContextPolicy, transcript: list[TranscriptItem]) -> Window:
    window = ContextWindow({"every_other": every_other})
    return asyncio.run(
        window.prepare(policy, transcript, instructions="be brief", tools=[], summarize=summarizer)
    )


def check_openai_chat(items: list[TranscriptItem]) -> None:
    messages = openai_chat.render_transcript(items)["messages"]
    expected: set[str] = set()  # calls of the last assistant message still unanswered
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in expected
            expected.remove(message["tool_call_id"])
            continue
        assert not expected, "a call without its tool message"
        if message["role"] == "assistant":
            expected = {c["id"] for c in message.get("tool_calls", [])}
    assert not expected


def check_openai_responses(items: list[TranscriptItem]) -> None:
    entries = openai_responses.render_transcript(items)["input"]
    open_calls: list[str] = []
    for entry in entries:
        if entry.get("type") == "function_call":
            open_calls.append(entry["call_id"])
        elif entry.get("type") == "function_call_output":
            assert entry["call_id"] in open_calls
            open_calls.remove(entry["call_id"])
        else:
            assert not open_calls or entry.get("role") == "assistant"
    assert not open_calls


def check_anthropic(items: list[TranscriptItem]) -> None:
    messages: list[dict[str, Any]] = anthropic.render_transcript(items)["messages"]
    if not messages:
        return
    assert messages[0]["role"] == "user"
    uses: set[str] = set()
    for message in messages:
        assert message["content"], "Anthropic rejects empty content"
        if message["role"] == "assistant":
            assert not uses, "tool_use blocks not answered by the next user message"
            uses = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
        else:
            results = {b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"}
            assert results == uses
            uses = set()
    assert not uses


def check_outputs(transcript: list[TranscriptItem], items: list[TranscriptItem]) -> None:
    recorded: dict[str, list[ToolCallOutput]] = {}
    for item in transcript:
        if isinstance(item, ToolCallOutput):
            recorded.setdefault(item.call_id, []).append(item)
    for item in items:
        if not isinstance(item, ToolCallOutput):
            continue
        if item.failure_kind == "cancelled" and item.content.find("no output is in") >= 0:
            continue  # its output is not in view (lost, or summarized away)
        # A repeated call id (the generator makes some) may have several outputs.
        assert any(
            item.tool == original.tool
            and (
                item.content == original.content
                or (
                    item.content.startswith("[output elided")
                    and f"call {item.call_id}," in item.content
                    and f"{len(original.content)} characters" in item.content
                )
            )
            for original in recorded.get(item.call_id, [])
        )


def check_order(transcript: list[TranscriptItem], items: list[TranscriptItem]) -> None:
    positions = {id(item): i for i, item in enumerate(transcript)}
    seen = [positions[id(i)] for i in items if isinstance(i, UserMessage) and id(i) in positions]
    assert seen == sorted(seen)


@given(transcripts(), policies)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_strategy_sends_a_valid_sequence(
    transcript: list[TranscriptItem], policy: ContextPolicy
) -> None:
    window = prepare(policy, transcript)
    items = window.items
    if not policy.strategies and not any(isinstance(i, ContextSummary) for i in transcript):
        # Nothing to do: the workflow's transcript (reconciled before every
        # request, DESIGN invariant 1) is sent as it is, without a scan.
        assert items is transcript
        return
    assert not any(isinstance(i, ContextSummary) for i in items)
    assert is_reconciled(items)
    check_openai_chat(items)
    check_openai_responses(items)
    check_anthropic(items)
    check_outputs(transcript, items)
    check_order(transcript, items)
    if window.summary is not None:
        assert 0 < window.summary.covers_upto <= len(transcript)
        # First, or right after the note saying a strategy dropped older items.
        assert UserMessage(text=window.summary.as_user_text()) in items[:2]


@given(transcripts(), st.integers(1, 400), st.integers(0, 100))
@settings(max_examples=200, deadline=None)
def test_a_budget_is_met_when_it_can_be(
    transcript: list[TranscriptItem], budget: int, min_chars: int
) -> None:
    policy = ContextPolicy(
        budget_tokens=budget,
        strategies=(ElideToolOutputs(keep_last_turns=0, min_chars=min_chars), KeepLastTurns()),
    )
    items = prepare(policy, transcript).items
    overhead = int(len("be brief") / 4) + 1
    if overhead + estimate_tokens(items) <= policy.limit_tokens:  # type: ignore[operator]
        return
    # Over the budget: only the last turn is left, and every output that could be elided is.
    assert sum(1 for i in items if isinstance(i, AssistantMessage)) <= 1
    for item in items:
        if isinstance(item, ToolCallOutput) and len(item.content) > min_chars:
            assert item.content.startswith(("[output elided", '{"error": "cancelled"'))


@given(transcripts())
@settings(max_examples=200, deadline=None)
def test_a_recorded_summary_is_reused_not_made_again(transcript: list[TranscriptItem]) -> None:
    policy = ContextPolicy(budget_tokens=50, strategies=(Summarize(keep_last_turns=1),))
    first = prepare(policy, transcript)
    if first.summary is None:
        return
    later = prepare(policy, [*transcript, first.summary])
    assert later.summary is None or later.summary.covers_upto > first.summary.covers_upto
    assert later.items[0].text.startswith(SUMMARY_HEADING)  # type: ignore[union-attr]


def test_without_a_policy_the_transcript_is_sent_as_it_is() -> None:
    transcript: list[TranscriptItem] = [
        UserMessage(text="hi"),
        AssistantMessage(tool_calls=(ToolCall(call_id="a", name="t", arguments="{}"),)),
        ToolCallOutput(call_id="a", tool="t", content=json.dumps({"x": 1})),
    ]
    assert prepare(ContextPolicy(), transcript).items is transcript


@given(transcripts(), st.integers(1, 4), st.one_of(st.none(), st.integers(1, 300)))
@settings(max_examples=300, deadline=None)
def test_looking_only_at_the_last_turns_sends_what_looking_at_all_would(
    transcript: list[TranscriptItem], turns: int, budget: int | None
) -> None:
    # The workflow's transcripts: every call answered right after its turn.
    reconciled = [i for i in base_view(transcript).items() if not isinstance(i, ContextSummary)]
    strategy = KeepLastTurns(turns=turns)
    policy = ContextPolicy(budget_tokens=budget, strategies=(strategy,))
    shortcut = prepare(policy, reconciled).items
    overhead = int(len("be brief") / 4) + 1
    view = base_view(reconciled)
    if budget is None or overhead + view.tokens(policy.chars_per_token) > policy.limit_tokens:  # type: ignore[operator]

        def fits(candidate: View) -> bool:
            limit = policy.limit_tokens
            assert limit is not None
            return overhead + candidate.tokens(policy.chars_per_token) <= limit

        view = keep_last_turns(view, strategy, fits if budget is not None else None)
    assert shortcut == view.items()
