"""What `durable_tools.client.Conversations` reads: pending, history, events, status, result."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from typing import Any, cast, overload

from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStreamClient

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
from durable_tools.transcript import TranscriptItem
from durable_tools.transcript_reader import (
    QUERY_PAGE_BYTES,
    OlderWorkflowCode,
    PrefixMismatch,
    read_pages,
)

# What `transcript_slice` answers: a page, or a list from older workflow code.
_TRANSCRIPT_ANSWER: Any = TranscriptPage | list[TranscriptItem]


class ConversationReads(ConversationsBase):
    """The reading methods of `Conversations` (queries, the event stream, the result)."""

    async def pending(self, workflow_id: str) -> PendingState:
        """What the conversation waits for (query; needs a running worker)."""
        return await self._handle(workflow_id).query("pending", result_type=PendingState)

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
            try:
                event = cast(object, converter.from_payload(item.data.payload, ConversationEvent))
            except Exception:  # untrusted: garbage must not end a reader's iteration
                continue
            if isinstance(event, ConversationEvent):  # e.g. a `binary/null` payload is None
                yield event.model_copy(update={"offset": item.offset})

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
