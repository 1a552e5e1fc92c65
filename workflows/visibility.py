"""What a conversation shows of itself: state, what is pending, search attributes, events.

`Visibility` holds the loop's state name (`status().state`), the event stream
(`durable_tools.events`, published by `event`) and what was last published
as search attributes and current details (`publish`, which upserts only
when what is pending changes). The views are pure functions of the book
(`DecisionBook`), the pause and a model failure: `pending_kinds`,
`pending_details`, `calls_state`, `settled`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic_core import to_json
from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStream

from durable_tools.workflows.event_log import EventStream, event_payload

with workflow.unsafe.imports_passed_through():
    from durable_tools.budgets import BudgetExceeded
    from durable_tools.conversation import (
        ConversationOptions,
        ModelFailure,
        PendingApproval,
        PendingInteraction,
    )
    from durable_tools.events import EVENTS_TOPIC, FOLLOW_WINDOW, ConversationEvent

__all__ = [
    "NO_SEARCH_ATTRIBUTES_PATCH",
    "SENDER_EVENTS_PATCH",
    "PENDING_COUNT",
    "PENDING_KINDS",
    "Visibility",
    "calls_state",
    "pending_details",
    "pending_kinds",
    "settled",
]

PENDING_COUNT = SearchAttributeKey.for_int("DurableToolsPendingCount")
"""Search attribute: approvals + interactions waiting (0 when none)."""

PENDING_KINDS = SearchAttributeKey.for_keyword_list("DurableToolsPendingKinds")
"""Search attribute: what is pending (`approval`, `interaction`, `pause`, `model_failed`)."""

NO_SEARCH_ATTRIBUTES_PATCH = "durable-tools/no-search-attributes"
"""Patch id a run records when a worker with search attributes off runs it.

`DurableToolsPlugin(search_attributes=False)` activates this patch (the
worker's `patch_activation_callback`); the marker in history then makes every
replay skip the upserts too, whatever the replaying worker's setting, and a
history without it (every history recorded before) upserts as before.
"""

SENDER_EVENTS_PATCH = "sender-events"
"""Patch id: runs after it publish `model_retry_requested` and `conversation_resumed`.

An event can end a reader's waiting poll (an update) in an earlier workflow
task than before, so events published where none was are patched; fields
added to events that were already published (`sent_by`, `operator`) need
no patch (issue 23, item 2).
"""

_EVENT_FIELDS = frozenset(ConversationEvent.model_fields) - {"kind", "at", "offset"}
"""The fields the loop sets on an event beside its kind and time."""

_STREAM_POLL = "__temporal_workflow_stream_poll"  # Workflow Streams' poll update

_SETTLED_STATES = ("idle", "paused", "model_failed", "budget_exceeded", "finished", "cancelled")


def pending_kinds(
    approvals: Mapping[str, PendingApproval],
    interactions: Mapping[str, PendingInteraction],
    paused: str | None,
    model_failed: ModelFailure | None,
    budget: BudgetExceeded | None = None,
) -> tuple[str, ...]:
    """What is pending, in the order of the `DurableToolsPendingKinds` search attribute."""
    return tuple(
        kind
        for kind, present in (
            ("approval", bool(approvals)),
            ("interaction", bool(interactions)),
            ("pause", paused is not None),
            ("model_failed", model_failed is not None),
            ("budget_exceeded", budget is not None),
        )
        if present
    )


def pending_details(
    approvals: Mapping[str, PendingApproval],
    interactions: Mapping[str, PendingInteraction],
    paused: str | None,
    model_failed: ModelFailure | None,
    workflow_id: str,
    budget: BudgetExceeded | None = None,
) -> str:
    """The current details (Markdown) listing what is pending; `""` when nothing is."""
    lines = [
        f"- approval: `{a.summary}` (until {a.deadline:%Y-%m-%d %H:%M} UTC)"
        for a in approvals.values()
    ]
    lines += [f"- question: `{i.tool}` call `{i.call_id}`" for i in interactions.values()]
    if paused is not None:
        lines.append(f"- paused: {paused}")
    if model_failed is not None:
        lines.append(
            f"- model_failed (turn {model_failed.turn}, {model_failed.type}): "
            f"{model_failed.message}\n"
            f"  run it again: `durable-tools retry {workflow_id}`"
        )
    if budget is not None:
        lines.append(
            f"- budget_exceeded (turn {budget.turn}): {budget.message}\n"
            f"  raise it: `durable-tools budget raise {workflow_id} --tokens N --cost USD`"
        )
    return "**Pending**\n" + "\n".join(lines) if lines else ""


def calls_state(
    approvals: Mapping[str, PendingApproval],
    interactions: Mapping[str, PendingInteraction],
    paused: str | None,
    sleepers: int,
) -> str:
    """The `status` state while a turn's calls are open: what they wait on, if anything.

    Calls of one turn wait side by side (a sleep, a pause, approvals):
    when one wait ends, the state is what the others still wait on.
    """
    if approvals or interactions:
        return "waiting"
    if paused is not None:
        return "paused"
    if sleepers:
        return "sleeping"
    return "tools"


def settled(
    state: str,
    approvals: Mapping[str, PendingApproval],
    interactions: Mapping[str, PendingInteraction],
    paused: str | None,
) -> bool:
    """Whether the loop waits for someone (`await_turn` returns): idle, a person, a pause."""
    return state in _SETTLED_STATES or bool(approvals) or bool(interactions) or paused is not None


class Visibility:
    """The loop's state name, its event stream and what it last published.

    Args:
        owner: The workflow instance (a dropped instance publishes nothing).
        options: The conversation's options (`search_attributes`).
        stream_state: The event stream carried from the previous run.
        embedded: The loop runs inside another workflow (no stream of its own).
    """

    def __init__(
        self,
        owner: object,
        options: ConversationOptions,
        stream_state: Any,
        embedded: bool,
    ) -> None:
        self._owner = owner
        self._options = options
        # Not settled until the loop says where it is (an `await_turn` that a
        # new run's first activation handles before its loop must wait).
        self.state = "starting"
        self._published: tuple[int, tuple[str, ...], str] | None = None
        # The event stream (durable_tools.events): handlers registered here.
        # (Only inside a workflow: unit tests build the class directly.)
        self.stream = (
            EventStream(prior_state=stream_state)
            if workflow.in_workflow() and not embedded
            else None
        )
        # Readers of the stream, for the `followed` query (see `_count_polls`).
        self._polls = 0
        self._last_poll: datetime | None = None
        if self.stream is not None:
            self._count_polls(self.stream)

    def _current(self) -> bool:
        return workflow.in_workflow() and workflow.instance() is self._owner

    def event(self, kind: Any, **fields: Any) -> None:
        """Publish a `ConversationEvent` to the conversation's stream (durable_tools.events)."""
        stream = self.stream
        if stream is None or not self._current():
            return  # a dropped instance's `finally` blocks (see `publish`)
        # Encoded here, as `json/plain` (what the pydantic converter writes),
        # from the fields the loop sets, without their None: a tool turn
        # publishes four events, and building, validating and serializing a
        # `ConversationEvent` through the converter's type probes (each a
        # sandboxed `isinstance`) was a measurable part of a turn's CPU.
        # Readers validate what they read (`ConversationEvent`, which leaves
        # unset fields None); a field it does not have is a bug here.
        unknown = fields.keys() - _EVENT_FIELDS
        if unknown:
            raise TypeError(f"ConversationEvent has no field {sorted(unknown)}")
        event = {"kind": kind, "at": workflow.now()}
        event.update((name, value) for name, value in fields.items() if value is not None)
        stream.publish_stored(EVENTS_TOPIC, event_payload(to_json(event)))

    def _count_polls(self, stream: WorkflowStream) -> None:
        """Wrap the stream's poll update so the `followed` query knows about readers.

        Only state the `followed` query reads changes: no command, so
        recorded histories replay unchanged.
        """
        poll = stream._on_poll  # pyright: ignore[reportPrivateUsage]
        validate = stream._validate_poll  # pyright: ignore[reportPrivateUsage]

        async def counted(payload: PollInput) -> PollResult:
            self._polls += 1
            try:
                return await poll(payload)
            finally:
                self._polls -= 1
                if self._current():
                    self._last_poll = workflow.now()

        workflow.set_update_handler(_STREAM_POLL, counted, validator=validate)  # pyright: ignore[reportUnknownMemberType]

    def followed(self, now: datetime | None = None) -> bool:
        """Whether a reader follows the event stream: a poll waits, or one ended lately.

        `now`: the time to judge "lately" by (default `workflow.now()`; an
        activity reading the run in process passes its own clock, as it
        runs outside the workflow's event loop).
        """
        if self._polls:
            return True
        last = self._last_poll
        if last is None:
            return False
        return ((now or workflow.now()) - last).total_seconds() <= FOLLOW_WINDOW

    def stream_end(self) -> int:
        """The offset after the stream's last event (0 without a stream)."""
        stream = self.stream
        return stream._on_offset() if stream is not None else 0  # pyright: ignore[reportPrivateUsage]

    def publish(
        self,
        approvals: Mapping[str, PendingApproval],
        interactions: Mapping[str, PendingInteraction],
        paused: str | None,
        model_failed: ModelFailure | None,
        budget: BudgetExceeded | None = None,
    ) -> None:
        """Update search attributes and current details when what is pending changes."""
        if not self._current():
            # A dropped instance's coroutines are closed by the garbage collector
            # (GeneratorExit at their await) and the `finally` blocks calling
            # this run outside this workflow's event loop (e.g. after a worker
            # shutdown without eviction): touch no workflow API then.
            return
        kinds = pending_kinds(approvals, interactions, paused, model_failed, budget)
        count = len(approvals) + len(interactions) + (model_failed is not None)
        count += budget is not None
        failed = model_failed.message if model_failed is not None else ""
        published = (count, kinds, failed + (budget.message if budget is not None else ""))
        if self._published == published:
            return
        self._published = published
        if self._options.search_attributes and not workflow.patched(NO_SEARCH_ATTRIBUTES_PATCH):
            workflow.upsert_search_attributes(  # pyright: ignore[reportUnknownMemberType]
                [PENDING_COUNT.value_set(count), PENDING_KINDS.value_set(list(kinds))]
            )
        workflow.set_current_details(
            pending_details(
                approvals, interactions, paused, model_failed, workflow.info().workflow_id, budget
            )
        )
