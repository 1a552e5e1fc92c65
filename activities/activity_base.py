"""What the model activity and the tool activity share: the worker's toolkits and memories.

`ActivitiesBase` holds the worker's toolkits, model adapters, agents and the
bounded memories of recorded-by-reference inputs; `model_activity.py` and
`tool_activity.py` add the two activities, `agent_activities.py` joins them.
The names of the activities and of the workflow queries they read are here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_tools._wire import (
    AGENT_CONFIG_QUERY as AGENT_CONFIG_QUERY,
)
from durable_tools._wire import (
    MODEL_TURN_ACTIVITY as MODEL_TURN_ACTIVITY,
)
from durable_tools._wire import (
    TOOL_ACTIVITY_PREFIX as TOOL_ACTIVITY_PREFIX,
)
from durable_tools._wire import (
    TOOL_CALL_QUERY as TOOL_CALL_QUERY,
)
from durable_tools._wire import (
    TRANSCRIPT_QUERY as TRANSCRIPT_QUERY,
)
from durable_tools.activities.context_window import ContextWindow
from durable_tools.activities.conversation_memory import ByConversation
from durable_tools.activities.failure_log import install_expected_failure_filter
from durable_tools.activities.policy_versions import PolicyVersions
from durable_tools.activities.transcript_cache import (
    DEFAULT_CACHE_ENTRIES,
    ProducedItems,
    TranscriptCache,
)
from durable_tools.agents import Agent, check_agents
from durable_tools.budgets import ModelPrice
from durable_tools.context import ContextStrategyFunction
from durable_tools.conversation import AgentConfig
from durable_tools.descriptor import ToolDescriptor
from durable_tools.executor import PreparedCall
from durable_tools.live_runs import LIVE_RUNS, LiveRun, Reads
from durable_tools.models.base import Model
from durable_tools.policies import Policy
from durable_tools.redact import Redactor
from durable_tools.results import ToolCall
from durable_tools.tool_threads import ToolThreads
from durable_tools.toolkit import Toolkit, compose

if TYPE_CHECKING:  # the mcp SDK is imported only by workers that use it
    from durable_tools.mcp.toolset import McpToolsets


_K = TypeVar("_K")
_V = TypeVar("_V")

_AGENTS_PER_CONVERSATION = 4
"""Agent configurations kept per conversation on average (a handoff adds one)."""

_CALLS_PER_CONVERSATION = 16
"""Planned calls kept per conversation on average (each goes when its activity returns)."""


class PlannedHere(NamedTuple):
    """A call the model activity planned on this worker, for its tool activity here.

    Attributes:
        call: The call as planned.
        digest: Its `call_digest` (the plan's `arguments_hash`).
        validated: Its tool and validated input (`prepare_call`), for the
            first attempt of its tool activity only (then cleared: a retry
            validates again, with an input no earlier attempt held); None
            where planning let application code see the input (a
            `needs_approval` function) or the tool is not local.
    """

    call: ToolCall
    digest: str
    validated: PreparedCall | None = None


QUERIES_SENT: Final[Counter[str]] = Counter()
"""Queries this process's activities sent, by query name, since it started (never reset).

`agent_config`, `transcript_slice` and `tool_call` are what a worker asks when
it lacks what another worker (or its own earlier self) read or planned;
`followed` is asked while a model streams text. For benchmarks
(`bench/scale.py`) and tests: read it before and after, and compare.
"""

MAX_FALLBACK_QUERIES = 16
"""Queries a process's activities have in flight at once, at most (`FallbackQueries`)."""


class FallbackQueries:
    """The bound on the queries a process's activities send to their runs at once.

    An activity queries its run only when its worker holds neither the run
    (`durable_tools.live_runs`) nor what an earlier activity of the run read
    or planned: another worker ran the previous turn, or the run was evicted
    from the sticky cache. That is when workflow tasks queue up, and each
    query waits for a workflow task slot like a turn does; unbounded, a
    burst of them competes with the turns that would let the conversations
    move on. At most `limit` are in flight per event loop (a worker runs
    its activities on one); what is needed to go on waits for a slot
    (`slot`), what is only worth asking when it is cheap (whether anyone
    follows the conversation, for streaming text) is skipped while all are
    taken (`busy`).

    Args:
        limit: Queries in flight at once (default `MAX_FALLBACK_QUERIES`, 16).
    """

    def __init__(self, limit: int = MAX_FALLBACK_QUERIES) -> None:
        self.limit = max(1, limit)
        self.waited = 0
        """Queries that waited for a slot (since the process started)."""
        self.skipped = 0
        """Optional queries skipped because every slot was taken."""
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def _gate(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.limit)
        return gate

    def busy(self) -> bool:
        """Every slot is taken: an optional query is skipped (counted in `skipped`)."""
        if self._gate().locked():
            self.skipped += 1
            return True
        return False

    @contextlib.asynccontextmanager
    async def slot(self, name: str) -> AsyncGenerator[None]:
        """Hold a slot while the query `name` runs (counted in `QUERIES_SENT`)."""
        gate = self._gate()
        if gate.locked():
            self.waited += 1
        async with gate:
            QUERIES_SENT[name] += 1
            yield


FALLBACK_QUERIES: Final = FallbackQueries()
"""The process's bound on fallback queries (`FallbackQueries`)."""


class ActivitiesBase:
    """The state of `AgentActivities` (see there) and the toolkit lookup both activities use."""

    def __init__(
        self,
        toolkits: Mapping[str, Toolkit],
        models: Mapping[str, Model],
        *,
        mcp: McpToolsets | None = None,
        redact: Callable[[str], str] | None = None,
        agents: Mapping[str, Agent] | None = None,
        allow_offline_models: bool = False,
        scripts_dir: str | os.PathLike[str] | None = None,
        transcripts: TranscriptCache | None = None,
        max_payload_bytes: int | None = None,
        context_strategies: Mapping[str, ContextStrategyFunction] | None = None,
        tool_threads: int | None = None,
        policies: Mapping[str, Policy] | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        # An expected model failure: one line on the console (`failure_log.py`).
        install_expected_failure_filter()
        self.tool_threads = ToolThreads(tool_threads)
        self.max_payload_bytes = max_payload_bytes
        self.redact: Callable[[str], str] = redact or Redactor.from_environment()
        self.toolkits = dict(toolkits)
        self.models = dict(models)
        self.agents = dict(agents or {})
        self.policies = dict(policies or {})
        self.prices = dict(prices or {})
        # The webhooks by name with their event kinds (no URLs, no secrets):
        # recorded in the plans of calls that wait for a person.
        self.notify: dict[str, list[str]] = {}
        self.context = ContextWindow(context_strategies)
        check_agents(
            self.agents,
            toolkits=self.toolkits,
            models=self.models,
            allow_offline_models=allow_offline_models,
            context_strategies=self.context.functions,
        )
        self.allow_offline_models = allow_offline_models
        self.scripts_dir = Path(scripts_dir if scripts_dir is not None else ".").resolve()
        self._with_output: dict[tuple[str, int], tuple[Toolkit, Toolkit]] = {}
        # By toolkit identity (a toolkit and its tools never change; MCP
        # refreshes make new toolkits): rendering and hashing the descriptors
        # every turn cost about 0.07 ms. See `_descriptors_of`.
        self._descriptors: OrderedDict[int, tuple[Toolkit, list[ToolDescriptor], str]] = (
            OrderedDict()
        )
        self.deps: Any = None
        self.mcp = mcp
        self._with_mcp: dict[str, tuple[int, Toolkit]] = {}
        self.transcripts = transcripts if transcripts is not None else TranscriptCache()
        # What recorded inputs name instead of holding (issue 12, slim records):
        # agent configurations by run and name, and the calls this worker planned.
        # By conversation, so one that ends or leaves the worker goes at once
        # (`let_go`); `size_for` sets the bounds with the workflow cache's.
        conversations = self.transcripts.max_entries or DEFAULT_CACHE_ENTRIES
        self._agent_configs: ByConversation[tuple[str, str], AgentConfig] = ByConversation(
            max_conversations=conversations, max_entries=conversations * _AGENTS_PER_CONVERSATION
        )
        self._planned: ByConversation[str, PlannedHere] = ByConversation(
            max_conversations=conversations, max_entries=conversations * _CALLS_PER_CONVERSATION
        )
        self.produced = ProducedItems()
        # Runs that ended or left this process (durable_tools.live_runs).
        self._releases = LIVE_RUNS.feed()
        self.reads = Reads()
        """Reads of what runs hold: in process, or by query."""
        self.policy_versions = PolicyVersions(self.reads, FALLBACK_QUERIES.slot)
        """Policy versions live changes installed: loaded by version, compiled once each."""
        self.live_reads = True
        """Read what a run in this process holds without a query (off: always query)."""

    def live_run(self, workflow_id: str, run_id: str | None) -> LiveRun | None:
        """The run, when this process holds it and `live_reads` is on."""
        return LIVE_RUNS.get(workflow_id, run_id) if self.live_reads and run_id else None

    def size_for(self, conversations: int) -> None:
        """Bound every per-conversation memory by `conversations` (the workflow cache's size).

        A worker holds at most that many conversations' runs in its sticky
        cache (`Worker(max_cached_workflows=...)`); its activities' memories
        of them (transcripts, agent configurations, planned calls) are kept
        for as many, so a conversation whose run is cached has its entries
        too, and none outlives its run by much (`let_go`).
        """
        conversations = max(1, conversations)
        if self.transcripts.max_entries > 0:  # 0: turned off, and stays so
            self.transcripts.max_entries = conversations
        self._agent_configs.max_conversations = conversations
        self._agent_configs.max_entries = conversations * _AGENTS_PER_CONVERSATION
        self._planned.max_conversations = conversations
        self._planned.max_entries = conversations * _CALLS_PER_CONVERSATION
        self.context.max_runs = conversations

    def let_go(self) -> int:
        """Drop what is kept for conversations that ended or left this worker; how many.

        Read at the start of every activity from this worker's feed of
        releases (`durable_tools.live_runs`): a run that ended takes every
        entry of its conversation with it (unless another run of it is live
        here); one that continued as new only the entries keyed by the run
        (agent configurations); one evicted from the sticky cache nothing
        (its next turn comes back to the same run). Every memory stays
        bounded by `size_for` meanwhile.
        """
        released = self._releases.take()
        for release in released:
            workflow_id = release.workflow_id
            if release.why == "ended" and not LIVE_RUNS.holds(workflow_id):
                self.transcripts.discard(workflow_id)
                self.produced.release(workflow_id)
                self._agent_configs.release(workflow_id)
                self._planned.release(workflow_id)
                self.context.release(workflow_id)
            elif release.why == "continued":
                self._agent_configs.release(workflow_id, _of_run(release.run_id))
        return len(released)

    def _toolkit(self, name: str) -> Toolkit:
        try:
            base = self.toolkits[name]
        except KeyError:
            raise ApplicationError(
                f"no toolkit named {name!r} on this worker (registered: {sorted(self.toolkits)})",
                type="ConfigurationError",
                non_retryable=True,
            ) from None
        if self.mcp is None:
            return base
        version = self.mcp.version
        cached = self._with_mcp.get(name)
        if cached is None or cached[0] != version:
            # Checked at worker start too; a refreshed list that collides fails loudly here.
            cached = (version, compose(base, self.mcp.toolkit(), label=name))
            self._with_mcp[name] = cached
        return cached[1]


@contextlib.asynccontextmanager
async def heartbeating(details: list[Any] | None = None) -> AsyncGenerator[None]:
    """Heartbeat every third of the activity's heartbeat timeout until the block ends.

    The first heartbeat is sent a third of the timeout after the start.

    Without heartbeats, a worker lost during a provider request is noticed
    only when the start-to-close timeout (`model_timeout`, 300 s) passes.
    Each heartbeat records `details` as they are then (a heartbeat without
    them would replace what an earlier one recorded).
    """
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return
    beat = _Heartbeat(max(timeout.total_seconds() / 3, 0.05), details)
    try:
        yield
    finally:
        beat.cancel()


class _Heartbeat:
    """A heartbeat every `interval` seconds from a timer on the running loop (`heartbeating`).

    A timer, not a task: a turn shorter than `interval` (most) costs neither
    the server a heartbeat nor the loop a task. The callback runs in the
    activity's context (`call_later` copies it). An object rather than a
    closure that schedules itself: such a closure refers to itself through
    its cell, a cycle that kept each activity's context (its info, events and
    outbound objects, about 25 objects) until a full collection of the
    garbage collector; `cancel` leaves nothing behind that refers to it.
    """

    def __init__(self, interval: float, details: list[Any] | None) -> None:
        self.interval, self.details = interval, details
        self.loop = asyncio.get_running_loop()
        self.timer = self.loop.call_later(interval, self)

    def __call__(self) -> None:
        activity.heartbeat(*(self.details or ()))
        self.timer = self.loop.call_later(self.interval, self)

    def cancel(self) -> None:
        """Stops the heartbeats (the timer drops its reference to this object)."""
        self.timer.cancel()


def _of_run(run_id: str) -> Callable[[tuple[str, str]], bool]:
    """Whether an agent configuration's key `(run_id, name)` is of run `run_id`."""
    return lambda key: key[0] == run_id


def remember(memory: OrderedDict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """Keep `value` under `key`, dropping the least recently kept past `limit` entries."""
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > limit:
        memory.popitem(last=False)
