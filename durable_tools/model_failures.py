"""How a model turn is retried, and why it failed when it did for good.

`ModelRetry` (in `ConversationOptions.model_retry`) bounds the model
activity's retries; `ModelFailure` is what a conversation shows while it
waits in state `model_failed`, until a `retry` (`RetryRequest`), a new
message or cancellation. Re-exported by `durable_tools.conversation`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AGENT_REFUSED",
    "MAX_FAILURE_MESSAGE_CHARS",
    "ModelFailure",
    "ModelRetry",
    "RetryRequest",
]

AGENT_REFUSED: Final = "AgentRefused"
"""`ModelFailure.type` when the worker refuses what the client asked for: an
agent it does not declare, a model, setting, variable, context policy or
instructions the agent does not allow, a missing template variable, an
offline model or script it refuses. Not
retryable: only the client can fix it (`durable-tools run` cancels the
conversation it started when its first turn is refused)."""


MAX_FAILURE_MESSAGE_CHARS: Final = 1000
"""Longest failure message the model activity raises, in characters
(`ModelFailure.message`; Temporal replaces a failure over its size limit,
2 MiB by default, with "Failure exceeds size limit.")."""


class ModelRetry(BaseModel):
    """How the model activity is retried and watched.

    Retryable failures (HTTP 408/409/429/5xx, connection errors, timeouts)
    are retried with exponential backoff (a provider's `retry-after` replaces
    the backoff for that attempt) until `max_attempts` or `timeout`; then, or
    at once for a non-retryable failure, the conversation waits in state
    `model_failed` for an operator (`retry`, `send` or `cancel`).

    Attributes:
        max_attempts: Attempts of one model turn, the first included (default 10).
        timeout: Seconds all attempts of one model turn may take together
            (default 1800: 30 minutes; Temporal's schedule-to-close timeout;
            never less than `ConversationOptions.model_timeout`).
        initial_interval: Seconds before the first retry (default 1).
        maximum_interval: Most seconds between retries (default 60).
        heartbeat_timeout: Seconds without a heartbeat after which an attempt
            counts as lost (its worker died) and is retried (default 30);
            the activity heartbeats every third of it.
    """

    model_config = ConfigDict(frozen=True)

    max_attempts: int = Field(default=10, ge=1)
    timeout: float = Field(default=1800.0, gt=0)
    initial_interval: float = Field(default=1.0, gt=0)
    maximum_interval: float = Field(default=60.0, gt=0)
    heartbeat_timeout: float = Field(default=30.0, gt=0)


class ModelFailure(BaseModel):
    """Why a model turn failed and the conversation waits (state `model_failed`).

    Attributes:
        message: The error's message: one line of at most 1,000 characters
            (the worker's log has the full text).
        type: The error's type: a provider error (`ProviderBadRequest`,
            `ProviderUnavailable`, `ContextLengthExceeded`, ...; see
            `durable_tools.models.errors`), `AgentRefused` (`AGENT_REFUSED`:
            the worker refuses the agent, model or override the client asked
            for), `ConfigurationError` (the worker lacks the conversation's
            toolkit, e.g. during a rolling deploy, or cannot build its
            model: a missing key or SDK), or a timeout
            (`StartToClose`, `Heartbeat`, `ScheduleToClose`).
        retries_exhausted: True when a retryable error ran out of attempts or
            time; False when the error is not retryable.
        turn: The model turn that failed (from 1).
        failed_at: When (workflow time, UTC).
    """

    message: str
    type: str = ""
    retries_exhausted: bool = False
    turn: int
    failed_at: datetime


class RetryRequest(BaseModel):
    """Input of the `retry` signal and `retry_now` update (optional).

    Attributes:
        requested_by: Who asked for the retry.
    """

    requested_by: str = ""
