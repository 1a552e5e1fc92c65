"""The transcript cache's bounds, its pages, and answers from older workflow code.

No server: the workflow's `transcript_page` is called directly (as in
tests/workflows/test_transcript_paging.py), and an older workflow is one
whose query ignores `known_digest` and answers a list.
"""

from __future__ import annotations

from durable_tools._wire import CarriedState, ConversationInput
from durable_tools.activities.transcript_cache import CachedTranscript, TranscriptCache
from durable_tools.conversation import AgentConfig, TranscriptPage, TranscriptSlice
from durable_tools.transcript import ToolCallOutput, TranscriptItem, UserMessage
from durable_tools.transcript_digest import EMPTY_DIGEST, PrefixDigests, extend_digest, item_json
from durable_tools.workflows.agent_workflow import AgentWorkflow


def _workflow(transcript: list[TranscriptItem]) -> AgentWorkflow:
    agent = AgentConfig(model="m", toolkit="t")
    state = CarriedState(agent="default", transcript=transcript)
    return AgentWorkflow(ConversationInput(agents={"default": agent}, agent="default", state=state))


def _items(n: int, size: int = 100) -> list[TranscriptItem]:
    return [
        ToolCallOutput(call_id=f"c{k}", tool="t", content=f"{k}:" + "y" * size) for k in range(n)
    ]


def _digest(items: list[TranscriptItem]) -> str:
    digest = EMPTY_DIGEST
    for item in items:
        digest = extend_digest(digest, item_json(item))
    return digest


async def test_pages_are_read_until_upto_and_digests_agree() -> None:
    transcript = _items(50, size=50_000)  # 2.5 MB: three pages of 1 MB
    wf = _workflow(transcript)
    cache = TranscriptCache()

    async def query(
        run_id: str | None, arg: TranscriptSlice
    ) -> TranscriptPage | list[TranscriptItem]:
        assert run_id is None
        return wf.transcript_page(arg) if arg.known_digest is not None else []

    assert await cache.read(query, "w", 50) == transcript
    assert (cache.stats.full_reads, cache.stats.queries) == (1, 3)
    wf._transcript.extend(_items(3))  # pyright: ignore[reportPrivateUsage]
    assert await cache.read(query, "w", 53) == wf.history()
    assert (cache.stats.hits, cache.stats.queries) == (1, 4)
    entry = cache.get("w")
    assert entry is not None and entry.digest == _digest(wf.history())


async def test_a_workflow_answering_lists_is_read_whole_and_not_cached() -> None:
    transcript = _items(5)
    cache = TranscriptCache()

    async def old_query(
        run_id: str | None, arg: TranscriptSlice
    ) -> TranscriptPage | list[TranscriptItem]:
        return transcript[arg.start : arg.upto][:2]  # pages of 2, digest ignored

    assert await cache.read(old_query, "w", 5) == transcript
    assert await cache.read(old_query, "w", 5) == transcript
    assert cache.stats.legacy_reads == 2 and len(cache) == 0


def test_the_workflow_answers_no_items_for_an_unknown_prefix() -> None:
    transcript = _items(4)
    wf = _workflow(transcript)
    page = wf.transcript_page(TranscriptSlice(start=2, upto=4, known_digest=_digest(_items(2, 7))))
    assert (page.matched, page.items, page.length) == (False, [], 4)
    page = wf.transcript_page(TranscriptSlice(start=9, upto=12, known_digest=EMPTY_DIGEST))
    assert (page.matched, page.items) == (False, [])
    page = wf.transcript_page(
        TranscriptSlice(start=2, upto=4, known_digest=_digest(transcript[:2]))
    )
    assert page.matched and page.items == transcript[2:] and page.digest == _digest(transcript)


def test_prefix_digests_start_over_when_the_transcript_is_replaced() -> None:
    memo = PrefixDigests()
    first = _items(3)
    assert memo.digest(first, 3) == _digest(first)
    other: list[TranscriptItem] = [UserMessage(text="x"), *_items(3)[1:]]
    assert memo.digest(other, 3) == _digest(other)


def test_the_cache_is_bounded_by_entries_and_bytes() -> None:
    cache = TranscriptCache(max_bytes=1000, max_entries=2)
    for conversation in "abc":
        cache.put(conversation, CachedTranscript((), EMPTY_DIGEST, 100, frozenset()))
    assert [cache.get(w) is not None for w in "abc"] == [False, True, True]
    cache.put("d", CachedTranscript((), EMPTY_DIGEST, 950, frozenset()))
    assert len(cache) == 1 and cache.bytes == 950
    cache.put("e", CachedTranscript((), EMPTY_DIGEST, 1001, frozenset()))  # over the bound
    assert cache.get("e") is None and cache.bytes == 950
