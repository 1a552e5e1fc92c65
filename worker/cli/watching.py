"""Commands for watching a conversation: its transcript, its events, its status, its result.

`history`, `follow`, `status`, `result`; read-only, so anyone who may view
the conversation may run them. Starting and talking to one is
`conversing.py`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated

import typer

from durable_tools.client import Conversations
from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    DEFAULT_TIMEOUT,
    FOREVER,
    Address,
    AsJson,
    Connection,
    Namespace,
    Timeout,
    WorkflowId,
    out,
)
from durable_tools.worker.render import render_status, render_transcript

__all__ = ["follow_command", "history_command", "result_command", "status_command"]


def history_command(
    workflow_id: WorkflowId,
    as_json: AsJson = False,
    start: Annotated[
        int, typer.Option(min=0, help="Skip this many items (rows are numbered from 1).")
    ] = 0,
    limit: Annotated[
        int | None, typer.Option(min=0, help="Most items to show (default: all from --start).")
    ] = None,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Show the conversation's transcript (messages, tool calls, tool outputs), every run's."""
    items = Connection(address, namespace, timeout).on(
        workflow_id, lambda c: c.history(workflow_id, start=start, limit=limit)
    )
    if as_json:
        print(json.dumps([item.model_dump(mode="json") for item in items], indent=2))
    else:
        out.print(render_transcript(items, skipped=start))


def follow_command(
    workflow_id: WorkflowId,
    after: Annotated[
        int, typer.Option(help="Print events after this offset (default: from the first).")
    ] = -1,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Annotated[
        float, typer.Option(help="Stop after this many seconds (default: when it ends).")
    ] = 0,
) -> None:
    """Print the conversation's events as they happen, until it ends (durable_tools.events).

    Each line starts with the event's offset: `--after OFFSET` resumes after it.
    The model's text deltas continue one line as they arrive.
    """
    from durable_tools.worker.events_view import EventPrinter

    async def follow(conversations: Conversations) -> None:
        printer = EventPrinter()
        offset = after
        timed_out = False
        try:
            async with asyncio.timeout(timeout or None):
                async for event in conversations.events(workflow_id, after=after):
                    shown = event.model_dump_json() + "\n" if as_json else printer.feed(event)
                    print(shown, end="", flush=True)
                    offset = event.offset
        except TimeoutError:
            timed_out = True  # --timeout is how long to watch, not a deadline missed
        finally:
            print(printer.close(), end="", flush=True)
        if timed_out:
            sys.stderr.write(
                f"stopped following after {timeout:g} s; the conversation goes on "
                f"(durable-tools follow {workflow_id} --after {offset})\n"
            )

    # Connecting gets its own budget (DEFAULT_TIMEOUT) on top of --timeout.
    budget = timeout + DEFAULT_TIMEOUT if timeout else FOREVER
    Connection(address, namespace, budget).on(workflow_id, follow)


def status_command(
    workflow_id: WorkflowId,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Show what the conversation is doing (state, turns, pending counts)."""
    status = Connection(address, namespace, timeout).on(
        workflow_id, lambda c: c.status(workflow_id)
    )
    if as_json:
        print(status.model_dump_json(indent=2))
    else:
        out.print(render_status(workflow_id, status))


def result_command(
    workflow_id: WorkflowId,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Wait (up to --timeout seconds) for the conversation to end; print its result as JSON."""
    result = Connection(address, namespace, timeout).on(
        workflow_id, lambda c: c.result(workflow_id)
    )
    print(result.model_dump_json(indent=2))
