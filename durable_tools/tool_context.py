"""What a tool's run sees and how it is retried: contexts, retry policy, failures.

`durable_tools.tools` re-exports every name here; import from either.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, cast

from typing_extensions import TypeVar

from durable_tools.errors import ConfigurationError
from durable_tools.input_requests import InputResume

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "DEFAULT_RETRY",
    "MAX_LOCAL_TIMEOUT",
    "ONE_ATTEMPT",
    "ApprovalContext",
    "DepsT",
    "Emit",
    "FailureMode",
    "NeedsApproval",
    "RetryPolicy",
    "ToolContext",
    "ToolFailure",
    "ToolRun",
]

Emit = Callable[[Any], None]
"""Progress callback: `emit(event)` with a JSON-compatible event."""

FailureMode = Literal["return", "raise"]
"""What an exception in a run becomes: a `Failure` the model sees (`"return"`,
the default) or, in plain-asyncio use of `Toolkit.run`, an exception that
propagates to the caller (`"raise"`). The durable loop always returns."""


DEFAULT_HEARTBEAT_TIMEOUT: Final[float] = 30.0
"""Heartbeat timeout of a local tool that sets none, seconds (the model activity's too)."""


MAX_LOCAL_TIMEOUT: Final[float] = 60.0
"""Longest `timeout` of a tool whose calls run as Temporal local activities, seconds.

A local activity runs while its workflow task is open: the workflow does
nothing else meanwhile, and past this Temporal's own `local_retry_threshold`
(one minute) turns a local activity's retries into timers. Past a minute the
round trip a local activity saves (about 45 ms) is under 0.1% of the call.
"""


DepsT = TypeVar("DepsT", default=Any)
"""The type of the worker's dependencies object (`App(deps=...)`), default `Any`."""


@dataclass(frozen=True, kw_only=True)
class ToolContext(Generic[DepsT]):
    """What a run knows about the call it serves.

    Annotate a tool parameter `ctx: ToolContext[MyDeps]` to receive it with
    the worker's dependencies typed.

    Attributes:
        call_id: The model's id for the call.
        tool: The tool name.
        idempotency_key: A key that is the same for every attempt of this call.
            The durable loop sets it to `"{workflow_id}/{call_id}"`, stable
            across retries, worker restarts and continue-as-new; pass it to
            downstream APIs that deduplicate (payments, tickets, e-mail).
        attempt: The attempt number, starting at 1.
        deps: The worker's dependencies (database pools, HTTP clients): the
            object `App(deps=factory)` built once when the worker started,
            shared by every call on that worker; `None` when the app has none
            (and in `Toolkit.run` unless given).
        cancellation: Set by the tool activity when this attempt is cancelled
            (the conversation was cancelled, or Temporal gave up on the
            attempt) or ran past its `timeout`. An async run gets
            `asyncio.CancelledError` anyway; a sync run, which Python cannot
            interrupt, must look: `cancelled`, `raise_if_cancelled()`, or
            `cancellation.wait(seconds)` as a sleep that ends early on
            cancellation. A new event by default (never set outside the
            durable loop).
        resume: Set when the call is retried after it asked for input (an
            MCP tool's input-required result, see `durable_tools.input_requests`):
            the person's answers and the server's exact `requestState`.
            `None` on a call's first activity (and outside the durable loop).

    Example:
        ```python
        @tool
        def export(rows: int, ctx: ToolContext) -> int:
            for i in range(rows):
                ctx.raise_if_cancelled()  # stop between rows once cancelled
                write_row(i)
            return rows
        ```
    """

    call_id: str
    tool: str
    idempotency_key: str
    attempt: int = 1
    deps: DepsT = cast(Any, None)
    cancellation: threading.Event = field(
        default_factory=threading.Event, repr=False, compare=False
    )
    resume: InputResume | None = field(default=None, repr=False)

    @property
    def cancelled(self) -> bool:
        """Whether this attempt was cancelled or timed out (safe from any thread)."""
        return self.cancellation.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise when this attempt was cancelled or timed out (safe from any thread).

        Raises:
            asyncio.CancelledError: The attempt was cancelled; the call's
                outcome is what Temporal recorded for the attempt, not this
                exception.
        """
        if self.cancellation.is_set():
            raise asyncio.CancelledError(
                f"the call {self.call_id!r} of {self.tool!r} was cancelled"
            )


@dataclass(frozen=True, kw_only=True)
class ApprovalContext:
    """What a `needs_approval` function knows about the call.

    Attributes:
        call_id: The model's id for the call.
        tool: The tool name.
        transcript: The transcript up to (and including) the turn that made
            the call, as a tuple of transcript items.
    """

    call_id: str
    tool: str
    transcript: tuple[Any, ...] = ()


NeedsApproval = bool | Callable[[Any, ApprovalContext], bool]
"""`True`/`False`, or a function of the parsed input and an `ApprovalContext`."""

ToolRun = Callable[[Any, Emit, ToolContext], Awaitable[Any]]
"""A normalized run: `await run(input, emit, ctx)` returns the tool's output."""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often a local tool is retried when its run raises.

    Mirrors Temporal's activity retry policy, which the durable loop uses.

    Attributes:
        max_attempts: Total attempts including the first (>= 1; default 3).
        initial_interval: Seconds before the first retry (default 1.0).
        backoff_coefficient: Multiplier between retries (default 2.0).
        maximum_interval: Cap on the interval between retries, seconds
            (default 60.0).
        non_retryable_error_types: Exception class names that are never
            retried (e.g. `("PermissionError",)`).
    """

    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float = 60.0
    non_retryable_error_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("RetryPolicy.max_attempts must be >= 1")
        if self.initial_interval <= 0 or self.backoff_coefficient < 1:
            raise ConfigurationError(
                "RetryPolicy needs initial_interval > 0 and backoff_coefficient >= 1"
            )


DEFAULT_RETRY: Final[RetryPolicy] = RetryPolicy()
"""The retry policy of a call whose tool chose none and that may run twice (3 attempts)."""

ONE_ATTEMPT: Final[RetryPolicy] = RetryPolicy(max_attempts=1)
"""The retry policy of an at-most-once call whose tool chose none."""


class ToolFailure(Exception):
    """Raise inside a run to answer the call with a `Failure` of your kind.

    Not retried unless `retryable` is true.

    Args:
        kind: The failure kind the model sees, e.g. `"not_found"`.
        reason: What happened and what the model could do about it.
        retryable: Whether the durable loop may retry the call.
    """

    def __init__(self, kind: str, reason: str, *, retryable: bool = False) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason
        self.retryable = retryable
