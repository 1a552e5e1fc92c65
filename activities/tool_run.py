"""One attempt of a local tool inside its activity: heartbeats, progress, stopping.

`run_attempt` runs a tool's `run` for the tool activity (`tool.<name>`) so
that the attempt can be seen and stopped:

* **Heartbeats.** The activity heartbeats every third of its heartbeat
  timeout while the run works (`Tool.heartbeat_timeout`, default 30 s), with
  the latest progress as the heartbeat's details (a local activity, which
  has no heartbeat timeout, never heartbeats). A lost worker is noticed
  after the heartbeat timeout, and a cancellation, which Temporal delivers
  only in the answer to a heartbeat, reaches the run.
* **Progress** (`emit`) is delivered into the activity's own context
  whatever thread or task calls it: a sync tool's thread, or an MCP client
  session's reader task, which was created outside this activity (its
  context variables are not this activity's, so `activity.heartbeat` there
  raised `Not in activity context`). Each value heartbeats the attempt and
  becomes a throttled `tool_progress` event.
* **Cancellation.** The run is cancelled with the activity (async runs get
  `asyncio.CancelledError`), and `ToolContext.cancellation` is set for sync
  runs, which Python cannot interrupt, to check.
* **Timeout.** The run is cancelled when the attempt's start-to-close
  timeout passes on this worker, measured from the activity's start here
  (a little after the server's start, so after the server's timeout and
  before its retry, which comes at least the retry interval later). Left to
  itself, the Core SDK cancels an attempt that ran past its timeout about
  5 s later (measured), when the retry may already run beside it. The
  attempt then waits for that cancellation rather than report a failure of
  its own, so Temporal's record stays a timeout. A sync run's thread goes on
  until it returns (it sees `ToolContext.cancelled`).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final

from temporalio import activity

from durable_tools.activities.activity_events import ActivityEvents
from durable_tools.events import MAX_EVENT_TEXT
from durable_tools.tool_threads import ToolThreads
from durable_tools.tools import Emit, ToolContext

__all__ = ["AFTER_DEADLINE", "AttemptTimedOut", "progress_text", "run_attempt"]

AFTER_DEADLINE: Final[float] = 15.0
"""Seconds a timed-out attempt waits, its run cancelled, for the Core SDK to
cancel the activity (measured: 5 s after the timeout) before failing itself."""


class AttemptTimedOut(Exception):
    """The run outlived its attempt's start-to-close timeout and was cancelled."""


class _Progress:
    """The attempt's `emit`: progress heartbeats and events, from the activity's context."""

    def __init__(self, events: ActivityEvents, identity: dict[str, Any]) -> None:
        self._events = events
        self._identity = identity
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        # The activity's context variables, captured in its own task: a
        # callback from any other task or thread is run in (a copy of) them.
        self._context = contextvars.copy_context()
        self._closed = False
        info = activity.info()
        # A local activity cannot heartbeat (`Tool.local`); its progress goes nowhere.
        self._beats = not info.is_local
        self.details: tuple[Any, ...] = tuple(info.heartbeat_details)
        """What every heartbeat records: the latest progress (a heartbeat
        without details would erase what an earlier one recorded)."""

    def emit(self, value: Any) -> None:
        if self._closed:  # a sync run's thread that outlived its attempt
            return
        if threading.get_ident() == self._thread:
            self._context.run(self._record, value)
        else:
            try:
                self._loop.call_soon_threadsafe(self._record, value, context=self._context)
            except RuntimeError:  # the loop is closed: the worker has stopped
                pass

    def _record(self, value: Any) -> None:
        if self._closed:
            return
        self.details = (value,)
        if self._beats:
            activity.heartbeat(value)
        self._events.replace(
            "progress", "tool_progress", **self._identity, text=progress_text(value)
        )

    def close(self) -> None:
        self._closed = True


async def run_attempt(
    run: Callable[[Emit], Awaitable[Any]],
    *,
    context: ToolContext,
    events: ActivityEvents,
    identity: dict[str, Any],
    threads: ToolThreads,
) -> Any:
    """Run one attempt of a tool call inside the tool activity.

    Args:
        run: `run(emit)`: the tool's run with its input and context bound.
        context: The call's `ToolContext`; its `cancellation` is set when the
            attempt is cancelled or times out.
        events: The attempt's event publisher (`tool_progress` goes there).
        identity: The fields every event of the call carries (call id,
            tool, attempt).
        threads: The worker's pool for sync runs (`run_sync` uses it).

    Returns:
        What the run returned.

    Raises:
        AttemptTimedOut: The activity's start-to-close timeout passed on this
            worker, its run was cancelled (a sync run's thread goes on), and
            the activity was not cancelled within `AFTER_DEADLINE` seconds.
        asyncio.CancelledError: The activity was cancelled (the conversation
            was cancelled, Temporal timed the attempt out, the worker shuts
            down); the run was cancelled.
        Exception: Whatever the run raised.
    """
    info = activity.info()
    loop = asyncio.get_running_loop()
    limit = info.start_to_close_timeout
    deadline = asyncio.timeout_at(loop.time() + limit.total_seconds() if limit else None)
    progress = _Progress(events, identity)
    beating = _Beats(progress)
    try:
        with threads.use():
            async with deadline:
                return await run(progress.emit)
    except TimeoutError:
        if not deadline.expired():
            raise  # the run's own TimeoutError
        context.cancellation.set()
        # Temporal has timed the attempt out (a moment ago, by the server's
        # clock) and records that; a failure sent now could arrive first and
        # turn the timeout into an error. So wait for the Core SDK to cancel
        # this activity (about 5 s), and fail only if it does not.
        await asyncio.sleep(AFTER_DEADLINE)
        seconds = limit.total_seconds() if limit else 0.0
        raise AttemptTimedOut(
            f"the tool ran past its timeout of {seconds:g} s and was cancelled"
        ) from None
    except asyncio.CancelledError:
        context.cancellation.set()
        raise
    finally:
        progress.close()
        beating.stop()


class _Beats:
    """Heartbeats every third of the activity's heartbeat timeout until `stop` (none without one).

    A timer, not a task (as the model activity's `_heartbeating`): the
    callback runs in the activity's context, which `call_later` copies.
    """

    def __init__(self, progress: _Progress) -> None:
        self._progress = progress
        self._timer: asyncio.TimerHandle | None = None
        timeout = activity.info().heartbeat_timeout
        if timeout:
            self._interval = max(timeout.total_seconds() / 3, 0.05)
            self._loop = asyncio.get_running_loop()
            self._timer = self._loop.call_later(self._interval, self._beat)

    def _beat(self) -> None:
        activity.heartbeat(*self._progress.details)
        self._timer = self._loop.call_later(self._interval, self._beat)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def progress_text(value: Any) -> str:
    """A progress value as JSON (anything else as its `str`), bounded by `MAX_EVENT_TEXT`."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # circular, NaN-strict...: show something rather than fail the tool
        text = str(value)
    return text[:MAX_EVENT_TEXT]
