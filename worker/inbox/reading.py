"""Reading one conversation: its view, its version, its live event stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError

from durable_tools.client import Conversations
from durable_tools.events import ConversationEvent
from durable_tools.teams import TEAM
from durable_tools.worker.inbox.auth import Identity
from durable_tools.worker.inbox.authz import Action, Authorizer
from durable_tools.worker.inbox.conflicts import (
    QUERY_TIMEOUT,
    Conflict,
    no_worker,
    rpc_conflict,
)
from durable_tools.worker.inbox.feeds import EventFeeds
from durable_tools.worker.inbox.views import (
    RUNNING_EVENTS,
    ConversationView,
    RunningLine,
    changes,
    grant_lines,
    items_of,
    running_lines,
    version_of,
)
from durable_tools.worker.render import describe_policy

__all__ = ["InboxReading"]

_ENDED = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
}
"""How a closed workflow ended, as the page says it (`ConversationView.ended`)."""


class InboxReading:
    """`InboxService`'s reading of one conversation (its attributes are the service's)."""

    conversations: Conversations
    authorizer: Authorizer
    feeds: EventFeeds

    def _check(
        self, workflow_id: str, identity: Identity, action: Action, team: str | None
    ) -> None:
        if not self.authorizer.may(identity, action, team):
            # Exactly what a missing conversation answers: the id's use is not confirmed.
            raise Conflict("not_found", f"conversation {workflow_id!r} does not exist.")

    async def authorize(self, workflow_id: str, identity: Identity, action: Action) -> None:
        """Raise unless `identity` may do `action` on the conversation (its team, `describe`).

        Raises:
            Conflict: `not_found` when it may not (as for a conversation that
                does not exist), or when there is none; `unavailable` when
                Temporal does not answer within `QUERY_TIMEOUT`.
        """
        handle = self.conversations.client.get_workflow_handle(workflow_id)
        try:
            async with asyncio.timeout(QUERY_TIMEOUT):
                described = await handle.describe()
        except TimeoutError as exc:
            raise Conflict("unavailable", "Temporal did not answer within 10 s.") from exc
        except RPCError as exc:
            raise rpc_conflict(exc, f"conversation {workflow_id!r}") from exc
        self._check(workflow_id, identity, action, described.typed_search_attributes.get(TEAM))

    async def conversation(self, workflow_id: str, identity: Identity) -> ConversationView:
        """One conversation's status, pending items and transcript, and whether it ended.

        Raises:
            Conflict: `not_found` (none, or `identity` may not view it) or
                `ended` (no running conversation), `no_worker`.
        """
        handle = self.conversations.client.get_workflow_handle(workflow_id)
        try:
            async with asyncio.timeout(QUERY_TIMEOUT):
                # Read first: a conversation that ends after it still shows a send form,
                # and the send is then refused as `ended`.
                described = await handle.describe()
                team = described.typed_search_attributes.get(TEAM)
                self._check(workflow_id, identity, "view", team)
                execution = described.status
                offset = await self._event_offset(workflow_id)
                status = await self.conversations.status(workflow_id)
                pending = await self.conversations.pending(workflow_id)
                transcript = await self.conversations.history(workflow_id)
                running: list[RunningLine] = []
                if status.running_tools:
                    after = max(-1, offset - RUNNING_EVENTS)
                    events, _ = await self.conversations.retained_events(workflow_id, after=after)
                    running = running_lines(events)
        except TimeoutError as exc:
            raise no_worker() from exc
        except RPCError as exc:
            raise rpc_conflict(exc, f"conversation {workflow_id!r}") from exc
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
            raise Conflict("unavailable", f"the conversation's query failed: {exc}") from exc
        return ConversationView(
            workflow_id=workflow_id,
            status=status,
            items=items_of(pending),
            transcript=transcript,
            version=version_of(status, pending),
            event_offset=offset,
            ended=_ENDED.get(execution, "") if execution is not None else "",
            grants=grant_lines(pending),
            may_set_policy=self.authorizer.may(identity, "set_policy", team),
            may_decide=self.authorizer.may(identity, "decide", team),
            policy=describe_policy(status.policy) if status.policy is not None else "",
            running=running,
        )

    async def _event_offset(self, workflow_id: str) -> int:
        """The offset of the stream's last event (`-1` when it has none or cannot say)."""
        stream = WorkflowStreamClient.create(self.conversations.client, workflow_id)
        try:
            return await stream.get_offset() - 1
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError):
            return -1

    async def version(self, workflow_id: str, identity: Identity) -> str:
        """`changes(...)`, with failures as `Conflict` (`not_found`: not `identity`'s to view)."""
        await self.authorize(workflow_id, identity, "view")
        try:
            async with asyncio.timeout(QUERY_TIMEOUT):
                return await changes(self.conversations, workflow_id)
        except TimeoutError as exc:
            raise no_worker() from exc
        except RPCError as exc:
            raise rpc_conflict(exc, f"conversation {workflow_id!r}") from exc

    async def follow(
        self, workflow_id: str, identity: Identity, *, after: int = -1, keepalive: float = 15.0
    ) -> AsyncGenerator[ConversationEvent | None]:
        """The conversation's events after offset `after`, as they happen.

        Checks first that the conversation exists and that `identity` may
        view it, then claims one of `identity`'s streams (so each is a
        `Conflict` before anything is streamed). The events come from this
        process's feed of the conversation (`feeds.py`): one long-poll
        update per batch of events however many clients follow it, queries
        once it ended. The iterator yields `None` when no event came for
        `keepalive` seconds (a comment line keeps proxies from closing the
        connection) and ends after the conversation's last event.

        Args:
            workflow_id: The conversation.
            identity: Who reads it (`Authorizer.may(..., "view", ...)`).
            after: The offset of the last event already seen (`-1`: all).
            keepalive: Seconds without an event before a `None`.

        Returns:
            The async generator (close it with `aclose()`).

        Raises:
            Conflict: `not_found`, `unavailable` (before streaming),
                `too_many_streams` (`identity.name` holds
                `EventFeeds.per_identity` streams already); the iterator
                raises `unavailable` or `no_worker` when the stream fails later.
        """
        await self.authorize(workflow_id, identity, "view")
        return self.feeds.open(workflow_id, identity.name, after=after, keepalive=keepalive)
