"""The transcript a run holds, as its queries and the model turn's delta read it (pure).

A run holds the conversation's items from index `base` on (older ones are in
earlier runs, `durable_tools.carry`): a `RunTranscript`, with what it
carries to the next run. `transcript_slice` and `transcript_page`
answer the `transcript_slice` query (a list for older callers, a
`TranscriptPage` for callers that name the digest they hold);
`transcript_delta` is what a model turn's request carries of the items since
the previous turn. Digests and sizes come from `PrefixDigests`, memoized per
item, so each costs what it returns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from durable_tools._wire import CarriedState, DeltaEntry, TranscriptDelta
    from durable_tools.carry import cut_text, tail_start
    from durable_tools.conversation import RunSpan, SendMessage, TranscriptPage, TranscriptSlice
    from durable_tools.events import MAX_EVENT_TEXT
    from durable_tools.handler_input import Undecodable, clean_sender, decode_input
    from durable_tools.transcript import (
        AssistantMessage,
        ToolCallOutput,
        TranscriptItem,
        UserMessage,
    )
    from durable_tools.transcript_digest import EMPTY_DIGEST, PrefixDigests
    from durable_tools.transcript_reader import QUERY_PAGE_BYTES

__all__ = [
    "DEFAULT_PAGE_BYTES",
    "MAX_DELTA_INLINE_BYTES",
    "RunTranscript",
    "delta_start",
    "transcript_delta",
    "transcript_page",
    "transcript_slice",
    "transcript_slice_request",
]

DEFAULT_PAGE_BYTES = QUERY_PAGE_BYTES
"""The page an undecodable `transcript_slice` argument gets: the size the client
pages by (`durable_tools.transcript_reader.QUERY_PAGE_BYTES`)."""

MAX_DELTA_INLINE_BYTES = 64 * 1024
"""A `TranscriptDelta` gives at most this many bytes of items whole (user
messages, outputs the workflow made); past it the model activity queries."""


def transcript_slice_request(args: Sequence[RawValue], base: int, length: int) -> TranscriptSlice:
    """The `transcript_slice` query's argument; the first page for one that does not decode."""
    request = decode_input(args, TranscriptSlice, workflow.payload_converter())
    if isinstance(request, Undecodable):
        return TranscriptSlice(start=base, upto=length, max_bytes=DEFAULT_PAGE_BYTES)
    return request


def transcript_slice(
    transcript: Sequence[TranscriptItem], base: int, request: TranscriptSlice
) -> list[TranscriptItem]:
    """Items `start` to `upto` (conversation-wide indices) of a run's, paged by `max_bytes`.

    None when `start` is before the run's `base` (those items are in
    earlier runs, which only a `TranscriptPage` names).
    """
    if request.start < base:
        return []
    items = list(transcript[request.start - base : request.upto - base])
    if request.max_bytes is not None:
        size = 0
        for n, item in enumerate(items):
            size += len(item.model_dump_json().encode())  # bytes, not characters
            if n and size > request.max_bytes:
                return items[:n]
    return items


def transcript_page(
    transcript: Sequence[TranscriptItem],
    memo: PrefixDigests,
    base: int,
    earlier: Sequence[RunSpan],
    request: TranscriptSlice,
) -> TranscriptPage:
    """Only what the caller lacks: the items after the prefix whose digest it holds.

    Items `start` to `upto` (conversation-wide indices, paged by
    `max_bytes`) when the caller's `known_digest` is the digest of the
    conversation's items `[0, start)` (or is `""`: unchecked), else none
    (`matched=False`). A `start` before the run's `base` gets none either,
    with the earlier runs that hold those items (`earlier`).
    """
    length = base + len(transcript)
    start = request.start - base
    if start < 0:
        return TranscriptPage(matched=False, length=length, base=base, earlier=list(earlier))
    if start > len(transcript):
        return TranscriptPage(matched=False, length=length, base=base)
    digest = memo.digest(transcript, start)
    if request.known_digest and digest != request.known_digest:
        return TranscriptPage(matched=False, digest=digest, length=length, base=base)
    end, size = start, 0
    stop = max(start, min(request.upto - base, len(transcript)))
    while end < stop:
        size += memo.size(transcript, end)
        if end > start and request.max_bytes is not None and size > request.max_bytes:
            break
        end += 1
    return TranscriptPage(
        matched=True,
        items=list(transcript[start:end]),
        digest=memo.digest(transcript, end),
        length=length,
        base=base,
    )


def transcript_delta(
    transcript: Sequence[TranscriptItem],
    memo: PrefixDigests,
    base: int,
    start: int | None,
    sources: Mapping[int, DeltaEntry],
) -> TranscriptDelta | None:
    """The items from `start` (an index into the run's items) on, by reference where possible.

    `sources[index]` names an item an activity returned (the worker holds
    it); other items are given whole. `None` when a delta would record much
    that history already holds (items given whole over
    `MAX_DELTA_INLINE_BYTES`) or there is none to give (`start` `None`, or
    past the end): the activity then queries.
    """
    end = len(transcript)
    if start is None or start > end:
        return None
    entries: list[DeltaEntry] = []
    inline = 0
    for index in range(start, end):
        source = sources.get(index)
        if source is None:
            inline += memo.size(transcript, index)
            if inline > MAX_DELTA_INLINE_BYTES:
                return None
            source = DeltaEntry(item=transcript[index])
        entries.append(source)
    return TranscriptDelta(
        start=base + start,  # conversation-wide, as the worker's cache
        start_digest=memo.digest(transcript, start),
        entries=entries,
        digest=memo.digest(transcript, end),
    )


def delta_start(state: CarriedState) -> int | None:
    """Where a run's first `TranscriptDelta` starts, as an index into its items.

    Where the previous run's next delta would have started, when the run
    holds that item (`CarriedState.delta_from`); with no carried items, 0;
    else `None` (the first turn reads by query).
    """
    if state.delta_from is not None and state.delta_from >= state.base:
        return state.delta_from - state.base
    return None if state.transcript else 0


class RunTranscript:
    """The conversation's items this run holds, from conversation-wide index `base` on.

    Args:
        state: The state the run starts from (carried, or a new conversation's).
    """

    def __init__(self, state: CarriedState) -> None:
        self.items: list[TranscriptItem] = list(state.transcript)
        self.base = state.base
        # The runs that hold the items before `base` (durable_tools.carry).
        self.earlier: list[RunSpan] = list(state.earlier)
        self.carried_needs_model = state.needs_model
        # Per tool, the calls and the outputs that were not errors in the
        # items before `base` (what live-change re-evaluations count from).
        self.prior_calls: Counter[str] = Counter(state.prior_calls)
        self.prior_ok: Counter[str] = Counter(state.prior_ok)
        self.carried_last_text = state.last_text
        # Digests of the items' prefixes (conversation-wide: seeded with the
        # digest of the items before `base`): a function of the items alone.
        self.memo = PrefixDigests(state.base_digest or EMPTY_DIGEST)
        # The delta of the next model turn starts at `delta_from` (an index
        # into this run's items; None: no delta, e.g. a carried transcript the
        # worker may not hold); items an activity returned are named by
        # `sources[index]`.
        self.delta_from = delta_start(state)
        self.sources: dict[int, DeltaEntry] = {}

    def length(self) -> int:
        """How many items the conversation's transcript has, over every run."""
        return self.base + len(self.items)

    def needs_model(self) -> bool:
        """Whether the last item is not the model's (a model turn is due)."""
        if not self.items:  # a run that carried no item: the last is before `base`
            return self.carried_needs_model
        return not isinstance(self.items[-1], AssistantMessage)

    def last_text(self) -> str:
        """The conversation's last assistant text (`""` when there is none)."""
        for item in reversed(self.items):
            if isinstance(item, AssistantMessage) and item.text:
                return item.text
        return self.carried_last_text

    def append(self, item: TranscriptItem, source: DeltaEntry | None = None) -> None:
        """Append an item; `source` names it where an activity returned it (the worker holds it)."""
        self.items.append(item)
        if source is not None:
            self.sources[len(self.items) - 1] = source

    def take_messages(self, inbox: list[SendMessage], event: Callable[..., None]) -> None:
        """Move the messages waiting in `inbox` into the transcript, each published as received.

        Each keeps its sender and whether it is an operator's note
        (`UserMessage.sent_by`, `operator`; empty ones leave the item's JSON
        as it was, so recorded histories keep their digests).
        """
        for message in inbox:
            sender = clean_sender(message.sent_by)  # carried from a run that did not clean it
            item = UserMessage(text=message.text, sent_by=sender, operator=message.operator)
            self.items.append(item)
            event(
                "message_received",
                text=message.text[:MAX_EVENT_TEXT],
                sent_by=sender or None,
                operator=True if message.operator else None,
            )
        inbox.clear()

    def delta(self) -> TranscriptDelta | None:
        """The items since the previous model turn (`transcript_delta`); the next starts here."""
        start, self.delta_from = self.delta_from, len(self.items)
        sources, self.sources = self.sources, {}
        return transcript_delta(self.items, self.memo, self.base, start, sources)

    def page(self, request: TranscriptSlice) -> TranscriptPage:
        """`transcript_page` of this run's items."""
        return transcript_page(self.items, self.memo, self.base, self.earlier, request)

    def slice(self, request: TranscriptSlice) -> list[TranscriptItem]:
        """`transcript_slice` of this run's items."""
        return transcript_slice(self.items, self.base, request)

    def query(self, args: Sequence[RawValue]) -> list[TranscriptItem] | TranscriptPage:
        """The `transcript_slice` query: a page with `known_digest`, else a list.

        An undecodable argument reads the first page (`transcript_slice_request`).
        """
        request = transcript_slice_request(args, self.base, self.length())
        if request.known_digest is not None:
            return self.page(request)
        return self.slice(request)

    def carried(self) -> dict[str, Any]:
        """The `CarriedState` fields of the whole transcript (see `bounded`)."""
        return {
            "transcript": self.items,
            "base": self.base,
            "base_digest": self.memo.digest(self.items, 0) if self.base else "",
            "earlier": self.earlier,
            "needs_model": self.needs_model(),
            "last_text": self.carried_last_text,
            "delta_from": None if self.delta_from is None else self.base + self.delta_from,
            "prior_calls": dict(self.prior_calls),
            "prior_ok": dict(self.prior_ok),
        }

    def bounded(
        self, state: CarriedState, *, carry_bytes: int, run_id: str, max_runs: int
    ) -> CarriedState:
        """`state` with only the transcript's tail (`durable_tools.carry.tail_start`).

        Args:
            state: The carried state with the run's whole transcript.
            carry_bytes: The tail's budget (`ConversationOptions.carry_transcript_bytes`).
            run_id: This run's id: the next run lists it among the earlier runs
                when it does not carry every item this run holds.
            max_runs: How many earlier runs a state lists (the newest).
        """
        transcript, memo = self.items, self.memo
        sizes = [memo.size(transcript, k) for k in range(len(transcript))]
        start = tail_start(transcript, sizes, carry_bytes)
        if start == 0:
            return state  # everything this run holds fits: the same earlier runs hold the rest
        tail = transcript[start:]
        last_text = self.last_text()
        has_text = any(isinstance(item, AssistantMessage) and item.text for item in tail)
        earlier = [*self.earlier, RunSpan(run_id=run_id, base=self.base)]
        calls, ok = tool_counts(transcript[:start])
        return state.model_copy(
            update={
                "prior_calls": dict(self.prior_calls + calls),
                "prior_ok": dict(self.prior_ok + ok),
                "transcript": tail,
                "base": self.base + start,
                "base_digest": memo.digest(transcript, start),
                "earlier": earlier[-max_runs:],
                "last_text": "" if has_text else cut_text(last_text),
            }
        )


def tool_counts(items: Sequence[TranscriptItem]) -> tuple[Counter[str], Counter[str]]:
    """Per tool name: the calls the model made in `items`, and their outputs that were not errors.

    What a policy rule's `history.calls` and `history.ran` count
    (`activities/call_policies.py`).
    """
    calls: Counter[str] = Counter()
    ok: Counter[str] = Counter()
    for item in items:
        if isinstance(item, AssistantMessage):
            calls.update(c.name for c in item.tool_calls)
        elif isinstance(item, ToolCallOutput) and not item.is_error:
            ok[item.tool] += 1
    return calls, ok
