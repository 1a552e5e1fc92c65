"""Finding the conversations that wait for a person (Temporal visibility)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime

from temporalio.client import WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError

from durable_tools.client import Conversations
from durable_tools.worker.inbox.auth import Identity
from durable_tools.worker.inbox.authz import Authorizer
from durable_tools.worker.inbox.conflicts import rpc_conflict
from durable_tools.worker.inbox.views import WaitingConversation, items_of
from durable_tools.workflows.visibility import PENDING_COUNT, PENDING_KINDS

__all__ = ["INBOX_QUERY", "InboxListing"]

INBOX_QUERY = (
    "(DurableToolsPendingCount > 0 OR DurableToolsPendingKinds = 'pause') "
    "AND ExecutionStatus = 'Running'"
)
"""Visibility query of the inbox: `durable-tools pending`'s, and pauses (which the
workflow lists in `DurableToolsPendingKinds` without counting them)."""

_LIST_QUERY_TIMEOUT = 3.0
"""Seconds the list waits for one conversation's queries: a query to a conversation
whose worker is gone waits for its whole timeout, and the page waits for the slowest."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_CONVERSATIONS = 500
_MAX_CACHED_LISTINGS = 256
"""Listing versions kept, one per distinct query (team set): bounded memory."""


class InboxListing:
    """`InboxService`'s list of waiting conversations (its attributes are the service's)."""

    conversations: Conversations
    authorizer: Authorizer
    _limit: asyncio.Semaphore
    _listing_lock: asyncio.Lock
    _listing: dict[str, tuple[float, str]]

    def _query(self, identity: Identity) -> str:
        """`INBOX_QUERY`, restricted server-side to what `identity` may view."""
        clause = self.authorizer.visibility_clause(identity)
        return INBOX_QUERY if clause is None else f"{INBOX_QUERY} AND {clause}"

    async def waiting(self, identity: Identity) -> list[WaitingConversation]:
        """Every running conversation waiting for a person that `identity` may view, newest first.

        Found with Temporal visibility (`INBOX_QUERY` and the authorizer's
        clause: the teams `identity` belongs to), then each one's `pending`
        and `status` queries.
        """
        client = self.conversations.client
        found: list[WaitingConversation] = []
        try:
            async for execution in client.list_workflows(
                self._query(identity), limit=_MAX_CONVERSATIONS
            ):
                attributes = execution.typed_search_attributes
                found.append(
                    WaitingConversation(
                        workflow_id=execution.id,
                        started=execution.start_time,
                        state=",".join(attributes.get(PENDING_KINDS) or []),
                    )
                )
        except RPCError as exc:
            raise rpc_conflict(exc, "the inbox") from exc
        await asyncio.gather(*(self._fill(w) for w in found))
        found.sort(key=lambda w: w.started or _EPOCH, reverse=True)
        return found

    async def listing_version(self, max_age: float, identity: Identity) -> str:
        """A string that changes when the set of waiting conversations `identity` may view does.

        One visibility query (`INBOX_QUERY` and the authorizer's clause: ids,
        runs, pending counts and kinds; no per-conversation queries), shared
        by every caller with the same clause: a result younger than `max_age`
        seconds is reused, so any number of open pages cost one visibility
        query per team set per `max_age`.

        Raises:
            Conflict: `unavailable` when Temporal refuses the query.
        """
        loop = asyncio.get_running_loop()
        query = self._query(identity)
        async with self._listing_lock:
            cached = self._listing.get(query)
            if cached is not None and loop.time() - cached[0] < max_age:
                return cached[1]
            rows: list[tuple[str, str, int, list[str]]] = []
            try:
                async for execution in self.conversations.client.list_workflows(
                    query, limit=_MAX_CONVERSATIONS
                ):
                    attributes = execution.typed_search_attributes
                    rows.append(
                        (
                            execution.id,
                            execution.run_id,
                            attributes.get(PENDING_COUNT) or 0,
                            sorted(attributes.get(PENDING_KINDS) or []),
                        )
                    )
            except RPCError as exc:
                raise rpc_conflict(exc, "the inbox") from exc
            text = json.dumps(sorted(rows))
            version = hashlib.sha256(text.encode()).hexdigest()[:16]
            if len(self._listing) >= _MAX_CACHED_LISTINGS:
                self._listing.clear()
            self._listing[query] = (loop.time(), version)
            return version

    async def _fill(self, waiting: WaitingConversation) -> None:
        async with self._limit:
            try:
                async with asyncio.timeout(_LIST_QUERY_TIMEOUT):
                    pending = await self.conversations.pending(waiting.workflow_id)
                    status = await self.conversations.status(waiting.workflow_id)
            except (TimeoutError, RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
                waiting.problem = (
                    f"no worker answered its queries within {_LIST_QUERY_TIMEOUT:g} s "
                    f"(waiting for: {waiting.state or 'unknown'})"
                )
                return
        waiting.items = items_of(pending)
        waiting.agent = status.agent
        waiting.state = status.state
        waiting.problem = ""
