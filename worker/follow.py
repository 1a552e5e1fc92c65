"""Following a conversation as it happens: what `durable-tools run` prints.

A `Follower` polls three sources, each poll bounded by `step_timeout` seconds,
with a pause between polls that starts at `min_interval` seconds and grows
by half up to `max_interval` while nothing changes (no busy loop):

- the workflow's description (`describe`, no worker needed): whether it has
  ended, and its pending activities, whose attempt, last failure and
  heartbeat details show a tool's retries and progress;
- the `status` query, then the new transcript items
  (`Conversations.history_pages`, across continue-as-new): model text,
  tool calls and their outputs (ok, or the failure kind);
- the `pending` query while something waits for a person: approvals and
  questions, each with the exact command that decides it.

It returns when the conversation ends (`ended`), when the model answered in
text and the conversation waits for the next user message (`idle`), when a
model turn failed for good and the conversation waits for an operator
(`model_failed`: its one-line message and the commands that go on are
shown), or when `stop` is set (`detached`; the conversation goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rich.markup import escape
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_tools.client import Conversations
from durable_tools.conversation import (
    ConversationResult,
    ConversationStatus,
    ModelFailure,
    PendingApproval,
    PendingInteraction,
)
from durable_tools.transcript import (
    AssistantMessage,
    ContextSummary,
    ToolCallOutput,
    TranscriptItem,
    UserMessage,
)

__all__ = ["Commands", "Followed", "Follower", "LostServer"]

_TOOL_PREFIX = "tool."  # durable_tools.activities.agent_activities.TOOL_ACTIVITY_PREFIX
_MODEL_ACTIVITY = "model.turn"  # durable_tools.activities.agent_activities.MODEL_TURN_ACTIVITY
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
            conversation waits for `retry`, a message or `cancel`) or
            `detached` (`stop` was set; it goes on).
        result: The conversation's result when `ended`.
        answer: The last assistant text when `idle`.
        failure: Why the model turn failed, when `model_failed`.
    """

    outcome: Literal["ended", "idle", "model_failed", "detached"]
    result: ConversationResult | None = None
    answer: str = ""
    failure: ModelFailure | None = None


class LostServer(Exception):
    """Temporal gave no answer to `describe` for `give_up_after` seconds."""


@dataclass
class _Seen:
    items: int = 0
    last: TranscriptItem | None = None
    open_calls: dict[str, str] = field(default_factory=dict[str, str])  # call id -> tool
    decisions: set[str] = field(default_factory=set[str])
    attempts: dict[str, int] = field(default_factory=dict[str, int])  # activity id -> attempt
    progress: dict[str, str] = field(default_factory=dict[str, str])  # activity id -> details
    notes: set[str] = field(default_factory=set[str])
    paused: str | None = None


class Follower:
    """Polls one conversation and reports what happens, as rich markup lines.

    Args:
        conversations: Connected conversations (pydantic data converter).
        workflow_id: The conversation.
        emit: Called with each line (rich markup; user text is escaped).
        commands: Builds the commands shown for approvals and questions.
        min_interval: Seconds between polls after a change (default 0.2).
        max_interval: Most seconds between polls (default 2).
        step_timeout: Most seconds one query or describe may take (default
            5); a query that gets no answer (no worker polls the task queue)
            is reported once and tried again on the next poll.
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
        min_interval: float = 0.2,
        max_interval: float = 2.0,
        step_timeout: float = 5.0,
        give_up_after: float = 60.0,
    ) -> None:
        self._conversations = conversations
        self._workflow_id = workflow_id
        self._emit = emit
        self._commands = commands
        self._min_interval = min_interval
        self._max_interval = max_interval
        self._step_timeout = step_timeout
        self._give_up_after = give_up_after
        self._unanswered_since: float | None = None
        self._seen = _Seen()
        self._handle: WorkflowHandle[Any, Any] = conversations.client.get_workflow_handle(
            workflow_id
        )

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
        interval = self._min_interval
        stopping = asyncio.create_task(stop.wait())
        events = asyncio.create_task(self._follow_events())
        try:
            while True:
                poll = asyncio.create_task(self._poll())
                await asyncio.wait({poll, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if stop.is_set():
                    poll.cancel()
                    with contextlib.suppress(BaseException):
                        await poll
                    return Followed(outcome="detached")
                changed, done = poll.result()
                if done is not None:
                    return done
                interval = (
                    self._min_interval if changed else min(interval * 1.5, self._max_interval)
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stopping), interval)
                if stop.is_set():
                    return Followed(outcome="detached")
        finally:
            stopping.cancel()
            events.cancel()
            with contextlib.suppress(BaseException):
                await events

    async def _follow_events(self) -> None:
        """Report tool retries from the event stream: exact per call id, even for one tool twice."""
        try:
            async for event in self._conversations.events(self._workflow_id):
                if event.kind != "tool_attempt_failed" or event.attempt is None:
                    continue
                limit = event.max_attempts or 0
                if limit and event.attempt >= limit:
                    continue  # no retry follows: the call's failure is reported
                of = f" of {limit}" if limit else ""
                label = escape(f"{event.tool} [{event.call_id}]")
                why = escape(f"; last failure: {event.reason}") if event.reason else ""
                self._emit(f"[yellow]↻ {label}[/] attempt {event.attempt + 1}{of}{why}")
        except Exception:  # the stream adds detail; describe still reports the rest
            return

    # ------------------------------------------------------------- polling

    async def _poll(self) -> tuple[bool, Followed | None]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._step_timeout):
                description = await self._handle.describe()
        except (TimeoutError, RPCError) as exc:
            if isinstance(exc, RPCError) and exc.status not in _TRANSIENT:
                raise
            since = self._unanswered_since = self._unanswered_since or loop.time()
            if loop.time() - since > self._give_up_after:
                raise LostServer(f"no answer from Temporal for {self._give_up_after:g} s") from exc
            self._note("no-server", "[dim]no answer from Temporal (still trying)[/]")
            return False, None
        self._unanswered_since = None
        self._seen.notes.discard("no-server")
        running = description.status in (None, WorkflowExecutionStatus.RUNNING)
        before = self._seen.items
        status = await self._status()
        changed = False
        if status is not None:
            changed = await self._read_transcript(status.transcript_items)
            waits = status.pending_approvals or status.pending_interactions
            if running and (waits or status.state == "paused"):
                changed = await self._read_pending() or changed
        if running:
            activities = description.raw_description.pending_activities
            changed = await self._report_activities(activities) or changed
        if not running:
            result: ConversationResult = await self._conversations.result(self._workflow_id)
            return True, Followed(outcome="ended", result=result)
        if status is not None and status.state == "model_failed" and status.model_failed:
            failure = status.model_failed
            self._emit(
                f"[bold red]✗ model turn {failure.turn} failed[/] ({escape(failure.type)}): "
                f"{escape(failure.message)}"
            )
            return True, Followed(outcome="model_failed", failure=failure)
        if status is not None and self._is_idle(status):
            last = self._seen.last
            text = last.text if isinstance(last, AssistantMessage) else ""
            return True, Followed(outcome="idle", answer=text)
        return changed or self._seen.items != before, None

    def _is_idle(self, status: ConversationStatus) -> bool:
        last = self._seen.last
        return (
            status.state == "idle"
            and status.reconciled
            and self._seen.items == status.transcript_items
            and isinstance(last, AssistantMessage)
            and not last.tool_calls
        )

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

    async def _read_transcript(self, upto: int) -> bool:
        if self._seen.items >= upto:
            return False
        changed = False
        pages = self._conversations.history_pages(
            self._workflow_id, start=self._seen.items, limit=upto - self._seen.items
        )
        try:
            while True:
                page: list[TranscriptItem] | None = await self._bounded_query(
                    "transcript_slice", lambda: anext(pages, None)
                )
                if not page:
                    break
                for item in page:
                    self._report_item(item)
                self._seen.items += len(page)
                self._seen.last = page[-1]
                changed = True
        finally:
            await pages.aclose()
        return changed

    async def _read_pending(self) -> bool:
        state = await self._bounded_query(
            "pending", lambda: self._conversations.pending(self._workflow_id)
        )
        if state is None:
            return False
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

    async def _report_activities(self, pending: Any) -> bool:
        changed = False
        infos: list[PendingActivityInfo] = list(pending)
        for info in infos:
            name = info.activity_type.name
            label = self._activity_label(name)
            key = info.activity_id
            # Tool retries come from the event stream (`_follow_events`), by call id.
            retried = info.attempt > 1 and not name.startswith(_TOOL_PREFIX)
            if retried and self._seen.attempts.get(key) != info.attempt:
                self._seen.attempts[key] = info.attempt
                of = f" of {info.maximum_attempts}" if info.maximum_attempts else ""
                failure = info.last_failure.message if info.HasField("last_failure") else ""
                kind = info.last_failure.application_failure_info.type if failure else ""
                why = f"; last failure: {kind + ': ' if kind else ''}{failure}" if failure else ""
                self._emit(f"[yellow]↻ {label}[/] attempt {info.attempt}{of}{escape(why)}")
                changed = True
            if info.heartbeat_details.payloads:
                details = await self._decode(info)
                if details and self._seen.progress.get(key) != details:
                    self._seen.progress[key] = details
                    self._emit(f"[blue]… {label}[/] progress: {escape(_cut(details))}")
                    changed = True
        return changed

    async def _decode(self, info: PendingActivityInfo) -> str:
        converter = self._conversations.client.data_converter
        try:
            values = await converter.decode(list(info.heartbeat_details.payloads))
        except Exception:  # details written by some other converter: show nothing
            return ""
        shown = values[0] if len(values) == 1 else values
        return json.dumps(shown, ensure_ascii=False, default=str)

    def _activity_label(self, activity_type: str) -> str:
        if activity_type == _MODEL_ACTIVITY:
            return "model turn"
        if not activity_type.startswith(_TOOL_PREFIX):
            return escape(activity_type)
        tool = activity_type.removeprefix(_TOOL_PREFIX)
        calls = [c for c, t in self._seen.open_calls.items() if t == tool]
        return escape(f"{tool} [{calls[0]}]" if len(calls) == 1 else tool)

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
                self._seen.open_calls[call.call_id] = call.name
                self._emit(
                    f"[yellow]→ {escape(call.name)}[/] {escape(_cut(call.arguments))} "
                    f"[dim]({escape(call.call_id)})[/] started"
                )
        elif isinstance(item, ContextSummary):
            self._emit(f"[dim]context summarized (items 1-{item.covers_upto})[/]")
        else:
            self._seen.open_calls.pop(item.call_id, None)
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
        schema = (
            "any JSON"
            if interaction.answer_schema is None
            else json.dumps(interaction.answer_schema, ensure_ascii=False, separators=(",", ":"))
        )
        self._emit(
            f"[bold yellow]question[/] from {escape(interaction.tool)} [dim]({escape(call)})[/]: "
            f"{escape(interaction.arguments)}\n"
            f"  answer ({escape(schema)}): [bold]{escape(answer)}[/]"
        )


def _cut(text: str, limit: int = _SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
