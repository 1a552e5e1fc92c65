"""The model's view of the transcript, built in the model activity under the agent's policy.

`durable_tools.context` holds the policy, `durable_tools.context_view` the
pure strategies; this module
runs them for one model turn: the custom strategies registered on the
worker, and the summarizing model call (`Summarize`), whose result the
activity returns in `ModelTurn.summary` for the workflow to record as one
`ContextSummary` item. See docs/context.md.
"""

from __future__ import annotations

import inspect
import json
import math
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from durable_tools.activities.model_output import safe_text
from durable_tools.context import (
    ContextPolicy,
    ContextRequest,
    ContextStrategyFunction,
    CustomStrategy,
    ElideToolOutputs,
    KeepLastTurns,
    Summarize,
)
from durable_tools.context_view import (
    ITEM_OVERHEAD_TOKENS,
    Entry,
    View,
    base_view,
    elide_tool_outputs,
    estimate_tokens,
    item_chars,
    keep_last_turns,
    latest_summary,
    plan_summary,
    reconcile,
    summary_input,
    tail_start,
    with_summary,
)
from durable_tools.descriptor import ToolDescriptor
from durable_tools.transcript import (
    AssistantMessage,
    ContextSummary,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
)

__all__ = ["SUMMARY_FAILED", "ContextWindow", "Summarizer", "SummaryCheckpoint", "Window"]

_SEEN_RUNS: Final[int] = 1024
"""Runs a worker remembers the latest summary and prefix sizes of (8 bytes per item)."""


SUMMARY_FAILED: Final[str] = "ContextSummaryFailed"
"""`ApplicationError.type` when the summarizing model returned no text (retried)."""

Summarizer = Callable[[Summarize, str], Awaitable[AssistantMessage]]
"""Calls the summarizing model with the strategy and the text to summarize."""


class SummaryCheckpoint(BaseModel):
    """A summary made by one attempt of `model.turn`, recorded in its heartbeat details.

    A later attempt of the same activity (same run, same `upto`) reuses it
    instead of asking the model to summarize again.

    Attributes:
        upto: The transcript length the summary was made for.
        summary: The summary.
    """

    upto: int
    summary: ContextSummary

    @classmethod
    def read(cls, details: Sequence[Any], upto: int) -> ContextSummary | None:
        """The summary in an attempt's heartbeat details, if made for `upto` items."""
        if not details:
            return None
        try:
            checkpoint = cls.model_validate(details[0])
        except ValidationError:
            return None
        summary = checkpoint.summary
        if checkpoint.upto != upto or summary.covers_upto > upto:
            return None
        return summary


@dataclass(frozen=True)
class _Seen:
    """What a worker looked at of one run's transcript."""

    length: int  # items looked at
    last: TranscriptItem | None  # the last of them (the same object next turn)
    found: int  # the latest summary's index, -1: none
    chars: array[int]  # chars[k]: `item_chars` of items [0, k)


@dataclass(frozen=True)
class Window:
    """The items a model request sends, and the summary made for it.

    Attributes:
        items: What the model receives.
        summary: A summary made for this request, to record (`None`: none made).
        view: The view the items come from.
    """

    items: list[TranscriptItem]
    summary: ContextSummary | None
    view: View


class ContextWindow:
    """Builds the model's view of a transcript; one per worker.

    Args:
        functions: Custom strategies by the name a `CustomStrategy` gives.
    """

    def __init__(self, functions: Mapping[str, ContextStrategyFunction] | None = None) -> None:
        self.functions = dict(functions or {})
        self._runs: OrderedDict[tuple[str, str], _Seen] = OrderedDict()
        self.max_runs = _SEEN_RUNS
        """Most conversations whose view is kept (`ActivitiesBase.size_for` sets it)."""

    def release(self, workflow_id: str) -> None:
        """Forget what is kept for the conversation (it ended or left the worker)."""
        self._runs.pop((workflow_id, ""), None)

    def _seen(self, key: tuple[str, str] | None, transcript: Sequence[TranscriptItem]) -> _Seen:
        """The latest summary and the characters of every prefix, looking only at new items.

        The transcript cache hands out the same item objects for the prefix it
        holds, so the last item seen is still there when the prefix is the same;
        otherwise (another run, a transcript sent as input) everything is looked at.
        """
        seen = self._runs.get(key) if key is not None else None
        start, found, chars = 0, -1, array("q", [0])
        if seen is not None and 0 < seen.length <= len(transcript):
            if transcript[seen.length - 1] is seen.last:
                start, found, chars = seen.length, seen.found, seen.chars
        found = latest_summary(transcript, start, found)
        total = chars[-1]
        for i in range(start, len(transcript)):
            total += item_chars(transcript[i])
            chars.append(total)
        last = transcript[-1] if transcript else None
        result = _Seen(len(transcript), last, found, chars)
        if key is not None and transcript:
            self._runs[key] = result
            self._runs.move_to_end(key)
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
        return result

    def _summary_at(self, key: tuple[str, str] | None, transcript: Sequence[TranscriptItem]) -> int:
        """Where the latest summary is (-1: none), looking only at items new for the run."""
        return self._seen(key, transcript).found

    async def prepare(
        self,
        policy: ContextPolicy,
        transcript: Sequence[TranscriptItem],
        *,
        instructions: str,
        tools: Sequence[ToolDescriptor],
        summarize: Summarizer,
        agent: str = "",
        model: str = "",
        turn: int = 1,
        run: tuple[str, str] | None = None,
        reuse: ContextSummary | None = None,
    ) -> Window:
        """The view of `transcript` the model receives before a request.

        Args:
            policy: The agent's policy.
            transcript: The whole transcript (reconciled, as the workflow keeps it).
            instructions: The request's instructions (counted in the budget).
            tools: The request's descriptors (counted in the budget).
            summarize: Calls the summarizing model.
            agent: The agent's name (for custom strategies).
            model: The turn's model (for custom strategies).
            turn: The model turn (for custom strategies).
            run: Names the transcript across turns, e.g. the workflow id and
                a run id (the model activity passes `(workflow_id, "")`: its
                transcripts are conversation-wide): the items already looked
                at for a summary are not looked at again, as long as the
                transcript holds the same item objects (`None`: the whole
                transcript is).
            reuse: A summary an earlier attempt of this request made
                (`SummaryCheckpoint`): taken as if recorded, and returned as
                the summary to record.

        Returns:
            The items, and the summary made for them, if any.

        Raises:
            ApplicationError: A custom strategy is not registered
                (`ConfigurationError`, not retried) or raised; the
                summarizing model failed or returned no text.
        """
        if reuse is not None:
            # As if recorded: appended, where the workflow will record it.
            transcript, run = [*transcript, reuse], None
        seen = self._seen(run, transcript)
        summary_at = seen.found
        if not policy.strategies and summary_at < 0:
            # The common case: the workflow's transcript, reconciled before every
            # request (DESIGN invariant 1), as it is; nothing copied, nothing
            # scanned but the items new since the last turn.
            items = transcript if isinstance(transcript, list) else list(transcript)
            return Window(items, None, View([]))
        overhead = _overhead(policy, instructions, tools)
        limit = policy.limit_tokens
        first = policy.strategies[0] if policy.strategies else None
        start = 0
        if isinstance(first, KeepLastTurns) and not _fits_whole(policy, transcript, seen, overhead):
            # Only the last turns are looked at, whatever the transcript's length.
            start = tail_start(transcript, first.turns)
        view = base_view(transcript, summary_at, start)
        recorded = view.summary

        def count(items: Sequence[TranscriptItem]) -> int:
            return estimate_tokens(items, policy.chars_per_token)

        def fits(candidate: View) -> bool:
            return limit is None or overhead + candidate.tokens(policy.chars_per_token) <= limit

        for strategy in policy.strategies:
            if limit is not None and fits(view):
                break
            budget_fits = fits if limit is not None else None
            if isinstance(strategy, KeepLastTurns):
                view = keep_last_turns(view, strategy, budget_fits)
            elif isinstance(strategy, ElideToolOutputs):
                view = elide_tool_outputs(view, strategy, budget_fits)
            elif isinstance(strategy, Summarize):
                if limit is not None:
                    view = await self._summarized(
                        view, strategy, strategy.keep_last_turns, summarize
                    )
            else:
                request = ContextRequest(
                    items=tuple(view.items()),
                    limit_tokens=limit,
                    count_tokens=count,
                    overhead_tokens=overhead,
                    options=strategy.options,
                    agent=agent,
                    model=model,
                    turn=turn,
                )
                view = await self._custom(view, strategy, request)
        made = view.summary is not recorded or (reuse is not None and view.summary is reuse)
        return Window(view.items(), view.summary if made else None, view)

    async def after_context_error(
        self, policy: ContextPolicy, window: Window, summarize: Summarizer
    ) -> Window | None:
        """A smaller view after the provider said the request was over its context window.

        Summarizes all but the last model turn of `window` with the policy's
        summarizer. `None` when the policy says `"fail"` or there is nothing
        to summarize (the last turn alone is too large).
        """
        if policy.on_context_error != "summarize":
            return None
        view = window.view
        if not view.entries and window.items:
            view = base_view(window.items)  # the fast path sent the transcript as it is
        reduced = await self._summarized(view, policy.summarizer(), 1, summarize)
        if reduced is view:
            return None
        return Window(reduced.items(), reduced.summary, reduced)

    async def _summarized(
        self, view: View, strategy: Summarize, keep: int, summarize: Summarizer
    ) -> View:
        plan = plan_summary(view, keep)
        if plan is None:
            return view
        message = await summarize(strategy, summary_input(plan.entries, strategy))
        # Model text is untrusted: it must encode to be recorded, and stay bounded.
        text = safe_text(message.text).strip()[: strategy.max_summary_chars]
        if not text:
            raise ApplicationError("the summarizing model returned no text", type=SUMMARY_FAILED)
        summary = ContextSummary(
            covers_upto=plan.covers_upto, text=text, usage=message.usage, model=strategy.model
        )
        return with_summary(view, plan, summary)

    async def _custom(self, view: View, strategy: CustomStrategy, request: ContextRequest) -> View:
        function = self.functions.get(strategy.name)
        if function is None:
            known = ", ".join(sorted(self.functions)) or "none"
            raise ApplicationError(
                f"the context strategy {strategy.name!r} is not registered on this worker "
                f"(registered: {known})",
                type="ConfigurationError",
                non_retryable=True,
            )
        result = function(request)
        items = await result if inspect.isawaitable(result) else result
        return _rebuilt(view, items)


def _fits_whole(
    policy: ContextPolicy, transcript: Sequence[TranscriptItem], seen: _Seen, overhead: int
) -> bool:
    """Whether what the latest summary does not cover fits the budget (False: no budget).

    An estimate from the characters of every prefix, without building the view
    (the summary item counts as the message it becomes).
    """
    limit = policy.limit_tokens
    if limit is None:
        return False
    covered = 0
    summary = transcript[seen.found] if seen.found >= 0 else None
    if isinstance(summary, ContextSummary):
        covered = min(summary.covers_upto, seen.found)
    count = seen.length - covered
    chars = seen.chars[-1] - seen.chars[covered]
    tokens = math.ceil(chars / policy.chars_per_token) + ITEM_OVERHEAD_TOKENS * count
    return overhead + tokens <= limit


def _overhead(policy: ContextPolicy, instructions: str, tools: Sequence[ToolDescriptor]) -> int:
    chars = len(instructions) + sum(
        len(json.dumps(t.model_dump(mode="json"), separators=(",", ":"))) for t in tools
    )
    return int(chars / policy.chars_per_token) + 1


def _rebuilt(view: View, items: Sequence[TranscriptItem]) -> View:
    """A custom strategy's items as a view: known items keep their place in the transcript."""
    known = {id(e.item): e for e in view.entries}
    entries: list[Entry] = []
    for item in items:
        entry = known.get(id(item))
        if entry is not None:
            entries.append(entry)
        elif isinstance(item, UserMessage | AssistantMessage | ToolCallOutput):
            entries.append(Entry(item, None))
        else:  # a summary the function made: sent as the text it stands for
            entries.append(Entry(UserMessage(text=item.as_user_text()), None))
    kept = {e.index for e in entries if e.index is not None}
    dropped = sum(1 for e in view.entries if e.index is not None and e.index not in kept)
    first = view.entries[0] if view.entries else None
    pinned = first is not None and first.index is None and bool(entries) and entries[0] is first
    summary = view.summary if pinned else None
    return View(reconcile(entries), summary, view.omitted + dropped)
