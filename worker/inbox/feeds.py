"""One event feed per conversation, fanned out to every SSE client of this inbox process.

Temporal allows 10 in-flight updates per workflow, and a Workflow Streams
subscriber holds one: its long-poll update. One subscriber per open page made
ten open pages block Approve, Deny and Answer (they are updates too: the
server refuses with `RESOURCE_EXHAUSTED`), and every page's polls added update
events to the conversation's history. So the inbox reads each conversation's
event stream once per process:

- The first client that follows a conversation starts its feed: one
  `Conversations.events` reader, so one long-poll update in flight and one
  accepted update per batch of events, however many clients read it.
- Every client of the conversation reads the feed's buffer of its latest
  `buffer` events (default `FEED_BUFFER`). A client costs a coroutine: no
  update slot, nothing in history.
- The feed stops `linger` seconds (default `FEED_LINGER`) after its last
  client left, so a page reloaded meanwhile finds it running. (A stopped
  feed's last poll stays in flight on the server until the conversation's
  next event, continue-as-new or end: Temporal cannot withdraw an accepted
  update.)

Resuming (`Last-Event-ID`, `?after=`): a client gets the events after its
`after` with no gap and no repeat. When the feed's buffer still covers
`after` (or the feed started there), they come from the buffer; a client
further behind first reads what it missed with the stream's query
(`Conversations.retained_events`: no update, nothing recorded in history),
then joins the feed. The conversation retains only its latest
`RETAINED_EVENTS` events after a continue-as-new: an `after` older than those
starts at the oldest retained event, as `Conversations.events` does.

Open streams are capped per identity name (default `STREAMS_PER_IDENTITY`
in this process); one more is refused with `Conflict("too_many_streams")`
(HTTP 429).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter, deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Final

from temporalio.client import (
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from durable_tools.client import Conversations
from durable_tools.events import ConversationEvent
from durable_tools.worker.inbox.conflicts import QUERY_TIMEOUT, Conflict, no_worker, rpc_conflict

__all__ = ["FEED_BUFFER", "FEED_LINGER", "STREAMS_PER_IDENTITY", "EventFeeds"]

FEED_BUFFER: Final[int] = 256
"""Events a feed keeps for clients that join or fall behind (about 100 KB at most)."""

FEED_LINGER: Final[float] = 30.0
"""Seconds a feed keeps reading after its last client left (a reload finds it running)."""

STREAMS_PER_IDENTITY: Final[int] = 16
"""Open event streams one identity name may hold in one inbox process."""


@dataclass(eq=False)
class _Feed:
    """One conversation's event stream as this process reads it.

    Every event read with an offset above `floor` is in `recent`, in order.
    """

    workflow_id: str
    floor: int
    recent: deque[ConversationEvent]
    clients: int = 0
    ended: bool = False
    failure: BaseException | None = None
    task: asyncio.Task[None] | None = None
    stopping: asyncio.TimerHandle | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last(self) -> int:
        """The offset of the newest event read (`floor` when none is kept)."""
        return self.recent[-1].offset if self.recent else self.floor

    def publish(self, event: ConversationEvent) -> None:
        if len(self.recent) == self.recent.maxlen:
            self.floor = self.recent[0].offset
        self.recent.append(event)
        self.notify()

    def notify(self) -> None:
        woken, self._wake = self._wake, asyncio.Event()
        woken.set()

    def after(self, cursor: int) -> list[ConversationEvent]:
        """The kept events after offset `cursor`, oldest first."""
        newer: list[ConversationEvent] = []
        for event in reversed(self.recent):
            if event.offset <= cursor:
                break
            newer.append(event)
        newer.reverse()
        return newer

    async def wait(self, timeout: float) -> bool:
        """Wait for news (an event, the end, a failure); `False` after `timeout` seconds."""
        try:
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True


@dataclass
class EventFeeds:
    """This process's conversation feeds and who holds a stream of them.

    Attributes:
        conversations: The client API the feeds read with.
        buffer: Events each feed keeps (default `FEED_BUFFER`).
        linger: Seconds a feed without clients keeps reading (default `FEED_LINGER`).
        per_identity: Open streams per identity name (default `STREAMS_PER_IDENTITY`).
    """

    conversations: Conversations
    buffer: int = FEED_BUFFER
    linger: float = FEED_LINGER
    per_identity: int = STREAMS_PER_IDENTITY
    _feeds: dict[str, _Feed] = field(default_factory=dict[str, _Feed])
    _streams: Counter[str] = field(default_factory=Counter[str])

    def __len__(self) -> int:
        """The number of running feeds (conversations read by this process)."""
        return len(self._feeds)

    def open(
        self, workflow_id: str, name: str, *, after: int = -1, keepalive: float = 15.0
    ) -> AsyncGenerator[ConversationEvent | None]:
        """A stream of the conversation's events after offset `after`, for identity `name`.

        The caller has checked that `name` may view the conversation. The
        stream is claimed at once (counted against `per_identity`) and
        released when it is closed, ends, or is dropped unread.

        Args:
            workflow_id: The conversation.
            name: The identity's name the stream counts against.
            after: The offset of the last event already seen (`-1`: all retained).
            keepalive: Seconds without an event before the stream yields `None`.

        Returns:
            An async generator of events, `None` after `keepalive` quiet
            seconds; it ends after the conversation's last event. Close it
            with `aclose()`.

        Raises:
            Conflict: `too_many_streams` when `name` holds `per_identity`
                streams already. The generator raises `unavailable` or
                `no_worker` when the feed fails (a later stream starts a new
                feed).
        """
        if self._streams[name] >= self.per_identity:
            raise Conflict(
                "too_many_streams",
                f"{name} already follows {self.per_identity} event streams in this inbox; "
                "close a page (or a stream) and try again.",
            )
        self._streams[name] += 1
        feed = self._attach(workflow_id, after)
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._streams[name] -= 1
            if self._streams[name] <= 0:
                del self._streams[name]
            self._detach(feed)

        stream = self._read(feed, after, keepalive, release)
        weakref.finalize(stream, release)  # a stream dropped before its first read
        return stream

    async def close(self) -> None:
        """Stop every feed (the inbox stops); their open streams end."""
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            if feed.stopping is not None:
                feed.stopping.cancel()
            if feed.task is not None:
                feed.task.cancel()
        for feed in feeds:
            if feed.task is not None:
                await asyncio.gather(feed.task, return_exceptions=True)
            feed.ended = True
            feed.notify()

    def _attach(self, workflow_id: str, after: int) -> _Feed:
        feed = self._feeds.get(workflow_id)
        if feed is None:
            feed = _Feed(workflow_id, floor=after, recent=deque(maxlen=max(1, self.buffer)))
            self._feeds[workflow_id] = feed
            feed.task = asyncio.create_task(self._pump(feed), name=f"inbox feed {workflow_id}")
        feed.clients += 1
        if feed.stopping is not None:
            feed.stopping.cancel()
            feed.stopping = None
        return feed

    def _detach(self, feed: _Feed) -> None:
        feed.clients -= 1
        if feed.clients == 0 and self._feeds.get(feed.workflow_id) is feed:
            feed.stopping = asyncio.get_running_loop().call_later(self.linger, self._stop, feed)

    def _stop(self, feed: _Feed) -> None:
        feed.stopping = None
        if feed.clients == 0 and self._feeds.get(feed.workflow_id) is feed:
            del self._feeds[feed.workflow_id]
            if feed.task is not None:
                feed.task.cancel()

    async def _pump(self, feed: _Feed) -> None:
        """Read the conversation's stream into the feed until it ends or fails."""
        try:
            async for event in self.conversations.events(feed.workflow_id, after=feed.last):
                feed.publish(event)
            feed.ended = True
        except Exception as exc:  # told to every client as a Conflict
            feed.failure = exc
        finally:
            # Ended or failed: the next client starts a new feed.
            if self._feeds.get(feed.workflow_id) is feed:
                del self._feeds[feed.workflow_id]
            feed.notify()

    async def _read(
        self, feed: _Feed, after: int, keepalive: float, release: Callable[[], None]
    ) -> AsyncGenerator[ConversationEvent | None]:
        cursor = after
        try:
            while True:
                if cursor < feed.floor:
                    async for event in self._missed(feed, cursor):
                        yield event
                        cursor = max(cursor, event.offset)
                    cursor = max(cursor, feed.floor)  # the query read up to it (or lost it)
                    continue
                newer = feed.after(cursor)
                if newer:
                    for event in newer:
                        yield event
                        cursor = event.offset
                    continue
                if feed.failure is not None:
                    raise stream_conflict(feed.failure) from feed.failure
                if feed.ended:
                    return
                if not await feed.wait(keepalive):
                    yield None
        finally:
            release()

    async def _missed(self, feed: _Feed, cursor: int) -> AsyncIterator[ConversationEvent]:
        """The events after `cursor` up to the feed's `floor`, by query (a late or slow client)."""
        while cursor < feed.floor:
            try:
                async with asyncio.timeout(QUERY_TIMEOUT):
                    events, next_offset = await self.conversations.retained_events(
                        feed.workflow_id, after=cursor
                    )
            except TimeoutError as exc:
                raise no_worker() from exc
            except Exception as exc:
                raise stream_conflict(exc) from exc
            before = cursor
            for event in events:
                if event.offset > cursor:
                    yield event
                    cursor = event.offset
            cursor = max(cursor, next_offset - 1)
            if cursor == before:  # nothing retained there: the feed's buffer is all there is
                return


def stream_conflict(exc: BaseException) -> Conflict:
    """A failed event stream as the `Conflict` its readers are told."""
    if isinstance(exc, Conflict):
        return exc
    if isinstance(exc, RPCError):
        return rpc_conflict(exc, "the event stream")
    if isinstance(exc, WorkflowUpdateFailedError):
        return Conflict("unavailable", f"the event stream failed: {exc.cause or exc}")
    if isinstance(exc, WorkflowQueryFailedError | WorkflowQueryRejectedError):
        return Conflict("unavailable", f"the event stream's query failed: {exc}")
    return Conflict("unavailable", f"the event stream failed: {type(exc).__name__}: {exc}")
