"""Context management per agent: what the model sees of a long transcript.

The transcript keeps everything; before every model request the model
activity builds the *view* the model receives from it, under the agent's
`ContextPolicy`:

1. The latest `ContextSummary` in the transcript stands for the items it
   covers (`covers_upto`): they are left out and the summary is sent, as a
   user message, first.
2. The view is reconciled (`reconcile`): each tool call is followed by its one
   output, in the call's order; an output whose call is not in the view is
   left out, a call with no output in the view gets a `cancelled` output.
   Whatever a strategy does, the model never sees a call without its output
   or an output without its call.
3. The policy's strategies run in order. With a budget (`budget_tokens`),
   they stop as soon as the estimate fits `budget_tokens * (1 - safety_margin)`;
   without one, every strategy but `Summarize` runs on every request.

The strategies (one `kind` each, so a policy is plain data that travels in
workflow input and history):

| strategy | what it does |
|---|---|
| `KeepLastTurns(turns=N)` | sends only the last N model turns (fewer when a budget needs it) |
| `ElideToolOutputs(...)` | replaces old tool outputs by a stub naming the call |
| `Summarize(...)` | a model call summarizes the older turns; recorded as one `ContextSummary` |
| `CustomStrategy(name=...)` | a function registered on the worker by that name |

A *turn* is one model turn: an assistant message with its tool outputs, and
the user messages right before it. User messages after the last turn (the
ones the model answers now) are always sent.

Tokens are estimated as characters / `chars_per_token` (default 4, about
right for English prose and JSON with OpenAI's and Anthropic's tokenizers;
code and non-Latin scripts take more tokens per character), plus 4 per
item. The `safety_margin` (default 0.2) covers that error: the strategies aim
at 80% of the budget.

Pure Python, no I/O: the policy types are part of `AgentConfig` and are
imported by the workflow. The strategies themselves are in
`durable_tools.context_view`; the model activity runs them
(`activities/context_window.py`). See docs/context.md.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from durable_tools.errors import ConfigurationError
from durable_tools.transcript import TranscriptItem

__all__ = [
    "DEFAULT_SUMMARY_INSTRUCTIONS",
    "MAX_STRATEGIES",
    "ContextPolicy",
    "ContextRequest",
    "ContextStrategy",
    "ContextStrategyFunction",
    "CustomStrategy",
    "ElideToolOutputs",
    "KeepLastTurns",
    "Summarize",
    "check_policy",
]

MAX_STRATEGIES: Final[int] = 16
"""Most strategies in one policy (a client's policy in development mode is untrusted)."""

DEFAULT_SUMMARY_INSTRUCTIONS: Final[str] = (
    "You condense the earlier part of a conversation between a user and an AI assistant "
    "that calls tools, so the assistant can go on without it. Write a concise summary: "
    "the user's goals and constraints, decisions made, facts learned from tool results "
    "(names, numbers, identifiers, errors), what was done and what is still open. "
    "Keep every detail the assistant may need later; leave out pleasantries. "
    "Answer with the summary only."
)
"""Default system instructions of the summarizing model call."""


class KeepLastTurns(BaseModel):
    """Send only the last model turns.

    Attributes:
        turns: Most model turns sent (default 20, at least 1). With a budget,
            fewer are sent when the last `turns` do not fit, down to 1.
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["keep_last_turns"] = "keep_last_turns"
    turns: int = Field(default=20, ge=1)


class ElideToolOutputs(BaseModel):
    """Replace old tool outputs by a stub naming the call (tool, call id, size).

    Attributes:
        keep_last_turns: The outputs of the last this many model turns are
            sent whole (default 2).
        min_chars: Outputs of at most this many characters are sent whole
            (default 200: a stub saves nothing on them).
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["elide_tool_outputs"] = "elide_tool_outputs"
    keep_last_turns: int = Field(default=2, ge=0)
    min_chars: int = Field(default=200, ge=0)


class Summarize(BaseModel):
    """Summarize the older turns with a model call, recorded as one `ContextSummary`.

    The summary covers everything before the last `keep_last_turns` turns
    (an earlier summary included, so summaries build on each other); it is
    recorded in the transcript and later requests send it instead of the
    items it covers, without summarizing again until the budget is exceeded
    again. Without a budget it runs only on a context-length error.

    Attributes:
        keep_last_turns: Model turns sent as they are after the summary
            (default 4).
        model: The model that writes the summary: a model registered on the
            worker or a model spec (`""`, the default: the agent's model).
        instructions: Its system instructions (default
            `DEFAULT_SUMMARY_INSTRUCTIONS`).
        max_item_chars: Characters of one item given to the summarizer;
            longer tool outputs and messages are cut in the middle (default
            4,000).
        max_input_chars: Characters of the whole text given to the summarizer;
            beyond it the oldest items are left out (default 200,000).
        max_summary_chars: Characters of the summary kept; a longer one is
            cut (default 20,000).
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["summarize"] = "summarize"
    keep_last_turns: int = Field(default=4, ge=0)
    model: str = ""
    instructions: str = DEFAULT_SUMMARY_INSTRUCTIONS
    max_item_chars: int = Field(default=4_000, ge=100)
    max_input_chars: int = Field(default=200_000, ge=1_000)
    max_summary_chars: int = Field(default=20_000, ge=100)


class CustomStrategy(BaseModel):
    """A strategy written as a function and registered on the worker by name.

    Functions cannot travel in workflow input, so the policy names the
    function (`App(context_strategies={"mine": fn})`); see `ContextRequest`
    for what it receives and must return.

    Attributes:
        name: The registered name.
        options: JSON options passed to the function as `ContextRequest.options`.
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["custom"] = "custom"
    name: str = Field(min_length=1)
    options: dict[str, Any] = Field(default_factory=dict[str, Any])


ContextStrategy = Annotated[
    KeepLastTurns | ElideToolOutputs | Summarize | CustomStrategy, Field(discriminator="kind")
]
"""One strategy of a `ContextPolicy`, discriminated by `kind`."""


class ContextPolicy(BaseModel):
    """How much of the transcript an agent's model sees, and how it is reduced.

    The default sends the whole transcript (as before) and, on a
    context-length error, summarizes all but the last turn and retries the
    turn once.

    Attributes:
        budget_tokens: Estimated tokens a request may take (transcript,
            instructions and tool descriptors); `None` (default): no budget.
            Set it below the model's context window less its output tokens.
        strategies: Applied in order before every model request, each on the
            result of the previous; with a budget, only until the estimate
            fits (default none; at most `MAX_STRATEGIES`).
        on_context_error: On the provider's context-length error
            (`ContextLengthExceeded`): `"summarize"` (default) summarizes all
            but the last turn (with the policy's first `Summarize`, else
            `Summarize()`), records it and retries the request once;
            `"fail"`: the turn fails (state `model_failed`).
        chars_per_token: Characters per token of the estimate (default 4).
        safety_margin: Fraction of the budget kept free for the estimate's
            error (default 0.2): strategies aim at `budget_tokens * 0.8`.

    Raises:
        pydantic.ValidationError: A field is out of range (e.g. a budget of
            0 tokens, a margin of 1 or more).
    """

    model_config = ConfigDict(frozen=True)

    budget_tokens: int | None = Field(default=None, ge=1)
    strategies: tuple[ContextStrategy, ...] = Field(default=(), max_length=MAX_STRATEGIES)
    on_context_error: Literal["summarize", "fail"] = "summarize"
    chars_per_token: float = Field(default=4.0, gt=0)
    safety_margin: float = Field(default=0.2, ge=0, lt=1)

    @property
    def limit_tokens(self) -> int | None:
        """The budget less the safety margin, or `None` without a budget."""
        if self.budget_tokens is None:
            return None
        return max(1, math.floor(self.budget_tokens * (1 - self.safety_margin)))

    def summarizer(self) -> Summarize:
        """The policy's first `Summarize` strategy, else `Summarize()`."""
        for strategy in self.strategies:
            if isinstance(strategy, Summarize):
                return strategy
        return Summarize()


@dataclass(frozen=True, kw_only=True)
class ContextRequest:
    """What a custom strategy receives.

    Attributes:
        items: The view so far: reconciled, starting with the summary's
            message when there is one.
        limit_tokens: The budget less the safety margin, or `None`.
        count_tokens: The estimate the policy uses, for a list of items
            (instructions and tool descriptors not included).
        overhead_tokens: Tokens the instructions and tool descriptors take.
        options: `CustomStrategy.options`.
        agent: The agent's name.
        model: The model of the turn.
        turn: The model turn (from 1).
    """

    items: tuple[TranscriptItem, ...]
    limit_tokens: int | None
    count_tokens: Callable[[Sequence[TranscriptItem]], int]
    overhead_tokens: int
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
    agent: str = ""
    model: str = ""
    turn: int = 1


ContextStrategyFunction = Callable[
    [ContextRequest], Sequence[TranscriptItem] | Awaitable[Sequence[TranscriptItem]]
]
"""A custom strategy: the items to send, a subsequence of `request.items` or new
ones (sync or async). What it returns is reconciled again, so a call it keeps
without its output gets a `cancelled` output, and an output whose call it
dropped is left out."""


def check_policy(policy: ContextPolicy, functions: Mapping[str, object], where: str) -> None:
    """Fail when a policy names a custom strategy the worker does not register.

    Raises:
        ConfigurationError: Naming the strategy and the registered ones.
    """
    for strategy in policy.strategies:
        if isinstance(strategy, CustomStrategy) and strategy.name not in functions:
            known = ", ".join(sorted(functions)) or "none"
            raise ConfigurationError(
                f"{where} uses the context strategy {strategy.name!r}, which this worker does "
                f"not register (App(context_strategies={{...}}); registered: {known})"
            )
