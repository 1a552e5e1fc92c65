"""Whatever text a model sends, every call gets one output and the conversation goes on.

Provider JSON decoded by `json.loads` can hold unpaired UTF-16 surrogates
(`"\\ud800"`); before the model activity made its output safe, such a turn
could not be serialized and the activity was retried forever. A model
adapter registered on the worker plays the turns (dev server).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, assistant_texts, outputs_by_id, running

from durable_tools.conversation import AgentConfig
from durable_tools.models.base import ModelRequest
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, is_reconciled

TEN_KB_NAME = "n" * 10_240


class PerConversationModel:
    """Plays the first turn registered for the conversation, then answers "done"."""

    def __init__(self) -> None:
        self.first_turns: dict[str, AssistantMessage] = {}

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        if request.turn == 1:
            return self.first_turns[request.workflow_id]
        return AssistantMessage(text="done")


@pytest.fixture
async def unsafe(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[tuple[Harness, PerConversationModel]]:
    model = PerConversationModel()
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", models={"unsafe": model}) as h:
        yield h, model


async def _converse(
    h: Harness, model: PerConversationModel, turn: AssistantMessage, name: str
) -> list[Any]:
    wf = f"unsafe-{name}-{len(h.started)}"
    model.first_turns[wf] = turn
    h.started.append(wf)
    await h.conversations.start(
        wf, agent=AgentConfig(model="unsafe", toolkit="tests"), message="go"
    )
    return await h.wait_assistant_text(wf, "done")


async def test_lone_surrogates_nul_and_huge_names_become_failures_and_it_goes_on(
    unsafe: tuple[Harness, PerConversationModel],
) -> None:
    h, model = unsafe
    turn = AssistantMessage(
        text="thinking \ud800 aloud",
        tool_calls=(
            ToolCall(call_id="c1", name="get_weather\ud800", arguments='{"city": "Paris"}'),
            ToolCall(call_id="c2", name="get_weather", arguments='{"city": "Pa\udfffris"}'),
            ToolCall(call_id="c3", name=TEN_KB_NAME, arguments="{}"),
            ToolCall(call_id="c4\x00\ud83d", name="get_weather", arguments='{"city": "Oslo"}'),
            ToolCall(call_id="c5", name="get_weather", arguments='{"city": "Rome"}'),
            ToolCall(call_id="c6", name="get_weather", arguments='{"city": "\\ud800"}'),
            ToolCall(call_id="c7", name="get_we\x00ather", arguments='{"city": "\u202eRome"}'),
        ),
        provider_items=({"type": "reasoning", "summary": "\udc00"},),
    )
    items = await _converse(h, model, turn, "fixed")

    assert is_reconciled(items)
    (assistant,) = [i for i in items if isinstance(i, AssistantMessage) and i.tool_calls]
    assert assistant.text == "thinking \ufffd aloud"
    assert assistant.provider_items == ({"type": "reasoning", "summary": "\ufffd"},)
    ids = [c.call_id for c in assistant.tool_calls]
    assert ids == ["c1", "c2", "c3", "c4\\x00\\ud83d", "c5", "c6", "c7"]
    outputs = outputs_by_id(items)
    assert set(outputs) == set(ids)
    assert not outputs["c5"].is_error
    for call_id in ("c1", "c2", "c3", "c4\\x00\\ud83d", "c6", "c7"):
        assert outputs[call_id].failure_kind == "input_validation_error", outputs[call_id]
    reason = {k: json.loads(v.content)["reason"] for k, v in outputs.items() if v.is_error}
    assert "tool name contains an unpaired UTF-16 surrogate (U+D800)" in reason["c1"]
    assert "arguments contain an unpaired UTF-16 surrogate" in reason["c2"]
    assert "tool name is 10240 characters long, over the limit of 256" in reason["c3"]
    assert "call id contains the control character U+0000" in reason["c4\\x00\\ud83d"]
    assert "unpaired UTF-16 surrogate" in reason["c6"]  # escaped in JSON: the parser's check
    assert "tool name contains the control character U+0000" in reason["c7"]
    assert len(assistant.tool_calls[2].name) == 256
    assert assistant_texts(items)[-1] == "done"


# Any code point, unpaired surrogates and control characters included, with
# the troublesome ones drawn often.
TRICKY = st.sampled_from(["\ud800", "\udfff", "\x00", "\u200f", "\u202e", "\ufeff", '"', "\\"])
CHARS = st.one_of(st.characters(exclude_categories=()), TRICKY)
TEXT = st.text(CHARS, max_size=30)
NAMES = st.one_of(
    st.sampled_from(["get_weather", "echo", "boom"]),
    TEXT,
    st.builds(lambda t: t * 2_000, st.text(CHARS, min_size=1, max_size=6)),  # 2-12 KB
)
ARGUMENTS = st.one_of(
    TEXT,
    st.dictionaries(TEXT, TEXT, max_size=3).map(lambda d: json.dumps(d, ensure_ascii=False)),
    st.builds(lambda city: json.dumps({"city": city}), TEXT),
)
CALLS = st.lists(st.tuples(TEXT, NAMES, ARGUMENTS), min_size=1, max_size=4)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(text=TEXT, calls=CALLS)
async def test_arbitrary_unicode_from_the_model_never_stops_a_conversation(
    unsafe: tuple[Harness, PerConversationModel],
    text: str,
    calls: list[tuple[str, str, str]],
) -> None:
    h, model = unsafe
    turn = AssistantMessage(
        text=text,
        tool_calls=tuple(ToolCall(call_id=i, name=n, arguments=a) for i, n, a in calls),
    )
    items = await _converse(h, model, turn, "property")

    assert is_reconciled(items)
    recorded = [i for i in items if isinstance(i, AssistantMessage)]
    assert len(recorded) == 2 and recorded[-1].text == "done"
    assert len(recorded[0].tool_calls) == len(calls)
    outputs = outputs_by_id(items)  # asserts one output per call id
    assert {c.call_id for c in recorded[0].tool_calls} == set(outputs)
    for item in items:
        item.model_dump_json()  # all of it is valid text (raises on an unpaired surrogate)
