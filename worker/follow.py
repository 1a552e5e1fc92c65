"""Following a conversation as it happens: what `durable-tools run` prints.

A `Follower` reads the conversation's event stream (`Conversations.events`,
Temporal's Workflow Streams; see docs/observability.md) and reports each
event, queried for more only when an event says there is more to show:

- `message_received`, `turn_finished`, `tool_call_finished`: the new
  transcript items (`Conversations.history_pages`, pages of about 1 MB,
  across continue-as-new): user text, model text, tool calls with
  their arguments, their outputs (ok, or the failure kind);
- `tool_attempt_failed`, `tool_progress`, `model_attempt_failed`: a retry
  or progress line naming the exact call (`fetch [c2]`), so two calls to
  one tool are never confused;
- `approval_requested`, `question_asked`, `conversation_paused`: the
  `pending` query, for the exact commands that decide or resume;
- `model_failed`, a text answer (`turn_finished` with no calls), the end
  (`conversation_finished`): the `status` query or the result.

Nothing is polled: the stream's long poll (a workflow update) waits for the
next event. A query or a read that gets no answer within `step_timeout`
seconds is reported once and tried again.

It returns when the conversation ends (`ended`), when the model answered in
text and the conversation waits for the next user message (`idle`), when a
model turn failed for good and the conversation waits for an operator
(`model_failed`: its one-line message and the commands that go on are
shown), when a budget stops the next model call (`budget_exceeded`), or
when `stop` is set (`detached`; the conversation goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from rich.markup import escape
from temporalio.client import (
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_tools._wire import TRANSCRIPT_QUERY
from durable_tools.client import Conversations
from durable_tools.conversation import (
    ConversationResult,
    ConversationStatus,
    ModelFailure,
    PendingApproval,
    PendingInteraction,
)
from durable_tools.events import ConversationEvent
from durable_tools.transcript import (
    AssistantMessage,
    ContextSummary,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
)
from durable_tools.worker.answer_fields import MAX_FIELDS, answer_fields

__all__ = ["Commands", "Followed", "Follower", "LostServer"]

_TRANSIENT = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)
_SHOWN_CHARS = 300  # tool outputs and progress longer than this are cut in the live view


@dataclass(frozen=True, kw_only=True)
class Commands:
    """Builds `durable-tools` command lines that reach the same server and namespace.

    Attributes:
        address: The Temporal frontend used; `--address` is added unless it
            is `default_address`.
        namespace: The namespace used; `--namespace` is added unless it is
            `default_namespace`.
        default_address: The CLI's default address.
        default_namespace: The CLI's default namespace.
    """

    address: str
    namespace: str
    default_address: str = "localhost:7233"
    default_namespace: str = "default"

    def __call__(self, *args: str) -> str:
        """The shell-quoted command line `durable-tools <args> [--address ...]`."""
        parts = ["durable-tools", *args]
        if self.address != self.default_address:
            parts += ["--address", self.address]
        if self.namespace != self.default_namespace:
            parts += ["--namespace", self.namespace]
        return shlex.join(parts)


@dataclass(frozen=True, kw_only=True)
class Followed:
    """How following a conversation ended.

    Attributes:
        outcome: `ended` (the workflow closed; `result` is set), `idle` (the
            model answered in text; the conversation waits for the next
            message), `model_failed` (a model turn failed for good; the
            conversation waits for `retry`, a message or `cancel`),
            `budget_exceeded` (the next model call waits for `raise_budget`
            or `cancel`) or `detached` (`stop` was set; it goes on).
        result: The conversation's result when `ended`.
        answer: The last assistant text when `idle`.
        failure: Why the model turn failed, when `model_failed`.
    """

    outcome: Literal["ended", "idle", "model_failed", "budget_exceeded", "detached"]
    result: ConversationResult | None = None
    answer: str = ""
    failure: ModelFailure | None = None


class LostServer(Exception):
    """Temporal gave no answer to the event stream's reads for `give_up_after` seconds."""


@dataclass
class _Seen:
    items: int = 0
    last: TranscriptItem | None = None
    decisions: set[str] = field(default_factory=set[str])
    progress: dict[str, str] = field(default_factory=dict[str, str])  # call id -> details
    offset: int = -1  # the last event handled
    notes: set[str] = field(default_factory=set[str])
    paused: str | None = None


class Follower:
    """Reads one conversation's event stream and reports what happens, as rich markup lines.

    Args:
        conversations: Connected conversations (pydantic data converter).
        workflow_id: The conversation.
        emit: Called with each line (rich markup; user text is escaped).
        commands: Builds the commands shown for approvals and questions.
        step_timeout: Most seconds one query may take, and seconds without
            a first event before the `status` query checks that a worker
            answers (default 5); a query that gets no answer (no worker
            polls the task queue) is reported once and tried again.
        give_up_after: Seconds without any answer from Temporal itself
            before `follow` raises `LostServer` (default 60).
    """

    def __init__(
        self,
        conversations: Conversations,
        workflow_id: str,
        *,
        emit: Callable[[str], None],
        commands: Commands,
        step_timeout: float = 5.0,
        give_up_after: float = 60.0,
    ) -> None:
        self._conversations = conversations
        self._workflow_id = workflow_id
        self._emit = emit
        self._commands = commands
        self._step_timeout = step_timeout
        self._give_up_after = give_up_after
        self._seen = _Seen()
        self._handle: WorkflowHandle[Any, Any] = conversations.client.get_workflow_handle(
            workflow_id
        )
        self._events_seen = 0

    async def follow(self, stop: asyncio.Event) -> Followed:
        """Report until the conversation ends or idles, or `stop` is set.

        Args:
            stop: Set it (e.g. on Ctrl-C) to return `detached` at once.

        Returns:
            How it ended (see `Followed`).

        Raises:
            LostServer: Temporal did not answer for `give_up_after` seconds.
            temporalio.service.RPCError: The workflow does not exist.
            temporalio.client.WorkflowFailureError: The conversation failed,
                was terminated or was cancelled.
        """
        stopping = asyncio.create_task(stop.wait())
        reading = asyncio.create_task(self._read_events())
        watching = asyncio.create_task(self._watch_worker())
        try:
            await asyncio.wait({stopping, reading}, return_when=asyncio.FIRST_COMPLETED)
            if reading.done():
                return reading.result()
            return Followed(outcome="detached")
        finally:
            for task in (stopping, reading, watching):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    # -------------------------------------------------------------- events

    async def _read_events(self) -> Followed:
        """Handle events in order; resume after the last one when a read fails."""
        loop = asyncio.get_running_loop()
        unanswered_since: float | None = None
        while True:
            try:
                async for event in self._conversations.events(
                    self._workflow_id, after=self._seen.offset
                ):
                    unanswered_since = None
                    self._seen.notes.discard("no-server")
                    self._events_seen += 1
                    self._seen.offset = event.offset
                    done = await self._on_event(event)
                    if done is not None:
                        return done
                # The stream ended: so did the conversation.
                return await self._ended()
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                # Temporal answered, no worker took the poll: say so if the status query agrees.
                await self._status()
                continue
            except RPCError as exc:
                if exc.status not in _TRANSIENT:
                    raise
                since = unanswered_since = unanswered_since or loop.time()
                if loop.time() - since > self._give_up_after:
                    raise LostServer(
                        f"no answer from Temporal for {self._give_up_after:g} s"
                    ) from exc
                self._note("no-server", "[dim]no answer from Temporal (still trying)[/]")
                await asyncio.sleep(min(1.0, self._step_timeout))

    async def _watch_worker(self) -> None:
        """Until the first event, check every `step_timeout` s that a worker answers queries."""
        while not self._events_seen:
            await asyncio.sleep(self._step_timeout)
            if not self._events_seen:
                await self._status()  # reports "is a worker polling ...?" when unanswered

    async def _on_event(self, event: ConversationEvent) -> Followed | None:
        kind = event.kind
        if kind in ("message_received", "turn_finished", "tool_call_finished"):
            await self._read_transcript()
        if kind == "tool_call_finished":
            self._seen.progress.pop(event.call_id or "", None)
        elif kind == "tool_attempt_failed":
            self._report_retry(event)
        elif kind == "model_attempt_failed":
            self._report_retry(event)
        elif kind == "tool_progress":
            self._report_progress(event)
        elif kind in ("approval_requested", "question_asked", "conversation_paused"):
            await self._read_pending()
        elif kind == "model_failed":
            status = await self._status_retrying()
            if status.state == "model_failed" and status.model_failed:
                failure = status.model_failed
                self._emit(
                    f"[bold red]✗ model turn {failure.turn} failed[/] ({escape(failure.type)}): "
                    f"{escape(failure.message)}"
                )
                return Followed(outcome="model_failed", failure=failure)
        elif kind == "budget_exceeded":
            status = await self._status_retrying()
            if status.state == "budget_exceeded" and status.budget_exceeded:
                stop = status.budget_exceeded
                waits = escape(stop.what_waits())
                self._emit(f"[bold red]✗ {waits} waits[/]: {escape(stop.message)}")
                return Followed(outcome="budget_exceeded")
        elif kind == "turn_finished" and not event.calls:
            status = await self._status_retrying()
            if self._is_idle(status):
                last = self._seen.last
                text = last.text if isinstance(last, AssistantMessage) else ""
                return Followed(outcome="idle", answer=text)
        elif kind == "conversation_finished":
            return await self._ended()
        return None

    async def _ended(self) -> Followed:
        await self._read_transcript()
        result: ConversationResult = await self._conversations.result(self._workflow_id)
        return Followed(outcome="ended", result=result)

    def _report_retry(self, event: ConversationEvent) -> None:
        if event.attempt is None:
            return
        limit = event.max_attempts or 0
        if limit and event.attempt >= limit:
            return  # no retry follows: the call's (or turn's) failure is reported
        of = f" of {limit}" if limit else ""
        if event.kind == "model_attempt_failed":
            label = f"model turn {event.turn}"
        else:
            label = f"{event.tool} [{event.call_id}]"
        why = escape(f"; last failure: {event.reason}") if event.reason else ""
        self._emit(f"[yellow]↻ {escape(label)}[/] attempt {event.attempt + 1}{of}{why}")

    def _report_progress(self, event: ConversationEvent) -> None:
        call_id, details = event.call_id or "", event.text or ""
        if not details or self._seen.progress.get(call_id) == details:
            return
        self._seen.progress[call_id] = details
        label = escape(f"{event.tool} [{call_id}]")
        self._emit(f"[blue]… {label}[/] progress: {escape(_cut(details))}")

    def _is_idle(self, status: ConversationStatus) -> bool:
        last = self._seen.last
        return (
            status.state == "idle"
            and status.reconciled
            and self._seen.items >= status.transcript_items
            and isinstance(last, AssistantMessage)
            and not last.tool_calls
        )

    # ------------------------------------------------------------- queries

    async def _bounded_query(self, name: str, call: Callable[[], Any]) -> Any:
        """Run a query; `None` (reported once) when it gets no answer in time."""
        try:
            async with asyncio.timeout(self._step_timeout):
                return await call()
        except TimeoutError:
            self._note(
                "no-worker",
                f"[dim]no answer to the {name} query within {self._step_timeout:g} s: is a "
                f"worker polling task queue {escape(self._conversations.task_queue)}? "
                "(still trying)[/]",
            )
        except WorkflowQueryFailedError as exc:
            # e.g. before the first workflow task completed; the next poll retries
            self._note(f"query-{exc}", f"[dim]the {name} query failed: {escape(str(exc))}[/]")
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise
            line = f"[dim]the {name} query failed: {escape(exc.message)}[/]"
            self._note(f"rpc-{exc.status}", line)
        return None

    async def _status(self) -> ConversationStatus | None:
        status: ConversationStatus | None = await self._bounded_query(
            "status", lambda: self._conversations.status(self._workflow_id)
        )
        return status

    async def _status_retrying(self) -> ConversationStatus:
        while (status := await self._status()) is None:
            await asyncio.sleep(1)
        return status

    async def _read_transcript(self) -> None:
        """Report the transcript items not reported yet (pages of about 1 MB, across runs)."""
        pages = self._conversations.history_pages(self._workflow_id, start=self._seen.items)
        try:
            while True:
                page: list[TranscriptItem] | None = await self._bounded_query(
                    TRANSCRIPT_QUERY, lambda: anext(pages, None)
                )
                if not page:
                    return
                for item in page:
                    self._report_item(item)
                self._seen.items += len(page)
                self._seen.last = page[-1]
        finally:
            await pages.aclose()

    async def _read_pending(self) -> bool:
        while (
            state := await self._bounded_query(
                "pending", lambda: self._conversations.pending(self._workflow_id)
            )
        ) is None:
            await asyncio.sleep(1)
        changed = False
        for approval in state.approvals:
            if approval.call_id not in self._seen.decisions:
                self._seen.decisions.add(approval.call_id)
                self._report_approval(approval)
                changed = True
        for interaction in state.interactions:
            if interaction.call_id not in self._seen.decisions:
                self._seen.decisions.add(interaction.call_id)
                self._report_interaction(interaction)
                changed = True
        if state.paused != self._seen.paused:
            self._seen.paused = state.paused
            if state.paused is not None:
                send = self._commands("send", self._workflow_id, "MESSAGE")
                self._emit(
                    f"[bold yellow]paused[/]: {escape(state.paused)}\n"
                    f"  resume with: [bold]{escape(send)}[/]"
                )
                changed = True
        return changed

    # ----------------------------------------------------------- reporting

    def _note(self, key: str, line: str) -> None:
        if key not in self._seen.notes:
            self._seen.notes.add(key)
            self._emit(line)

    def _report_item(self, item: TranscriptItem) -> None:
        if isinstance(item, UserMessage):
            self._emit(f"[bold cyan]user[/]: {escape(item.text)}")
        elif isinstance(item, AssistantMessage):
            if item.text:
                self._emit(f"[bold green]assistant[/]: {escape(item.text)}")
            for call in item.tool_calls:
                self._emit(
                    f"[yellow]→ {escape(call.name)}[/] {escape(_cut(call.arguments))} "
                    f"[dim]({escape(call.call_id)})[/] started"
                )
        elif isinstance(item, ContextSummary):
            self._emit(f"[dim]context summarized (items 1-{item.covers_upto})[/]")
        else:
            self._report_output(item)

    def _report_output(self, output: ToolCallOutput) -> None:
        where = f"[dim]({escape(output.call_id)})[/]"
        if output.is_error:
            kind = escape(output.failure_kind or "error")
            self._emit(
                f"[bold red]✗ {escape(output.tool)}[/] {where} failed: {kind}: "
                f"{escape(_cut(output.content))}"
            )
        else:
            self._emit(
                f"[bold magenta]✓ {escape(output.tool)}[/] {where} ok: "
                f"{escape(_cut(output.content))}"
            )

    def _report_approval(self, approval: PendingApproval) -> None:
        wf, call = self._workflow_id, approval.call_id
        digest = approval.arguments_hash
        # The digest of what is shown here: the command approves exactly this call.
        approve = self._commands("approve", wf, call, "--hash", digest)
        deny = self._commands("deny", wf, call, "--hash", digest, "--reason", "REASON")
        self._emit(
            f"[bold yellow]approval needed[/]: {escape(approval.summary)} "
            f"[dim]({escape(call)})[/]\n"
            f"  approve: [bold]{escape(approve)}[/]\n"
            f"  deny:    [bold]{escape(deny)}[/]"
        )

    def _report_interaction(self, interaction: PendingInteraction) -> None:
        wf, call = self._workflow_id, interaction.call_id
        answer = self._commands("answer", wf, call, "VALUE", "--hash", interaction.arguments_hash)
        fields = "" if interaction.answer_schema is None else _field_lines(interaction)
        self._emit(
            f"[bold yellow]question[/] from {escape(interaction.tool)} [dim]({escape(call)})[/]: "
            f"{escape(interaction.arguments)}\n"
            + (fields or "  the answer: any JSON\n")
            + f"  answer: [bold]{escape(answer)}[/]"
        )


def _field_lines(interaction: PendingInteraction) -> str:
    """The answer's fields, one indented line each (`answer_fields`), markup escaped."""
    schema = interaction.answer_schema
    if not isinstance(schema, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
        return ""
    lines: list[str] = []
    for item in answer_fields(cast(Mapping[str, Any], schema))[:MAX_FIELDS]:
        what = ", ".join(
            part
            for part in (
                item.type,
                "required" if item.required else "optional",
                item.constraints,
            )
            if part
        )
        about = f": {item.description}" if item.description else ""
        lines.append(f"  - {escape(item.name)} ({escape(what)}){escape(about)}\n")
    return "".join(lines)


def _cut(text: str, limit: int = _SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
