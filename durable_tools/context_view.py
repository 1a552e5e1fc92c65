"""The model's view of a transcript: the strategies of a `ContextPolicy`, as pure functions.

A `View` is the list of items the model will receive, each an `Entry` that
remembers where in the transcript it comes from (so a summary can say which
items it covers). `base_view` starts it (the latest `ContextSummary` in place
of what it covers, reconciled); `keep_last_turns`, `elide_tool_outputs` and
`plan_summary` / `with_summary` change it; `reconcile` keeps every call with
its one output whatever a strategy did. They look at the last turns where
they can, so a request's cost follows the view's size, not the transcript's
(see docs/context.md, "Cost per turn").

Pure Python, no I/O; run by the model activity (`activities/context_window.py`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from durable_tools.context import ElideToolOutputs, KeepLastTurns, Summarize
from durable_tools.results import ToolCall, cancelled
from durable_tools.transcript import (
    AssistantMessage,
    ContextSummary,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
    to_tool_call_output,
)

__all__ = [
    "ITEM_OVERHEAD_TOKENS",
    "Entry",
    "SummaryPlan",
    "View",
    "base_view",
    "elide_tool_outputs",
    "estimate_tokens",
    "item_chars",
    "keep_last_turns",
    "latest_summary",
    "plan_summary",
    "reconcile",
    "summary_input",
    "tail_start",
    "with_summary",
]

ITEM_OVERHEAD_TOKENS: Final[int] = 4
"""Tokens counted per item on top of its text (role markers, ids)."""

_OMITTED = "[{n} earlier item(s) of this conversation are not shown to save context.]"
_ELIDED = "[output elided to save context: tool {tool}, call {call_id}, {size} characters]"
_MISSING_OUTPUT = "no output is in the model's context for this call"


class Entry:
    """One item of a view and where it comes from.

    Args:
        item: What the model receives.
        index: The item's position in the transcript; `None` for an item the
            view made (a summary's message, a note, a synthesized output).

    Attributes:
        chars: `item_chars(item)`, computed once.
    """

    __slots__ = ("chars", "index", "item")

    def __init__(self, item: UserMessage | AssistantMessage | ToolCallOutput, index: int | None):
        self.item = item
        self.index = index
        self.chars = item_chars(item)


class View:
    """What the model receives, being built.

    Args:
        entries: The items, reconciled (the view keeps the list).
        summary: The summary the view starts with (recorded, or made in this
            request), or `None`.
        omitted: How many transcript items are not in the view and not
            covered by the summary (dropped by a strategy).

    Attributes:
        chars: The entries' characters (kept up to date by `replace`).
    """

    def __init__(
        self, entries: list[Entry], summary: ContextSummary | None = None, omitted: int = 0
    ) -> None:
        self.entries = entries
        self.summary = summary
        self.omitted = omitted
        self.chars = sum(e.chars for e in entries)

    def replace(self, position: int, entry: Entry) -> None:
        """Put `entry` at `position`, keeping `chars` up to date."""
        self.chars += entry.chars - self.entries[position].chars
        self.entries[position] = entry

    def _note(self) -> str | None:
        return _OMITTED.format(n=self.omitted) if self.omitted else None

    def tokens(self, chars_per_token: float) -> int:
        """`estimate_tokens(self.items(), chars_per_token)`, without building the items."""
        note = self._note()
        chars = self.chars + (len(note) if note else 0)
        count = len(self.entries) + (1 if note else 0)
        return math.ceil(chars / chars_per_token) + ITEM_OVERHEAD_TOKENS * count

    def items(self) -> list[TranscriptItem]:
        """The items in order; when older items were dropped, a note saying so first."""
        items: list[TranscriptItem] = [e.item for e in self.entries]
        note = self._note()
        if note:
            items.insert(0, UserMessage(text=note))
        return items


def item_chars(item: TranscriptItem) -> int:
    """Characters of an item's content: text, call names and arguments, output."""
    if isinstance(item, UserMessage):
        return len(item.as_model_text())
    if isinstance(item, ContextSummary):
        return len(item.as_user_text())
    if isinstance(item, ToolCallOutput):
        return len(item.content) + len(item.tool) + len(item.call_id)
    size = len(item.text)
    for call in item.tool_calls:
        size += len(call.name) + len(call.arguments) + len(call.call_id)
    if item.provider_items:
        size += len(json.dumps(item.provider_items, default=str))
    return size


def estimate_tokens(items: Sequence[TranscriptItem], chars_per_token: float = 4.0) -> int:
    """Estimated tokens of items: characters / `chars_per_token` + 4 per item."""
    chars = sum(item_chars(item) for item in items)
    return math.ceil(chars / chars_per_token) + ITEM_OVERHEAD_TOKENS * len(items)


def latest_summary(transcript: Sequence[TranscriptItem], start: int = 0, found: int = -1) -> int:
    """The index of the transcript's latest `ContextSummary` (-1: none).

    Args:
        transcript: The transcript.
        start: Look from this index on (items before it were looked at).
        found: What was found before `start` (-1: none).
    """
    for i in range(start, len(transcript)):
        if type(transcript[i]) is ContextSummary:
            found = i
    return found


def base_view(
    transcript: Sequence[TranscriptItem], summary_at: int | None = None, start: int = 0
) -> View:
    """The view before any strategy: the latest summary in place of what it covers.

    Costs the number of items after what the summary covers, plus a scan for
    the summary unless `summary_at` is given.

    Args:
        transcript: The whole transcript (any items, any order).
        summary_at: The index of its latest summary (-1: none), when known
            (`latest_summary`); `None`: looked for here.
        start: Leave out the items before it (`tail_start`), counted as
            dropped, besides what the summary covers.

    Returns:
        A reconciled view.
    """
    position = latest_summary(transcript) if summary_at is None else summary_at
    item = transcript[position] if position >= 0 else None
    summary = item if isinstance(item, ContextSummary) else None
    covered = 0 if summary is None else min(summary.covers_upto, position)
    first = max(covered, start)
    # Items left out besides what the summary covers (the summary itself not counted).
    omitted = first - covered - (1 if covered <= position < first else 0)
    entries: list[Entry] = []
    if summary is not None:
        entries.append(Entry(UserMessage(text=summary.as_user_text()), None))
    for i in range(first, len(transcript)):
        item = transcript[i]
        if not isinstance(item, ContextSummary):
            entries.append(Entry(item, i))
    return View(reconcile(entries), summary, omitted)


def tail_start(transcript: Sequence[TranscriptItem], turns: int) -> int:
    """Where the last `turns` model turns of a transcript start (0: it has no more).

    Looks at the last turns only. The user messages after the last turn stay.
    """
    found = 0
    for i in range(len(transcript) - 1, -1, -1):
        if not isinstance(transcript[i], AssistantMessage):
            continue
        found += 1
        if found == turns:
            while i > 0 and isinstance(transcript[i - 1], UserMessage | ContextSummary):
                i -= 1
            return i
    return 0


def reconcile(entries: Sequence[Entry]) -> list[Entry]:
    """Each call followed by its one output, in the call's order.

    The first output of a call that is anywhere in `entries` follows the
    assistant message; a repeated call id is dropped from its message; a
    call with no output gets a `cancelled` output; outputs of no call in
    `entries` are dropped.
    """
    outputs: dict[str, Entry] = {}
    for entry in entries:
        if isinstance(entry.item, ToolCallOutput):
            outputs.setdefault(entry.item.call_id, entry)
    seen: set[str] = set()
    result: list[Entry] = []
    for entry in entries:
        item = entry.item
        if isinstance(item, ToolCallOutput):
            continue
        if not isinstance(item, AssistantMessage):
            result.append(entry)
            continue
        calls: list[ToolCall] = []
        for call in item.tool_calls:
            if call.call_id not in seen:
                seen.add(call.call_id)
                calls.append(call)
        if len(calls) != len(item.tool_calls):
            item = item.model_copy(update={"tool_calls": tuple(calls)})
            entry = Entry(item, entry.index)
        result.append(entry)
        for call in calls:
            found = outputs.get(call.call_id)
            if found is None:
                wire = to_tool_call_output(cancelled(call, _MISSING_OUTPUT))
                result.append(Entry(wire, None))
            else:
                result.append(found)
    return result


def _pinned(view: View) -> int:
    """Entries at the start no strategy drops: the summary's message."""
    return 1 if view.summary is not None and view.entries and view.entries[0].index is None else 0


def _cut_for(view: View, turns: int) -> int:
    """The first entry of the last `turns` model turns (trailing user messages always kept).

    Looks at the last turns only.
    """
    entries, pinned = view.entries, _pinned(view)
    end = len(entries)
    while end > pinned and isinstance(entries[end - 1].item, UserMessage):
        end -= 1
    if turns <= 0:
        return end
    found = 0
    for i in range(end - 1, pinned - 1, -1):
        if not isinstance(entries[i].item, AssistantMessage):
            continue
        found += 1
        if found == turns:
            start = i
            while start > pinned and isinstance(entries[start - 1].item, UserMessage):
                start -= 1
            # The first turn takes whatever comes before it too.
            for j in range(start - 1, pinned - 1, -1):
                if isinstance(entries[j].item, AssistantMessage):
                    return start
            return pinned
    return pinned


def _drop(view: View, cut: int) -> View:
    pinned = _pinned(view)
    if cut <= pinned:
        return view
    dropped = sum(1 for e in view.entries[pinned:cut] if e.index is not None)
    entries = [*view.entries[:pinned], *view.entries[cut:]]
    return View(reconcile(entries), view.summary, view.omitted + dropped)


def keep_last_turns(
    view: View,
    strategy: KeepLastTurns,
    fits: Callable[[View], bool] | None = None,
) -> View:
    """The view with only the last `strategy.turns` model turns (fewer until `fits`).

    Args:
        view: The view so far.
        strategy: How many turns.
        fits: With a budget: whether a view fits it; fewer turns are kept,
            down to 1, until it does. `None`: keep `strategy.turns`.

    Returns:
        A new view (or `view` when nothing is dropped).
    """
    result = _drop(view, _cut_for(view, strategy.turns))
    turns = strategy.turns
    while fits is not None and turns > 1 and not fits(result):
        turns -= 1
        result = _drop(view, _cut_for(view, turns))
    return result


def elide_tool_outputs(
    view: View,
    strategy: ElideToolOutputs,
    fits: Callable[[View], bool] | None = None,
) -> View:
    """The view with old tool outputs replaced by stubs, oldest first (until `fits`).

    Args:
        view: The view so far.
        strategy: Which outputs may be elided.
        fits: With a budget: stop eliding once the view fits. `None`: elide
            every output the strategy allows.

    Returns:
        A new view.
    """
    cut = _cut_for(view, strategy.keep_last_turns)
    entries = list(view.entries)
    result = View(entries, view.summary, view.omitted)
    for i in range(cut):
        item = entries[i].item
        if not isinstance(item, ToolCallOutput) or entries[i].index is None:
            continue  # a synthesized output is short, and names no recorded output
        if len(item.content) <= strategy.min_chars or item.content.startswith(_ELIDED[:15]):
            continue  # short, or a stub already
        if fits is not None and fits(result):
            break
        stub = _ELIDED.format(tool=item.tool, call_id=item.call_id, size=len(item.content))
        result.replace(i, Entry(item.model_copy(update={"content": stub}), entries[i].index))
    return result


@dataclass(frozen=True)
class SummaryPlan:
    """What a summary would cover.

    Attributes:
        cut: Entries `[0, cut)` of the view are summarized.
        covers_upto: The transcript index of entry `cut` (the summary's
            `covers_upto`).
        entries: The entries summarized.
    """

    cut: int
    covers_upto: int
    entries: tuple[Entry, ...]


def plan_summary(view: View, keep_last_turns: int) -> SummaryPlan | None:
    """What to summarize to keep the last `keep_last_turns` turns: `None` if nothing new.

    The summary must cover at least one item besides an earlier summary, and
    ends at an item of the transcript (not one the view made).
    """
    cut = _cut_for(view, keep_last_turns)
    while cut < len(view.entries) and view.entries[cut].index is None:
        cut += 1  # a synthesized output belongs to the turn before it
    if cut >= len(view.entries):
        return None
    index = view.entries[cut].index
    if index is None:
        return None
    summarized = view.entries[:cut]
    if not any(e.index is not None for e in summarized):
        return None
    return SummaryPlan(cut, index, tuple(summarized))


def with_summary(view: View, plan: SummaryPlan, summary: ContextSummary) -> View:
    """The view with the planned entries replaced by the new summary's message."""
    entries = [Entry(UserMessage(text=summary.as_user_text()), None), *view.entries[plan.cut :]]
    return View(reconcile(entries), summary, 0)


def _cut_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - 2 * half} characters left out ...] {text[-half:]}"


def summary_input(entries: Sequence[Entry], strategy: Summarize) -> str:
    """The text the summarizing model receives: the entries as a readable log.

    Each item is cut to `strategy.max_item_chars` (in the middle); when the
    whole is over `strategy.max_input_chars`, the oldest items after an
    earlier summary are left out.
    """
    lines: list[str] = []
    for entry in entries:
        item = entry.item
        if isinstance(item, UserMessage):
            # An operator's note stays one (`as_model_text`), never the user's words.
            who = "OPERATOR" if item.operator else "USER"
            lines.append(f"{who}: {_cut_text(item.as_model_text(), strategy.max_item_chars)}")
        elif isinstance(item, ToolCallOutput):
            outcome = f"failed ({item.failure_kind or 'error'})" if item.is_error else "returned"
            content = _cut_text(item.content, strategy.max_item_chars)
            lines.append(f"TOOL {item.tool} (call {item.call_id}) {outcome}: {content}")
        else:
            if item.text:
                lines.append(f"ASSISTANT: {_cut_text(item.text, strategy.max_item_chars)}")
            for call in item.tool_calls:
                arguments = _cut_text(call.arguments, strategy.max_item_chars)
                lines.append(f"ASSISTANT called {call.name} (call {call.call_id}): {arguments}")
    head = 1 if entries and entries[0].index is None else 0  # an earlier summary stays
    total = sum(len(line) + 1 for line in lines)
    dropped = 0
    while total > strategy.max_input_chars and head + dropped < len(lines) - 1:
        total -= len(lines[head + dropped]) + 1
        dropped += 1
    if dropped:
        note = f"[{dropped} older line(s) left out]"
        lines = [*lines[:head], note, *lines[head + dropped :]]
    return _cut_text("\n".join(lines), strategy.max_input_chars)
