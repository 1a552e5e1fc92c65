"""Runs this worker process holds: what an activity reads from them without a query.

A conversation's activities need what its workflow holds: the transcript
(`model.turn`), the agent configuration named by a request, the open call
a `tool.<name>` activity runs, the document of the policy version a live
change installed. The request carries most of it, and a worker
keeps what its own activities returned (`activities/transcript_cache.py`);
what is missing was read with a query to the workflow. A query competes
with workflow tasks: on a worker whose workflow slots are saturated (2,000
conversations at once on one worker, issue 26) it timed out (`no poller
seen for task queue recently`) and failed the activity.

But the workflow that scheduled the activity is, nearly always, in this
very process: the worker that ran the workflow task keeps the run in its
sticky cache, and the activity lands on a worker polling the same task
queue, usually the same one. So every `AgentWorkflow` run registers itself
here (`LIVE_RUNS.register`), by weak reference, and an activity asks the
run directly (`LIVE_RUNS.get(workflow_id, run_id)`), in process: no server
round trip, no workflow task. Only an activity on another worker, or one
whose run was evicted meanwhile, still queries.

Reads happen on the activity's thread while the run may be in a workflow
activation on another thread: a `LiveRun` answers only from state the
workflow appends to or reads (a dict lookup, a slice of a growing list,
prefix digests memoized under a lock), never from state it replaces, and
answers `None` for what it does not hold yet (a run being rebuilt by replay
that has not reached the activity's turn); the activity then queries.

Registering also tells the worker's per-conversation caches when to let go
(issue 26, item 4): a run that ends (`ended`) or leaves the process (the SDK
evicts it from its sticky cache, or it continued as new, and it is garbage
collected) is reported to every `Releases` feed; the caches drop what they
keep for it when they next read their feed (`Release.why`). Only a run
that ended other than by continue-as-new ends its conversation here: then
everything kept for the conversation goes. A run evicted while its
conversation goes on takes nothing with it: the conversation's next turn
rebuilds the same run by replay, usually on this worker, and its activity
reads the kept transcript instead of asking the run (with 2,000
conversations on a worker caching 1,000 runs, dropping it made every turn
after an eviction a full read). What is kept stays bounded: the caches hold
as many conversations as the workflow cache holds runs.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

if TYPE_CHECKING:
    from datetime import datetime

    from durable_tools.agents import AgentConfig
    from durable_tools.conversation import TranscriptPage, TranscriptSlice
    from durable_tools.policy_document import PolicyDocument
    from durable_tools.results import ToolCall

__all__ = [
    "LIVE_RUNS",
    "MAX_PENDING_RELEASES",
    "LiveRun",
    "LiveRuns",
    "Reads",
    "Release",
    "Releases",
]

MAX_PENDING_RELEASES: Final[int] = 65_536
"""Releases a feed holds before the oldest are dropped (a cache that misses
one still drops the entry by its own LRU bound)."""


class LiveRun(Protocol):
    """What an activity may read from a run in this process (`AgentWorkflow` is one).

    Each method may be called from any thread while the run is in an
    activation, and answers `None` when it cannot answer now: the caller
    then queries the workflow.
    """

    def live_agent_config(self, name: str) -> AgentConfig | None:
        """The run's configuration of agent `name` (the `agent_config` query's answer)."""
        ...

    def live_open_call(self, call_id: str) -> ToolCall | None:
        """The run's open call `call_id` (the `tool_call` query's answer)."""
        ...

    def live_policy(self, version: str) -> PolicyDocument | None:
        """The document of policy `version` the run installed (the `policy_version` answer)."""
        ...

    def live_transcript(self, request: TranscriptSlice) -> TranscriptPage | None:
        """The `transcript_slice` query's page, once the run holds items `[0, request.upto)`."""
        ...

    def live_followed(self, now: datetime) -> bool:
        """Whether someone follows the conversation's events at `now` (the `followed` query)."""
        ...


@dataclass(slots=True)
class Reads:
    """How a worker's activities read what their runs hold: counters since the worker started.

    Attributes:
        local: Reads answered by a run in this process (no query).
        queries: Queries sent to a workflow (`agent_config`, `tool_call`,
            `transcript_slice`, `followed`, `policy_version`).
    """

    local: int = 0
    queries: int = 0


@dataclass(frozen=True, slots=True)
class Release:
    """A run that left: what is kept for it may go.

    Attributes:
        workflow_id: The conversation's workflow id.
        run_id: The run's id.
        why: `"ended"`: the run ended other than by continue-as-new, so its
            conversation is over (everything kept for it goes).
            `"continued"`: it continued as new (what is keyed by the run
            goes; the conversation's transcript stays for the next run).
            `"evicted"`: the SDK dropped it from its sticky cache while the
            conversation goes on (nothing need go: the next turn rebuilds
            the same run, and reads the kept transcript instead of asking it).
    """

    workflow_id: str
    run_id: str
    why: Literal["ended", "continued", "evicted"]


class Releases:
    """One cache owner's feed of `Release`s, read with `take()` (bounded, thread-safe)."""

    def __init__(self, maxlen: int = MAX_PENDING_RELEASES) -> None:
        self._pending: deque[Release] = deque(maxlen=maxlen)

    def put(self, release: Release) -> None:
        """Add a release (from any thread; the oldest go past `maxlen`)."""
        self._pending.append(release)

    def take(self) -> list[Release]:
        """The releases since the last `take()`, oldest first."""
        taken: list[Release] = []
        while True:
            try:
                taken.append(self._pending.popleft())
            except IndexError:
                return taken


class LiveRuns:
    """The runs this process holds, by weak reference, and the feeds told when one leaves.

    A run stays registered while something else holds it (the SDK's
    workflow cache); `get` answers `None` once it is gone.
    """

    def __init__(self) -> None:
        self._runs: weakref.WeakValueDictionary[tuple[str, str], LiveRun] = (
            weakref.WeakValueDictionary()
        )
        self._continued: set[tuple[str, str]] = set()
        self._ended: set[tuple[str, str]] = set()
        self._feeds: weakref.WeakSet[Releases] = weakref.WeakSet()
        self._by_workflow: dict[str, set[str]] = {}  # registered, not collected
        # Reentrant: the garbage collector may run `_gone` on a thread that
        # holds the lock (an allocation under it triggered a collection).
        self._lock = threading.RLock()

    def register(self, workflow_id: str, run_id: str, run: LiveRun) -> None:
        """Register `run` (weakly); its garbage collection is reported as a release."""
        key = (workflow_id, run_id)
        with self._lock:
            self._runs[key] = run
            self._by_workflow.setdefault(workflow_id, set()).add(run_id)
        weakref.finalize(run, self._gone, key)

    def get(self, workflow_id: str, run_id: str) -> LiveRun | None:
        """The run, when this process holds it."""
        return self._runs.get((workflow_id, run_id))

    def __len__(self) -> int:
        """How many runs are registered and not collected."""
        return len(self._runs)

    def open(self) -> int:
        """How many registered runs have not ended nor continued as new.

        A run that ended stays registered until the garbage collector frees
        it (its objects are mostly cycles), which may be long after; this
        counts only the runs still serving a conversation.
        """
        with self._lock:
            return sum(
                1
                for key in list(self._runs.keys())
                if key not in self._ended and key not in self._continued
            )

    def holds(self, workflow_id: str) -> bool:
        """Whether a run of `workflow_id` that has not ended is registered."""
        with self._lock:
            return any(
                (workflow_id, run_id) not in self._ended
                and (workflow_id, run_id) not in self._continued
                for run_id in self._by_workflow.get(workflow_id, ())
            )

    def ended(self, workflow_id: str, run_id: str, *, continued: bool) -> None:
        """The run's code returned or raised; `continued`: by continue-as-new.

        A run that continued as new is released when it is collected (its
        conversation goes on); any other end is reported now, as the
        conversation's end.
        """
        key = (workflow_id, run_id)
        with self._lock:
            if continued:
                self._continued.add(key)
                return
            if key in self._ended:
                return
            self._ended.add(key)
        self._report(Release(workflow_id, run_id, "ended"))

    def feed(self, maxlen: int = MAX_PENDING_RELEASES) -> Releases:
        """A new feed of releases from now on (kept while its owner holds it)."""
        feed = Releases(maxlen)
        with self._lock:
            self._feeds.add(feed)
        return feed

    def _gone(self, key: tuple[str, str]) -> None:
        # Called by the garbage collector, on whatever thread collects.
        with self._lock:
            runs = self._by_workflow.get(key[0])
            if runs is not None:
                runs.discard(key[1])
                if not runs:
                    del self._by_workflow[key[0]]
            continued = key in self._continued
            self._continued.discard(key)
            if key in self._ended:
                self._ended.discard(key)
                return  # reported when it ended
        self._report(Release(key[0], key[1], "continued" if continued else "evicted"))

    def _report(self, release: Release) -> None:
        with self._lock:
            feeds = list(self._feeds)
        for feed in feeds:
            feed.put(release)


LIVE_RUNS: Final[LiveRuns] = LiveRuns()
"""This process's registry (a pass-through module: workflow code and activities share it)."""
