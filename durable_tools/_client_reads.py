"""What `durable_tools.client.Conversations` reads: pending, history, events, status, result."""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from typing import Any, cast, overload

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStreamClient
from temporalio.converter import PayloadConverter

from durable_tools._client_support import ConversationsBase, OutputT
from durable_tools._wire import TRANSCRIPT_QUERY
from durable_tools.conversation import (
    ConversationResult,
    ConversationStatus,
    PendingState,
    TranscriptPage,
    TranscriptSlice,
)
from durable_tools.errors import NoFinalOutput
from durable_tools.events import EVENTS_TOPIC, ConversationEvent
from durable_tools.policy_reads import (
    PolicyDiff,
    latest_verdict,
    read_plans,
    summarize_disagreements,
)
from durable_tools.policy_verdict import PolicyVerdict
from durable_tools.transcript import TranscriptItem
from durable_tools.transcript_reader import (
    QUERY_PAGE_BYTES,
    OlderWorkflowCode,
    PrefixMismatch,
    read_pages,
)

# What `transcript_slice` answers: a page, or a list from older workflow code.
_TRANSCRIPT_ANSWER: Any = TranscriptPage | list[TranscriptItem]

# The Workflow Streams poll, as a query: it answers at once from the retained log.
_STREAM_POLL = "__temporal_workflow_stream_poll"


class ConversationReads(ConversationsBase):
    """The reading methods of `Conversations` (queries, the event stream, the result)."""

    async def pending(self, workflow_id: str) -> PendingState:
        """What the conversation waits for (query; needs a running worker)."""
        return await self._handle(workflow_id).query("pending", result_type=PendingState)

    async def policy_verdict(self, workflow_id: str, call_id: str) -> PolicyVerdict | None:
        """Which approval policy version and rule decided a call, as its history records it.

        Reads the workflow's history (no worker needed), newest run first,
        back through continue-as-new, for the model turn that planned the
        call, or the latest live change that decided it again while it
        waited (`policy.reevaluate-v1`; docs/policies.md, "Live change").
        `durable-tools policy explain ID CALL` prints it with
        `durable_tools.policy_verdict.explain_verdict`.

        Args:
            workflow_id: The conversation's workflow id.
            call_id: The tool call's id.

        Returns:
            The recorded verdict, or `None` when no policy decided the call
            (the tool's own `needs_approval` did) or no such call was planned.

        Raises:
            temporalio.service.RPCError: The conversation does not exist
                (`NOT_FOUND`) or the server cannot be reached.
        """
        return await latest_verdict(self.client, workflow_id, call_id)

    async def policy_diff(
        self, query: str = "", *, limit: int = 100, concurrency: int = 8
    ) -> PolicyDiff:
        """What the agents' candidate policies would have decided otherwise (shadow mode).

        Lists conversations through Temporal's visibility (`AgentWorkflow`
        executions, newest first, each conversation once however many runs
        it has) and reads each one's history like `policy_verdict`, through
        continue-as-new (no worker needed). Counts the calls whose plan
        records a disagreement (`PlannedCall.shadow`; docs/policies.md,
        "Shadow mode").

        Args:
            query: A visibility query ANDed to `WorkflowType = 'AgentWorkflow'`
                (e.g. `TaskQueue = 'support'`, `StartTime > '2026-11-01T00:00:00Z'`);
                default: every conversation.
            limit: Most conversations read (default 100).
            concurrency: Histories read at a time (default 8).

        Returns:
            The counts per (active rule, candidate rule, effects) and per
            tool, with example conversation ids.
        """
        clause = "WorkflowType = 'AgentWorkflow'" + (f" AND ({query})" if query else "")
        seen: list[str] = []
        async for execution in self.client.list_workflows(clause):
            if execution.id not in seen:
                seen.append(execution.id)
                if len(seen) >= limit:
                    break
        read = await read_plans(self.client, seen, concurrency=concurrency)
        return summarize_disagreements(read)

    async def history(
        self, workflow_id: str, *, start: int = 0, limit: int | None = None
    ) -> list[TranscriptItem]:
        """The transcript's items from `start`, in order, across every run (queries).

        Needs a running worker (it replays the earlier runs a page needs).

        Args:
            workflow_id: The conversation's workflow id.
            start: Conversation-wide index of the first item (default 0).
            limit: Most items to return (default: all from `start`).

        Returns:
            Items `[start, start + limit)` of the transcript (fewer when it
            is shorter), read in pages of about 1 MB (`history_pages`).

        Raises:
            TranscriptUnavailable: An earlier run that holds a needed item
                is gone (past the namespace's retention).
        """
        items: list[TranscriptItem] = []
        async for page in self.history_pages(workflow_id, start=start, limit=limit):
            items.extend(page)
        return items

    async def history_pages(
        self, workflow_id: str, *, start: int = 0, limit: int | None = None
    ) -> AsyncGenerator[list[TranscriptItem]]:
        """The transcript's items from `start` as they are read: pages of about 1 MB.

        A conversation that continued as new holds its older items in its
        earlier runs (`durable_tools.carry`); each page is asked of the
        newest run that holds it, so only the pages the caller reads are
        fetched (`durable_tools.transcript_reader`). Arguments as `history`.

        Yields:
            Non-empty lists of items, in order.

        Raises:
            TranscriptUnavailable: As `history`.
        """
        handle = self._handle(workflow_id)
        length = (await self.status(workflow_id)).transcript_items
        upto = length if limit is None else min(length, start + max(0, limit))

        async def query(
            run_id: str | None, arg: TranscriptSlice
        ) -> TranscriptPage | list[TranscriptItem]:
            ask = (
                handle
                if run_id is None
                else self.client.get_workflow_handle(workflow_id, run_id=run_id)
            )
            answer: TranscriptPage | list[TranscriptItem] = await ask.query(
                TRANSCRIPT_QUERY, arg, result_type=_TRANSCRIPT_ANSWER
            )
            return answer

        index = max(0, start)
        try:
            async for page in read_pages(query, index, upto):
                index += len(page.items)
                yield page.items
        except (OlderWorkflowCode, PrefixMismatch):
            # A worker running code from before conversation-wide pages: lists.
            while index < upto:
                items = await query(
                    None, TranscriptSlice(start=index, upto=upto, max_bytes=QUERY_PAGE_BYTES)
                )
                found = items.items if isinstance(items, TranscriptPage) else items
                if not found:
                    return
                index += len(found)
                yield found

    async def events(
        self, workflow_id: str, *, after: int = -1, poll_cooldown: float = 0.1
    ) -> AsyncIterator[ConversationEvent]:
        """The conversation's events after offset `after`, as they happen.

        A resumable async iterator over the conversation's event stream
        (`durable_tools.events`; Temporal's Workflow Streams): it long-polls
        with an update (a worker must run while the conversation does),
        follows continue-as-new, and ends once the conversation has ended and
        its remaining events were read. Each event's `offset` is its position
        in the stream: pass the last one you handled as `after` to resume
        without gaps or repeats. Offsets older than the stream retains
        (`RETAINED_EVENTS` kept at each continue-as-new) resume from the
        oldest retained event.

        Args:
            workflow_id: The conversation.
            after: The offset of the last event already seen (default -1:
                from the first event).
            poll_cooldown: Seconds between polls when caught up (default 0.1).

        Yields:
            `ConversationEvent`s in order, with `offset` set. Anyone who may
            signal the workflow can publish to its stream: an item that is
            not a `ConversationEvent` is skipped (its offset is not yielded).
        """
        stream = WorkflowStreamClient.create(self.client, workflow_id)
        converter = self.client.data_converter.payload_converter
        async for item in stream.subscribe(
            [EVENTS_TOPIC],
            from_offset=after + 1,
            result_type=RawValue,
            poll_cooldown=timedelta(seconds=poll_cooldown),
        ):
            event = _event_of(converter, item.data.payload, item.offset)
            if event is not None:
                yield event

    async def retained_events(
        self, workflow_id: str, *, after: int = -1
    ) -> tuple[list[ConversationEvent], int]:
        """The retained events after offset `after`, read now: one page, by a query.

        Unlike `events`, this sends no update: it takes none of the
        workflow's 10 in-flight update slots and records nothing in its
        history (the Workflow Streams poll, asked as a query, answers at
        once from the retained log). It needs a running worker, as any
        query. Offsets older than the conversation retains
        (`RETAINED_EVENTS` kept at each continue-as-new) read from the
        oldest retained event.

        Args:
            workflow_id: The conversation.
            after: The offset of the last event already seen (default -1).

        Returns:
            `(events, next_offset)`: the events of one page (at most about
            1 MB of them, in order, `offset` set; items that are not
            `ConversationEvent`s skipped) and the offset of the first item
            not read (pass `next_offset - 1` as `after` to read on; equal to
            the stream's length once everything was read).
        """
        handle = self._handle(workflow_id)
        result = await handle.query(
            _STREAM_POLL,
            PollInput(topics=[EVENTS_TOPIC], from_offset=max(0, after + 1)),
            result_type=PollResult,
        )
        converter = self.client.data_converter.payload_converter
        events: list[ConversationEvent] = []
        for item in result.items:
            try:
                payload = Payload.FromString(base64.b64decode(item.data))
            except Exception:  # untrusted: as in `events`, garbage is skipped
                continue
            event = _event_of(converter, payload, item.offset)
            if event is not None:
                events.append(event)
        return events, result.next_offset

    async def status(self, workflow_id: str) -> ConversationStatus:
        """What the loop is doing (query; needs a running worker)."""
        return await self._handle(workflow_id).query("status", result_type=ConversationStatus)

    @overload
    async def result(self, workflow_id: str) -> ConversationResult: ...

    @overload
    async def result(self, workflow_id: str, *, output_type: type[OutputT]) -> OutputT: ...

    async def result(
        self, workflow_id: str, *, output_type: type[OutputT] | None = None
    ) -> ConversationResult | OutputT:
        """Wait for the conversation to end and return its result.

        Follows continue-as-new runs to the final one.

        Args:
            workflow_id: The conversation.
            output_type: The pydantic model of the agent's `finish` output
                (`finish_tool(output_type=...)`); given, the `finish` output
                is returned as that type instead of the `ConversationResult`.

        Returns:
            The `ConversationResult`, or the output as `output_type`.

        Raises:
            NoFinalOutput: `output_type` was given and the conversation ended
                without `finish` (idle timeout, turn limit); it carries the
                `ConversationResult`.
            pydantic.ValidationError: The output does not fit `output_type`
                (the agent's `finish` tool has another schema).
        """
        handle = self.client.get_workflow_handle(workflow_id, result_type=ConversationResult)
        result: ConversationResult = await handle.result()
        if output_type is None:
            return result
        if result.status != "finished":
            raise NoFinalOutput(result)
        return output_type.model_validate(result.output)


def _event_of(
    converter: PayloadConverter, payload: Payload, offset: int
) -> ConversationEvent | None:
    """The stream item at `offset` as a `ConversationEvent`, or `None` if it is not one."""
    try:
        event = cast(object, converter.from_payload(payload, ConversationEvent))
    except Exception:  # untrusted: garbage must not end a reader's iteration
        return None
    if isinstance(event, ConversationEvent):  # e.g. a `binary/null` payload is None
        return event.model_copy(update={"offset": offset})
    return None
