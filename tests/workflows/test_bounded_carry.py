"""Continue-as-new carries a bounded tail; the transcript is read back across runs.

No server: runs are `AgentWorkflow` instances built from the state the
previous one carries (`_bounded`, what `_carry` uses at continue-as-new), and
each run's `transcript_page` answers queries directly, as a replayed closed
run would (tests/workflows/test_long_conversation.py does the same on the
dev server).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_tools._wire import CarriedState, ConversationInput
from durable_tools.activities.transcript_cache import TranscriptCache
from durable_tools.carry import CARRY_LIMIT_BYTES, cut_text, tail_start
from durable_tools.conversation import (
    AgentConfig,
    ConversationOptions,
    RunSpan,
    TranscriptPage,
    TranscriptSlice,
)
from durable_tools.errors import TranscriptUnavailable
from durable_tools.results import ToolCall
from durable_tools.transcript import (
    AssistantMessage,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
    is_reconciled,
)
from durable_tools.transcript_digest import EMPTY_DIGEST, extend_digest, item_json
from durable_tools.transcript_reader import UNCHECKED, PrefixMismatch, read_pages
from durable_tools.workflows import agent_workflow
from durable_tools.workflows.agent_workflow import AgentWorkflow

AGENTS = {"default": AgentConfig(model="m", toolkit="t")}


def _digest(items: Sequence[TranscriptItem]) -> str:
    digest = EMPTY_DIGEST
    for item in items:
        digest = extend_digest(digest, item_json(item))
    return digest


def _turns(n: int, size: int, calls: int = 1) -> list[TranscriptItem]:
    """n turns: a user message, an assistant message with `calls` calls, their outputs."""
    items: list[TranscriptItem] = []
    for k in range(n):
        items.append(UserMessage(text=f"turn {k}"))
        ids = [f"c{k}-{j}" for j in range(calls)]
        items.append(AssistantMessage(tool_calls=tuple(ToolCall(call_id=i, name="t") for i in ids)))
        items.extend(ToolCallOutput(call_id=i, tool="t", content=f"{i}:" + "y" * size) for i in ids)
    items.append(AssistantMessage(text=f"answered {n} turns"))
    return items


def _run(state: CarriedState | None, options: ConversationOptions | None = None) -> AgentWorkflow:
    return AgentWorkflow(
        ConversationInput(
            agents=AGENTS,
            agent="default",
            options=options or ConversationOptions(),
            state=state or CarriedState(agent="default"),
        )
    )


def _continue(run: AgentWorkflow, run_id: str) -> CarriedState:
    """What `run` carries to its next run (the bounded `_carry`, outside a workflow)."""
    state = CarriedState(
        agent="default",
        transcript=run._transcript,  # pyright: ignore[reportPrivateUsage]
        base=run._base,  # pyright: ignore[reportPrivateUsage]
        base_digest=run._prefix_digests.digest(run._transcript, 0),  # pyright: ignore[reportPrivateUsage]
        earlier=run._earlier,  # pyright: ignore[reportPrivateUsage]
        needs_model=run._needs_model(),  # pyright: ignore[reportPrivateUsage]
        last_text=run._carried_last_text,  # pyright: ignore[reportPrivateUsage]
    )
    return run._bounded(state, run_id)  # pyright: ignore[reportPrivateUsage]


def _chain(
    items: Sequence[TranscriptItem], per_run: int, options: ConversationOptions | None = None
) -> dict[str | None, AgentWorkflow]:
    """Runs holding `items`, `per_run` new items each; the last one is `None` (current)."""
    runs: dict[str | None, AgentWorkflow] = {}
    run = _run(None, options)
    fed, k = 0, 0
    while True:
        run._transcript.extend(items[fed : fed + per_run])  # pyright: ignore[reportPrivateUsage]
        fed = min(len(items), fed + per_run)
        if fed >= len(items):
            runs[None] = run
            return runs
        k += 1
        runs[f"run-{k}"] = run
        run = _run(_continue(run, f"run-{k}"), options)


def _query(runs: dict[str | None, AgentWorkflow], asked: list[str | None] | None = None) -> Any:
    async def query(
        run_id: str | None, arg: TranscriptSlice
    ) -> TranscriptPage | list[TranscriptItem]:
        if asked is not None:
            asked.append(run_id)
        page = runs[run_id].transcript_page(arg)
        return TranscriptPage.model_validate_json(page.model_dump_json())  # as a query returns

    return query


async def _read_all(query: Any, start: int, upto: int, digest: str) -> list[TranscriptItem]:
    items: list[TranscriptItem] = []
    async for page in read_pages(query, start, upto, digest, page_bytes=50_000):
        items.extend(page.items)
    return items


# ------------------------------------------------------------------ tail


@st.composite
def _transcripts(draw: st.DrawFn) -> tuple[list[TranscriptItem], list[int], int]:
    items: list[TranscriptItem] = []
    for k in range(draw(st.integers(0, 8))):
        items.append(UserMessage(text=f"u{k}"))
        ids = [f"c{k}-{j}" for j in range(draw(st.integers(0, 3)))]
        items.append(
            AssistantMessage(
                text=draw(st.sampled_from(["", "t"])),
                tool_calls=tuple(ToolCall(call_id=i, name="t") for i in ids),
            )
        )
        answered = draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
        items.extend(ToolCallOutput(call_id=i, tool="t", content="r") for i in answered)
    sizes = [draw(st.integers(1, 500)) for _ in items]
    return items, sizes, draw(st.integers(0, 2000))


@given(_transcripts())
@settings(max_examples=400, deadline=None)
def test_the_tail_keeps_open_calls_fits_the_budget_and_starts_on_a_message(
    case: tuple[list[TranscriptItem], list[int], int],
) -> None:
    items, sizes, budget = case
    start = tail_start(items, sizes, budget)
    assert 0 <= start <= len(items)
    answered = {i.call_id for i in items if isinstance(i, ToolCallOutput)}
    opens = [
        k
        for k, item in enumerate(items)
        if isinstance(item, AssistantMessage)
        and any(c.call_id not in answered for c in item.tool_calls)
    ]
    # Every call without an output is carried, with everything after it.
    assert all(k >= start for k in opens)
    if start < len(items):
        assert not isinstance(items[start], ToolCallOutput)  # no orphaned output
    # The budget holds unless open calls force more in; and the tail is the
    # longest suffix within it, less the outputs cut from their call.
    fit = len(items)
    while fit > 0 and sum(sizes[fit - 1 :]) <= budget:
        fit -= 1
    if opens and opens[0] < fit:
        assert start == opens[0]
    else:
        assert sum(sizes[start:]) <= budget
        assert all(isinstance(item, ToolCallOutput) for item in items[fit:start])
    # An item over the budget is carried only when an open call forces it.
    for k in range(start, len(items)):
        assert sizes[k] <= budget or (opens and opens[0] <= k)


def test_an_item_over_the_budget_is_not_carried_and_the_loop_keeps_what_it_needs() -> None:
    items = _turns(3, size=10)
    items[-1:] = [
        UserMessage(text="big one"),
        AssistantMessage(text="calling", tool_calls=(ToolCall(call_id="big", name="t"),)),
        ToolCallOutput(call_id="big", tool="t", content="x" * 200_000),
    ]
    run = _run(CarriedState(agent="default", transcript=items))
    carried = _continue(run, "run-1")
    assert carried.transcript == [] and carried.base == len(items)
    assert carried.needs_model  # the model answers the big output next
    assert carried.last_text == "calling"
    assert carried.base_digest == _digest(items)
    assert carried.earlier == [RunSpan(run_id="run-1", base=0)]
    nxt = _run(carried)
    assert nxt._needs_model()  # pyright: ignore[reportPrivateUsage]
    assert nxt._last_text() == "calling"  # pyright: ignore[reportPrivateUsage]
    assert nxt.status().transcript_items == len(items)


def test_a_small_conversation_carries_everything_and_lists_no_earlier_run() -> None:
    items = _turns(3, size=10)
    carried = _continue(_run(CarriedState(agent="default", transcript=items)), "run-1")
    assert (carried.transcript, carried.base, carried.earlier) == (items, 0, [])


def test_the_carry_stays_under_its_limit_whatever_the_length() -> None:
    sizes: list[int] = []
    for turns in (10, 100, 400):
        items = _turns(turns, size=5_000, calls=2)
        run = _run(CarriedState(agent="default", transcript=items))
        carried = ConversationInput(agents=AGENTS, agent="default", state=_continue(run, "run-1"))
        payload = pydantic_data_converter.payload_converter.to_payloads([carried])[0]
        sizes.append(payload.ByteSize())
        assert is_reconciled(carried.state.transcript if carried.state else [])
    assert max(sizes) <= CARRY_LIMIT_BYTES
    assert sizes[2] < 1.05 * sizes[1]  # flat: 400 turns carry what 100 do


def test_cut_text_keeps_whole_characters() -> None:
    assert cut_text("界" * 10, 7) == "界界"
    assert cut_text("short", 100) == "short"


# -------------------------------------------------------- across runs


async def test_every_item_is_read_back_in_order_across_runs() -> None:
    items = _turns(60, size=3_000)
    options = ConversationOptions(carry_transcript_bytes=8_000)
    runs = _chain(items, per_run=25, options=options)
    assert len(runs) == 8
    current = runs[None]
    assert current.status().transcript_items == len(items)
    assert current._base > 0  # pyright: ignore[reportPrivateUsage]
    asked: list[str | None] = []
    got = await _read_all(_query(runs, asked), 0, len(items), EMPTY_DIGEST)
    assert got == items
    assert asked.count(None) >= 2  # the current run names the earlier ones, then serves its own
    # Each page goes to the newest run that holds it: no run is asked for
    # items a newer run holds, so runs are asked in order.
    order = [k for k in (int(r.split("-")[1]) if r else 99 for r in asked[1:])]
    assert order == sorted(order)
    # A page of the newest items asks the current run only: no replay.
    newest: list[str | None] = []
    base = current._base  # pyright: ignore[reportPrivateUsage]
    assert await _read_all(_query(runs, newest), base, len(items), UNCHECKED) == items[base:]
    assert set(newest) == {None}
    # A page in the middle asks the one earlier run that holds it.
    middle: list[str | None] = []
    assert await _read_all(_query(runs, middle), 60, 62, UNCHECKED) == items[60:62]
    assert len([r for r in middle if r is not None]) == 1
    # Unchecked reads (the client's) from any index give the same items.
    for start in (0, 7, 30, 99, len(items) - 1):
        assert await _read_all(_query(runs), start, len(items), UNCHECKED) == items[start:]


async def test_a_reader_walks_back_past_a_truncated_list_of_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_workflow, "MAX_EARLIER_RUNS", 2)
    items = _turns(40, size=1_000)
    runs = _chain(items, per_run=12, options=ConversationOptions(carry_transcript_bytes=3_000))
    assert len(runs) >= 6
    assert len(runs[None]._earlier) == 2  # pyright: ignore[reportPrivateUsage]
    assert await _read_all(_query(runs), 0, len(items), EMPTY_DIGEST) == items


async def test_a_wrong_digest_is_a_mismatch_and_a_missing_run_is_unavailable() -> None:
    items = _turns(20, size=1_000)
    runs = _chain(items, per_run=15, options=ConversationOptions(carry_transcript_bytes=3_000))
    base = runs[None]._base  # pyright: ignore[reportPrivateUsage]
    wrong = _digest([UserMessage(text="another"), *items[1:base]])
    with pytest.raises(PrefixMismatch):
        await _read_all(_query(runs), base, len(items), wrong)
    gone = {None: runs[None]}  # the earlier runs are past retention

    async def query(run_id: str | None, arg: TranscriptSlice) -> TranscriptPage:
        if run_id not in gone:
            # What a closed run that no longer exists answers, as far as
            # the reader goes: nothing it can use.
            return TranscriptPage(matched=False, base=10**9)
        return gone[run_id].transcript_page(arg)

    with pytest.raises(TranscriptUnavailable):
        await _read_all(query, 0, len(items), EMPTY_DIGEST)


async def test_runs_that_name_each_other_in_a_loop_end_the_read() -> None:
    """Hostile answers (a run naming itself as earlier) cannot keep a reader asking."""
    calls: list[str | None] = []

    async def query(run_id: str | None, arg: TranscriptSlice) -> TranscriptPage:
        calls.append(run_id)
        return TranscriptPage(
            matched=False,
            base=50,
            earlier=[RunSpan(run_id="a", base=0), RunSpan(run_id="b", base=40)],
        )

    with pytest.raises(TranscriptUnavailable):
        await _read_all(query, 0, 60, EMPTY_DIGEST)
    assert len(calls) < 10


async def test_the_cache_keeps_its_prefix_across_continue_as_new() -> None:
    items = _turns(30, size=2_000)
    options = ConversationOptions(carry_transcript_bytes=5_000)
    first = _chain(items[:40], per_run=40, options=options)[None]
    cache = TranscriptCache()
    asked: list[str | None] = []
    assert await cache.read(_query({None: first}, asked), "w", 40) == items[:40]
    # The run continues as new; the next turn reads only what the cache lacks
    # from the new run, whose base is past what was carried over.
    nxt = _run(_continue(first, "run-1"), options)
    nxt._transcript.extend(items[40:])  # pyright: ignore[reportPrivateUsage]
    assert nxt._base > 0  # pyright: ignore[reportPrivateUsage]
    runs = {None: nxt, "run-1": first}
    assert await cache.read(_query(runs, asked), "w", len(items)) == items
    assert (cache.stats.hits, cache.stats.full_reads, cache.stats.earlier_queries) == (1, 1, 0)
    # A worker with an empty cache reads the earlier run too.
    cold = TranscriptCache()
    assert await cold.read(_query(runs), "w", len(items)) == items
    assert cold.stats.full_reads == 1 and cold.stats.earlier_queries >= 1


def test_a_run_answers_by_conversation_wide_index() -> None:
    items = _turns(10, size=100)
    runs = _chain(items, per_run=20, options=ConversationOptions(carry_transcript_bytes=600))
    current = runs[None]
    base = current._base  # pyright: ignore[reportPrivateUsage]
    assert base > 0
    page = current.transcript_page(
        TranscriptSlice(start=0, upto=len(items), known_digest=UNCHECKED)
    )
    assert (page.matched, page.base, page.items) == (False, base, [])
    assert [s.run_id for s in page.earlier] == [r for r in runs if r is not None][
        -len(page.earlier) :
    ]
    page = current.transcript_page(
        TranscriptSlice(start=base, upto=len(items), known_digest=_digest(items[:base]))
    )
    assert page.matched and page.items == items[base:] and page.digest == _digest(items)
    # Callers that want lists (older clients) get none before the base.
    assert current.transcript_slice(TranscriptSlice(start=0, upto=len(items))) == []
    assert current.transcript_slice(TranscriptSlice(start=base, upto=len(items))) == items[base:]
    assert json.loads(current.status().model_dump_json())["transcript_items"] == len(items)


# ------------------------------------------------------- hostile edges

_RUNS = _chain(
    _turns(12, size=500), per_run=9, options=ConversationOptions(carry_transcript_bytes=1500)
)


@given(
    start=st.integers(-(2**40), 2**40),
    upto=st.integers(-(2**40), 2**40),
    max_bytes=st.none() | st.integers(-(2**31), 2**31),
    known_digest=st.none() | st.text(max_size=70) | st.sampled_from([UNCHECKED, EMPTY_DIGEST]),
)
@settings(max_examples=300, deadline=None)
def test_any_transcript_slice_is_answered_within_the_run(
    start: int, upto: int, max_bytes: int | None, known_digest: str | None
) -> None:
    run = _RUNS[None]
    base, held = run._base, run._transcript  # pyright: ignore[reportPrivateUsage]
    request = TranscriptSlice(
        start=start, upto=upto, max_bytes=max_bytes, known_digest=known_digest
    )
    if known_digest is None:
        items = run.transcript_slice(request)
        assert (
            start < base
            and items == []
            or items == held[start - base : max(0, upto - base)][: len(items)]
        )
        return
    page = run.transcript_page(request)
    assert page.base == base and page.length == base + len(held)
    if page.matched:
        assert base <= start <= base + len(held)
        assert page.items == held[start - base : start - base + len(page.items)]
    else:
        assert page.items == []
        assert (page.earlier != []) == (start < base)


@given(
    st.lists(
        st.builds(
            TranscriptPage,
            matched=st.booleans(),
            items=st.lists(st.builds(UserMessage, text=st.text(max_size=5)), max_size=3),
            digest=st.text(max_size=5),
            length=st.integers(-5, 50),
            base=st.integers(-5, 50),
            earlier=st.lists(
                st.builds(
                    RunSpan, run_id=st.sampled_from(["a", "b", "c"]), base=st.integers(0, 50)
                ),
                max_size=4,
            ),
        ),
        min_size=1,
        max_size=20,
    )
)
@settings(max_examples=300, deadline=None)
async def test_any_answers_end_a_read_with_items_or_a_known_error(
    answers: list[TranscriptPage],
) -> None:
    """Whatever the runs answer, a read ends: the items asked for, or one of its errors."""
    asked: list[str | None] = []

    async def query(run_id: str | None, arg: TranscriptSlice) -> TranscriptPage:
        asked.append(run_id)
        return answers[min(len(asked) - 1, len(answers) - 1)]

    try:
        got = await _read_all(query, 0, 30, EMPTY_DIGEST)
    except (PrefixMismatch, TranscriptUnavailable):
        pass
    else:
        assert len(got) == 30
    assert len(asked) <= 30 + len(answers) + 20
