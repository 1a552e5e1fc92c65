"""Each context strategy end to end: what the scripted model receives, turn after turn.

A real conversation on the time-skipping server, with a `ScriptedModel` that
records every request: the strategies run in the model activity before each
request, the transcript (the `history` query) keeps every item, and a
summary is recorded once, as one `ContextSummary` item, then reused.
A context-length error from the model makes the activity summarize and try
once more; when that fails too, or the policy says `fail`, the conversation
waits in `model_failed` as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from temporalio.testing import WorkflowEnvironment

from durable_tools.constructors import tool
from durable_tools.context import (
    ContextPolicy,
    ContextRequest,
    CustomStrategy,
    ElideToolOutputs,
    KeepLastTurns,
    Summarize,
)
from durable_tools.conversation import AgentConfig, ModelFailure
from durable_tools.models.base import ModelRequest
from durable_tools.models.errors import ContextLengthExceeded
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call, last_user_text
from durable_tools.toolkit import Toolkit
from durable_tools.transcript import (
    SUMMARY_HEADING,
    AssistantMessage,
    ContextSummary,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
)


@tool
async def fetch(size: int) -> str:
    """Return `size` characters.

    Args:
        size: How many.
    """
    return "x" * size


KIT = Toolkit(fetch)


def scripted() -> ScriptedModel:
    """Summaries say how much they read; "fetch N" calls fetch once; else an echo."""
    fetched: set[str] = set()

    def script(request: ModelRequest) -> AssistantMessage:
        if request.purpose == "summary":
            return AssistantMessage(text=f"S({len(last_user_text(request))})")
        text = last_user_text(request)
        if text.startswith("fetch") and text not in fetched:
            fetched.add(text)
            size = int(text[6:])
            return AssistantMessage(tool_calls=(call(f"f{request.turn}", "fetch", size=size),))
        return AssistantMessage(text=f"re: {text[:10]}")

    return ScriptedModel(script)


def turns(model: ScriptedModel) -> list[ModelRequest]:
    return [r for r in model.requests if r.purpose == "turn"]


async def converse(env: AgentTestEnvironment, policy: ContextPolicy, *messages: str) -> str:
    agent: AgentConfig = env.agent.model_copy(update={"context": policy})
    chat = await env.start_conversation(messages[0], agent=agent)
    await env.wait_for_reply(chat)
    for message in messages[1:]:
        after = len(await env.history(chat))
        await env.conversations.send(chat, message)
        await env.wait_for_reply(chat, after=after + 1)
    return chat


async def model_failed(env: AgentTestEnvironment, chat: str) -> ModelFailure:
    for _ in range(400):  # 20 s
        status = await env.conversations.status(chat)
        if status.model_failed is not None:
            return status.model_failed
        await asyncio.sleep(0.05)
    raise AssertionError("the conversation never waited in model_failed")


def texts(items: Sequence[TranscriptItem]) -> list[str]:
    out: list[str] = []
    for item in items:
        if isinstance(item, UserMessage):
            out.append(f"user:{item.text if len(item.text) < 100 else item.text[:40]}")
        elif isinstance(item, AssistantMessage):
            out.append(f"assistant:{item.text or ','.join(c.call_id for c in item.tool_calls)}")
        elif isinstance(item, ToolCallOutput):
            out.append(f"tool:{item.call_id}:{item.content[:30]}")
        else:
            out.append(f"summary:{item.covers_upto}")
    return out


async def test_keep_last_turns_sends_the_last_turn_and_a_note(
    time_env: WorkflowEnvironment,
) -> None:
    model = scripted()
    async with AgentTestEnvironment.start(toolkit=KIT, model=model, env=time_env) as env:
        policy = ContextPolicy(strategies=(KeepLastTurns(turns=1),))
        chat = await converse(env, policy, "one", "two", "three")
        assert texts(turns(model)[-1].transcript) == [
            "user:[2 earlier item(s) of this conversation are not shown to save context.]",
            "user:two",
            "assistant:re: two",
            "user:three",
        ]
        assert len(await env.history(chat)) == 6  # the transcript keeps everything


async def test_old_tool_outputs_are_elided_to_a_stub(time_env: WorkflowEnvironment) -> None:
    model = scripted()
    async with AgentTestEnvironment.start(toolkit=KIT, model=model, env=time_env) as env:
        policy = ContextPolicy(strategies=(ElideToolOutputs(keep_last_turns=1, min_chars=100),))
        chat = await converse(env, policy, "fetch 500", "fetch 50", "thanks")
        seen = texts(turns(model)[-1].transcript)
        assert seen == [
            "user:fetch 500",
            "assistant:f1",
            "tool:f1:[output elided to save context",
            "assistant:re: fetch 500",
            "user:fetch 50",
            "assistant:f3",
            "tool:f3:" + "x" * 30,  # 50 characters: under min_chars, sent whole
            "assistant:re: fetch 50",
            "user:thanks",
        ]
        stub = turns(model)[-1].transcript[2]
        assert isinstance(stub, ToolCallOutput)
        assert stub.content == (
            "[output elided to save context: tool fetch, call f1, 500 characters]"
        )
        outputs = await env.tool_outputs(chat)
        assert outputs["f1"].content == "x" * 500  # elided only in what the model sees


async def test_summary_is_made_once_recorded_and_reused(time_env: WorkflowEnvironment) -> None:
    model = scripted()
    long = "L" * 400  # 100 estimated tokens each
    async with AgentTestEnvironment.start(toolkit=KIT, model=model, env=time_env) as env:
        policy = ContextPolicy(budget_tokens=480, strategies=(Summarize(keep_last_turns=1),))
        chat = await converse(env, policy, f"1{long}", f"2{long}", f"3{long}", "ok")
        summaries = [r for r in model.requests if r.purpose == "summary"]
        assert len(summaries) == 1
        assert summaries[0].tools == []
        assert summaries[0].instructions == Summarize().instructions
        (asked,) = summaries[0].transcript
        assert isinstance(asked, UserMessage) and asked.text.startswith(f"USER: 1{long[:20]}")
        history = await env.history(chat)
        recorded = [i for i in history if isinstance(i, ContextSummary)]
        assert recorded == [ContextSummary(covers_upto=2, text=f"S({len(asked.text)})")]
        # Turn 3 made it and sent it; turn 4 (the short "ok") reused it.
        third, fourth = turns(model)[2], turns(model)[3]
        for request in (third, fourth):
            first = request.transcript[0]
            assert isinstance(first, UserMessage) and first.text.startswith(SUMMARY_HEADING)
        assert texts(fourth.transcript)[1:] == [
            f"user:2{long[:39]}",
            f"assistant:re: 2{'L' * 9}",
            f"user:3{long[:39]}",
            f"assistant:re: 3{'L' * 9}",
            "user:ok",
        ]
        # Recorded right before the turn that needed it.
        index = history.index(recorded[0])
        assert isinstance(history[index - 1], UserMessage)
        assert isinstance(history[index + 1], AssistantMessage)


def only_user_messages(request: ContextRequest) -> Sequence[TranscriptItem]:
    return [i for i in request.items if isinstance(i, UserMessage)][-request.options["last"] :]


async def test_a_custom_strategy_registered_by_name(time_env: WorkflowEnvironment) -> None:
    model = scripted()
    async with AgentTestEnvironment.start(
        toolkit=KIT, model=model, env=time_env, context_strategies={"users": only_user_messages}
    ) as env:
        policy = ContextPolicy(strategies=(CustomStrategy(name="users", options={"last": 2}),))
        await converse(env, policy, "fetch 5", "two", "three")
        # The calls it dropped took their outputs with them.
        assert texts(turns(model)[-1].transcript) == [
            "user:[5 earlier item(s) of this conversation are not shown to save context.]",
            "user:two",
            "user:three",
        ]


def too_long_unless_summarized(request: ModelRequest) -> AssistantMessage:
    """A model whose window holds 4 items, or one summary and what follows it."""
    if request.purpose == "summary":
        return AssistantMessage(text="the user counted to two")
    first = request.transcript[0]
    summarized = isinstance(first, UserMessage) and first.text.startswith(SUMMARY_HEADING)
    if len(request.transcript) > 4 and not summarized:
        raise ContextLengthExceeded(
            "openai: HTTP 400 context_length_exceeded: This model's maximum context length "
            "is 4 items",
            {"provider": "openai", "status": 400, "code": "context_length_exceeded"},
        )
    return AssistantMessage(text=f"re: {last_user_text(request)}")


async def test_a_context_length_error_summarizes_and_the_turn_goes_on(
    time_env: WorkflowEnvironment,
) -> None:
    model = ScriptedModel(too_long_unless_summarized)
    async with AgentTestEnvironment.start(toolkit=KIT, model=model, env=time_env) as env:
        chat = await converse(env, ContextPolicy(), "one", "two", "three")
        status = await env.conversations.status(chat)
        assert status.model_failed is None and status.turns == 3
        history = await env.history(chat)
        assert texts(history) == [
            "user:one",
            "assistant:re: one",
            "user:two",
            "assistant:re: two",
            "user:three",
            "summary:2",  # all but the last turn: [two, re: two] and the new message stay
            "assistant:re: three",
        ]
        third = turns(model)[-1]
        assert texts(third.transcript)[1:] == ["user:two", "assistant:re: two", "user:three"]


async def test_the_policy_may_say_fail(time_env: WorkflowEnvironment) -> None:
    model = ScriptedModel(too_long_unless_summarized)
    async with AgentTestEnvironment.start(toolkit=KIT, model=model, env=time_env) as env:
        chat = await converse(env, ContextPolicy(on_context_error="fail"), "one", "two")
        await env.conversations.send(chat, "three")
        failure = await model_failed(env, chat)
        assert failure.type == "ContextLengthExceeded"
        assert not [r for r in model.requests if r.purpose == "summary"]


def always_too_long(request: ModelRequest) -> AssistantMessage:
    if request.purpose == "summary":
        return AssistantMessage(text="short")
    if request.turn >= 3:
        raise ContextLengthExceeded("prompt is too long: 9 tokens > 8 maximum", {"status": 400})
    return AssistantMessage(text="hello")


async def test_still_too_long_after_the_summary_waits_in_model_failed(
    time_env: WorkflowEnvironment,
) -> None:
    model = ScriptedModel(always_too_long)
    async with AgentTestEnvironment.start(toolkit=KIT, model=model, env=time_env) as env:
        chat = await converse(env, ContextPolicy(), "one", "two")
        await env.conversations.send(chat, "three")
        failure = await model_failed(env, chat)
        assert failure.type == "ContextLengthExceeded"
        # One summary, one retry: the turn was asked twice, then it stopped.
        assert len([r for r in model.requests if r.purpose == "summary"]) == 1
        assert len([r for r in turns(model) if r.turn == 3]) == 2
        assert not any(isinstance(i, ContextSummary) for i in await env.history(chat))
