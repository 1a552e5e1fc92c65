"""Events an activity publishes to its conversation's stream: batched, throttled, bounded.

An activity reaches the conversation's Workflow Stream only through a
signal (`WorkflowStreamClient.from_within_activity()`), and every signal
adds an event to the workflow's history and a workflow task (server CPU).
So an `ActivityEvents` sends what it collected in one signal at a time, at
most once per `interval` seconds, and nothing before `hold` seconds have
passed:

- tool attempts: `tool_attempt_started` and the latest `tool_progress` wait
  `STARTED_DELAY` (a quick call publishes nothing; its `tool_call_finished`,
  published by the workflow, carries the attempt and duration), then
  progress goes out at most every `PROGRESS_INTERVAL`, the latest value
  replacing one not yet sent; a retry (attempt 2 on) publishes its start at
  once. What is still unsent when the attempt returns is dropped (the
  call's output says more); a failure is sent before the activity raises.
- model turns: text deltas are joined and sent at most every
  `TEXT_DELTA_INTERVAL` (the first at once), the rest before the activity
  returns, so every delta precedes the turn's `turn_finished`. Text goes
  out only while someone follows the conversation (`gate`: the workflow's
  `followed` query, asked when text first arrives and every
  `FOLLOW_CHECK_INTERVAL` seconds while the answer is no); the text of the
  attempt is kept meanwhile, so a reader who arrives mid-turn gets it from
  its first character, and it is dropped if nobody came.

Publishing is best effort: a signal that fails or takes longer than
`SEND_TIMEOUT` is logged and dropped; the activity's own work and result
never depend on it, and never wait for it either (issue 26: on a worker
whose workflow slots were saturated, each failed attempt waited 5 s for its
`tool_attempt_failed` signal). A failure event (`flush(wait=False)`) and a
signal still under way when the attempt ends go on in the background, in
order, at most `MAX_DETACHED_SENDS` at a time in the process (past it a
batch is dropped and counted in `DROPPED`). Only the text of a turn someone
follows is flushed before the activity returns, so its deltas precede the
turn's `turn_finished`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from durable_tools.events import (
    EVENTS_TOPIC,
    FOLLOW_CHECK_INTERVAL,
    MAX_DELTA_TEXT,
    ConversationEvent,
    EventKind,
)

__all__ = ["DROPPED", "MAX_DETACHED_SENDS", "SEND_TIMEOUT", "ActivityEvents", "detached_sends"]

SEND_TIMEOUT: Final[float] = 5.0
"""Seconds one publish signal may take before its batch is dropped."""

MAX_DETACHED_SENDS: Final[int] = 256
"""Signals a process sends in the background at once (after their attempts ended)."""

_detached: set[asyncio.Task[None]] = set()


class _Dropped:
    """Batches dropped because `MAX_DETACHED_SENDS` signals were already under way."""

    batches: int = 0


DROPPED: Final = _Dropped()


def detached_sends() -> int:
    """Signals under way in the background now (for tests and benchmarks)."""
    return len(_detached)


def _detach(send: Awaitable[None]) -> bool:
    """Run `send` in the background; False (dropped) when `MAX_DETACHED_SENDS` are running."""
    if len(_detached) >= MAX_DETACHED_SENDS:
        DROPPED.batches += 1
        close = getattr(send, "close", None)
        if close is not None:
            close()  # a coroutine never awaited
        return False
    task = asyncio.ensure_future(send)
    _detached.add(task)
    task.add_done_callback(_detached.discard)
    return True


class ActivityEvents:
    """Collects one activity attempt's events and publishes them in throttled batches.

    Use it as an async context manager inside the activity: `__aexit__`
    stops the sender; call `flush()` first for whatever must still go out.

    Args:
        hold: Seconds before anything is published (default 0).
        interval: Least seconds between two signals (default 0.2).
        send: Publishes one batch; default: a signal to the activity's
            workflow through `WorkflowStreamClient.from_within_activity()`.
            Tests pass their own.
        gate: Async callable answering whether text should be published
            now (someone follows); `None` (default): always. A gate that
            raises or takes longer than `SEND_TIMEOUT` counts as no (e.g. a
            workflow without the `followed` query).
        recheck: Seconds before a gate that said no is asked again
            (default `FOLLOW_CHECK_INTERVAL`).
        enabled: False collects and publishes nothing (default True): a
            local activity's events, whose signal would wait for the
            workflow task the activity runs in.
    """

    def __init__(
        self,
        *,
        hold: float = 0.0,
        interval: float = 0.2,
        send: Any = None,
        gate: Callable[[], Awaitable[bool]] | None = None,
        recheck: float = FOLLOW_CHECK_INTERVAL,
        enabled: bool = True,
    ) -> None:
        self._enabled = enabled
        self._hold = hold
        self._interval = interval
        self._send_batch = send
        self._stream: WorkflowStreamClient | None = None
        # Events as (kind, fields, at): built when sent (most never are).
        self._queued: list[_Pending] = []
        self._latest: dict[str, _Pending] = {}  # replaced, not queued (progress)
        self._text: list[str] = []
        self._text_fields: dict[str, Any] = {}
        self._gate = gate
        self._recheck = recheck
        self._text_on: bool | None = None  # the gate's last answer; None: not asked
        self._asked_at = 0.0
        self._wake = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._starting: asyncio.TimerHandle | None = None
        self._open = False
        self._opened = 0.0
        self._sending: asyncio.Task[None] | None = None
        self.signals = 0
        """Signals sent so far."""

    async def __aenter__(self) -> ActivityEvents:
        """Open: the sender starts when there is something to send, `hold` seconds from now."""
        self._open = True
        self._opened = time.monotonic()
        if self._queued or self._latest or self._text:
            self._wake_sender()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        """Stop the sender; a signal under way lands first (events keep their order)."""
        self._open = False
        if self._starting is not None:
            self._starting.cancel()
            self._starting = None
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
            self._sender = None
        if self._sending is not None and not self._sending.done():
            # Finishes in the background: the attempt's result does not wait for it.
            _detach(self._sending)
        self._sending = None

    # ------------------------------------------------------------ collecting

    def publish(self, kind: EventKind, **fields: Any) -> None:
        """Queue an event (sent in order with the next batch)."""
        if not self._enabled:
            return
        self._queued.append((kind, fields, datetime.now(UTC)))
        self._wake_sender()

    def replace(self, key: str, kind: EventKind, **fields: Any) -> None:
        """Set the latest event under `key`; one not yet sent is replaced."""
        if not self._enabled:
            return
        self._latest[key] = (kind, fields, datetime.now(UTC))
        self._wake_sender()

    def text(self, piece: str, **fields: Any) -> None:
        """Add a piece of model text (joined into `model_text_delta` events with `fields`)."""
        if not self._enabled:
            return
        self._text.append(_valid_utf8(piece))  # a lone surrogate would fail the batch
        self._text_fields = fields
        self._wake_sender()

    async def flush(self, *, wait: bool = True) -> None:
        """Send what is collected now, after a signal under way (bounded by `SEND_TIMEOUT`).

        Text the gate does not let out is dropped.

        Args:
            wait: Wait for the signal (default). False: send it in the
                background, after the one under way, and return at once
                (dropped when `MAX_DETACHED_SENDS` are under way).
        """
        if self._text and not await self._text_allowed():
            self._text.clear()
        batch = self._take()
        previous, self._sending = self._sending, None
        if not wait:
            if batch:
                _detach(self._send_after(previous, batch))
            elif previous is not None and not previous.done():
                _detach(previous)
            return
        if previous is not None:
            with contextlib.suppress(Exception):
                await previous
        if batch:
            await self._send(batch)

    async def _send_after(
        self, previous: asyncio.Future[None] | None, batch: list[ConversationEvent]
    ) -> None:
        if previous is not None:
            with contextlib.suppress(Exception):
                await previous
        await self._send(batch)

    def drop(self) -> None:
        """Forget what is collected and not sent yet."""
        self._queued.clear()
        self._latest.clear()
        self._text.clear()

    # --------------------------------------------------------------- sending

    def _wake_sender(self) -> None:
        """Wake the sender; start it first (after what is left of `hold`) if it is not running.

        An attempt that publishes nothing, or returns within `hold`, then
        costs no task (a model turn nobody follows, a quick tool call).
        """
        self._wake.set()
        if self._sender is not None or self._starting is not None or not self._open:
            return
        wait = self._hold - (time.monotonic() - self._opened)
        if wait > 0:
            self._starting = asyncio.get_running_loop().call_later(wait, self._start_sender)
        else:
            self._start_sender()

    def _start_sender(self) -> None:
        self._starting = None
        if self._open and self._sender is None:
            self._sender = asyncio.create_task(self._run())

    def _take(self, *, text: bool = True) -> list[ConversationEvent]:
        batch = [_event(*pending) for pending in (*self._queued, *self._latest.values())]
        self._queued.clear()
        self._latest.clear()
        if self._text and text:
            joined, fields = "".join(self._text), self._text_fields
            self._text.clear()
            for start in range(0, len(joined), MAX_DELTA_TEXT):
                piece = joined[start : start + MAX_DELTA_TEXT]
                batch.append(
                    _event("model_text_delta", {**fields, "text": piece}, datetime.now(UTC))
                )
        return batch

    async def _text_allowed(self) -> bool:
        if self._gate is None or self._text_on:
            return True
        now = time.monotonic()
        if self._text_on is None or now - self._asked_at >= self._recheck:
            self._asked_at = now
            try:
                async with asyncio.timeout(SEND_TIMEOUT):
                    self._text_on = await self._gate()
            except Exception:
                activity.logger.debug("could not ask whether anyone follows", exc_info=True)
                self._text_on = False
        return bool(self._text_on)

    async def _run(self) -> None:
        while True:
            # Text held back by the gate wakes the sender to ask again.
            held = bool(self._text) and self._text_on is False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._recheck if held else None):
                    await self._wake.wait()
            self._wake.clear()
            text = not self._text or await self._text_allowed()
            batch = self._take(text=text)
            if batch:
                # Shielded: cancelling the sender must not abandon a signal half sent.
                self._sending = asyncio.ensure_future(self._send(batch))
                await asyncio.shield(self._sending)
                self._sending = None
            await asyncio.sleep(self._interval)

    async def _send(self, batch: list[ConversationEvent]) -> None:
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                if self._send_batch is not None:
                    await self._send_batch(batch)
                else:
                    if self._stream is None:
                        self._stream = WorkflowStreamClient.from_within_activity()
                    topic = self._stream.topic(EVENTS_TOPIC, type=ConversationEvent)
                    for event in batch:
                        topic.publish(event)
                    await self._stream.flush()
            self.signals += 1
        except Exception:
            activity.logger.warning("could not publish %d events", len(batch), exc_info=True)


_Pending = tuple[EventKind, dict[str, Any], datetime]
"""An event not built yet: its kind, its fields and when it happened."""


def _event(kind: EventKind, fields: dict[str, Any], at: datetime) -> ConversationEvent:
    # A lone surrogate (from a model or a tool) would fail the batch's serialization.
    clean: dict[str, Any] = {
        k: _valid_utf8(v) if isinstance(v, str) else v for k, v in fields.items()
    }
    return ConversationEvent(kind=kind, at=at, **clean)


def _valid_utf8(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")
