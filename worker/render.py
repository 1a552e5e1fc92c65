"""Rich renderings of what a conversation shows a person: approvals, pending work, transcripts.

Shared by the CLI (`durable-tools pending`, `history`, `status`) and the demo.
Every `render_*` function returns a rich renderable; print it with
`Console().print(...)`. A question's answer schema is shown as a field list
(`answer_fields.py`), not as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from durable_tools.budgets import Spend
from durable_tools.conversation import (
    ConversationStatus,
    PendingApproval,
    PendingInteraction,
    PendingState,
    SendMessage,
)
from durable_tools.grants import Grant, describe_scope
from durable_tools.input_requests import InputQuestion
from durable_tools.policy_document import PolicyRef
from durable_tools.policy_verdict import explain_verdict
from durable_tools.transcript import AssistantMessage, ContextSummary, TranscriptItem, UserMessage
from durable_tools.worker.answer_fields import MAX_FIELDS, answer_fields

__all__ = [
    "PendingConversation",
    "render_answer_schema",
    "render_approval",
    "render_pending",
    "render_pending_conversations",
    "render_status",
    "render_transcript",
    "render_unanswered",
    "when",
]


def when(moment: datetime, now: datetime | None = None) -> str:
    """A UTC time with how far it is from now, e.g. `2026-11-28 08:56 UTC (in 7.0 days)`.

    Args:
        moment: An aware datetime.
        now: The reference time (default: the current time).
    """
    now = now or datetime.now(UTC)
    seconds = (moment - now).total_seconds()
    span = abs(seconds)
    if span < 90:
        rel = f"{span:.0f} s"
    elif span < 90 * 60:
        rel = f"{span / 60:.0f} min"
    elif span < 36 * 3600:
        rel = f"{span / 3600:.0f} h"
    else:
        rel = f"{span / 86400:.1f} days"
    rel = f"in {rel}" if seconds >= 0 else f"{rel} ago"
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({rel})"


def render_approval(workflow_id: str, approval: PendingApproval) -> Table:
    """One pending approval as a person deciding on it sees it.

    Args:
        workflow_id: The conversation.
        approval: From the `pending` query.

    Returns:
        A two-column rich table: the call, its arguments and what deciding takes.
    """
    table = Table(
        title=f"Approval needed in {escape(workflow_id)}", show_header=False, title_justify="left"
    )
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("tool call", escape(approval.summary))
    table.add_row("call id", escape(approval.call_id))
    table.add_row("arguments", escape(_pretty_json(approval.arguments)))
    table.add_row("arguments hash", approval.arguments_hash)
    table.add_row("requested", when(approval.requested_at))
    table.add_row("expires", when(approval.deadline))
    return table


def _pretty_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except json.JSONDecodeError:
        return text


def approval_policy_line(approval: PendingApproval) -> str:
    """What gated an approval and how far its quorum is (`""` when no policy gated it).

    E.g. `needs 2 distinct finance approvals: args.amount_cents > 100000, rule
    refund-two (policy refunds sha256:…); approved by ana (1 of 2)`.
    """
    if approval.policy is None:
        return ""
    line = explain_verdict(approval.policy)
    if approval.quorum > 1:
        who = ", ".join(approval.approved_by) or "nobody yet"
        line += f"; approved by {who} ({len(approval.approved_by)} of {approval.quorum})"
    return line + escalation_text(approval)


def escalation_text(approval: PendingApproval) -> str:
    """Where a waiting approval's reminder and escalation stand, as `; ...` (or `""`).

    E.g. `; reminded 2026-11-26 21:00 UTC; escalated to group:oncall
    2026-11-27 00:00 UTC (was group:finance)`, or what is still to come.
    """
    state = approval.escalation
    if state is None:
        return ""

    def when(at: datetime) -> str:
        return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")

    parts: list[str] = []
    if state.reminded_at is not None:
        parts.append(f"reminded {when(state.reminded_at)}")
    elif state.remind_at is not None:
        parts.append(f"reminder {when(state.remind_at)}")
    to = ", ".join(approval.approvers)
    if state.escalated_at is not None:
        was = ", ".join(state.escalated_from) or "anyone"
        parts.append(f"escalated to {to} {when(state.escalated_at)} (was {was})")
    elif state.escalate_at is not None:
        parts.append(f"escalates {when(state.escalate_at)}")
    return "".join(f"; {p}" for p in parts)


def render_pending(state: PendingState) -> Group:
    """Tables of pending approvals, interactions, a pause and rejected decisions.

    Args:
        state: From the `pending` query.

    Returns:
        A rich renderable; says "nothing pending" when nothing is.
    """
    parts: list[Any] = []
    if state.approvals:
        table = Table(title="Approvals", title_justify="left")
        # The whole digest: it is what `approve --hash` takes.
        for column in ("call id", "tool", "summary", "deadline", "approvers", "digest"):
            table.add_column(column, overflow="fold")
        for a in state.approvals:
            who = ", ".join(a.approvers) or "anyone"
            table.add_row(
                escape(a.call_id),
                escape(a.tool),
                escape(a.summary),
                when(a.deadline),
                escape(who + (" (signed)" if a.signed else "")),
                a.arguments_hash,
            )
        parts.append(table)
        parts += [
            Text(f"{a.call_id}: {approval_policy_line(a)}") for a in state.approvals if a.policy
        ]
        parts += [_asked(a) for a in state.approvals if a.input_request is not None]
    if state.interactions:
        table = Table(title="Questions", title_justify="left")
        for column in ("call id", "tool", "arguments", "deadline", "digest"):
            table.add_column(column, overflow="fold")
        for i in state.interactions:
            table.add_row(
                escape(i.call_id),
                escape(i.tool),
                escape(i.arguments),
                when(i.deadline),
                i.arguments_hash,
            )
        parts.append(table)
        parts += [_asked(i) for i in state.interactions if i.input_request is not None]
        parts += [
            render_answer_schema(i.call_id, i.answer_schema)
            for i in state.interactions
            if i.input_request is None or i.input_request.kind == "form"
        ]
    if state.paused is not None:
        parts.append(
            Text(
                f"paused: {state.paused} (resume it: `durable-tools resume ID`, or send a message)"
            )
        )
    for sub in state.sub_agents:
        parts.append(
            Text(
                f"sub-agent: call {sub.call_id} ({sub.tool}) runs agent {sub.agent} in "
                f"{sub.workflow_id} (its approvals: `durable-tools pending {sub.workflow_id}`)"
            )
        )
    failure = state.model_failed
    if failure is not None:
        parts.append(
            Text(
                f"model_failed: turn {failure.turn} ({failure.type}): {failure.message} "
                "(run it again: `durable-tools retry`, or `send` a new message, or `cancel`)"
            )
        )
    if state.grants:
        table = Table(title="Grants (rest of the conversation)", title_justify="left")
        for column in ("grant", "scope", "by", "given", "on call", "ran", "state"):
            table.add_column(column, overflow="fold")
        for g in state.grants:
            table.add_row(
                escape(g.id),
                escape(describe_scope(g.scope)),
                escape(g.granted_by + (" (signed)" if g.signed else "")),
                when(g.granted_at),
                escape(g.call_id),
                escape(", ".join(g.uses) or "-"),
                escape(_grant_state(g)),
            )
        parts.append(table)
    if state.rejected:
        table = Table(title="Rejected decisions (latest)", title_justify="left")
        for column in ("call id", "by", "received", "reason"):
            table.add_column(column)
        for r in state.rejected[-10:]:
            table.add_row(
                escape(r.call_id), escape(r.decided_by), when(r.received_at), escape(r.reason)
            )
        parts.append(table)
    waiting = state.approvals or state.interactions or state.sub_agents
    if not (waiting or state.paused is not None or failure):
        parts.insert(0, Text("nothing pending"))
    return Group(*parts)


def asked_text(asked: InputQuestion) -> str:
    """What a running tool's MCP server asks, in one line (form, link or sampling request).

    A link is shown with its host first, so a person sees where it leads
    before opening it.
    """
    where = f"round {asked.round}"
    if asked.count > 1:
        where += f", {asked.index} of {asked.count}"
    if asked.kind == "url":
        return (
            f"MCP server {asked.server!r} asks you to open a link to {asked.host} ({where}): "
            f"{asked.message} — {asked.url}"
        )
    if asked.kind == "sampling":
        return (
            f"MCP server {asked.server!r} asks to use the conversation's model ({where}); "
            f"its last message: {asked.message}"
        )
    return f"MCP server {asked.server!r} asks ({where}): {asked.message}"


_HOW = {
    "form": "answer with the form's values below, or --decline / --cancel",
    "url": "open it, then `answer --done`; or --decline / --cancel",
    "sampling": "`approve` to let the model answer it, `deny` to refuse",
}


def _asked(pending: PendingInteraction | PendingApproval) -> Text:
    """What a running tool's MCP server asks, and how to answer (`input_request` is set)."""
    asked = pending.input_request
    assert asked is not None
    how = _HOW[asked.kind]
    if asked.kind == "url" and isinstance(pending, PendingApproval):
        how = "open it, then `approve` once done (an approver of the tool); `deny` to decline"
    return Text(f"{pending.call_id}: {asked_text(asked)} ({how})")


def render_answer_schema(call_id: str, schema: Mapping[str, Any] | None) -> Table | Text:
    """The fields an answer to question `call_id` takes, one row each.

    Args:
        call_id: The question's call id.
        schema: Its answer schema (`None`: any JSON value).

    Returns:
        A table with columns `field`, `type`, `required`, `description` and
        `constraints` (see `answer_fields`), or a line saying any JSON will do.
    """
    if schema is None:
        return Text(f"answer to {call_id}: any JSON value")
    fields = answer_fields(schema)
    table = Table(title=f"Answer to {escape(call_id)}", title_justify="left")
    table.add_column("field", overflow="fold")
    table.add_column("type", overflow="fold")
    table.add_column("required", no_wrap=True)
    table.add_column("description", overflow="fold")
    table.add_column("constraints", overflow="fold")
    for field in fields:
        table.add_row(
            escape(field.name),
            escape(field.type),
            "yes" if field.required else "no",
            escape(field.description),
            escape(field.constraints),
        )
    if len(fields) >= MAX_FIELDS:
        table.caption = f"the first {MAX_FIELDS} fields; --json prints the whole schema"
    return table


_SHOWN_CHARACTERS = 2000
"""`render_transcript` shows at most this many characters of one text (a 20 MB
tool output from external storage would take minutes to lay out); `--json` has all."""


def _shown(text: str) -> str:
    if len(text) <= _SHOWN_CHARACTERS:
        return escape(text)
    rest = f"… ({len(text)} characters in all; --json prints everything)"
    return f"{escape(text[:_SHOWN_CHARACTERS])}[dim]{escape(rest)}[/]"


def render_transcript(items: Sequence[TranscriptItem], *, skipped: int = 0) -> Table:
    """The transcript as a table: one row per message, tool call and tool output.

    Texts, arguments and outputs longer than `_SHOWN_CHARACTERS` are cut there.

    Args:
        items: From `Conversations.history`.
        skipped: How many items come before `items` (default 0): rows are
            numbered from `skipped + 1`.

    Returns:
        A rich table with columns `#`, `who` and `what`; `who` names the
        sender of a message (an operator's note marked) and of an output a
        person gave (an answer, a resume, a denial, a cancel).
    """
    table = Table(show_header=True, show_lines=False, expand=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("who", no_wrap=True)
    table.add_column("what", overflow="fold")
    for index, item in enumerate(items, start=skipped + 1):
        if isinstance(item, UserMessage):
            role = "[bold yellow]operator note[/]" if item.operator else "[bold cyan]user[/]"
            sender = f"\n[dim]from[/] {escape(item.sent_by)}" if item.sent_by else ""
            table.add_row(str(index), role + sender, _shown(item.text))
        elif isinstance(item, AssistantMessage):
            lines = [_shown(item.text)] if item.text else []
            lines += [
                f"[yellow]→ {escape(c.name)}[/] {_shown(c.arguments)} [dim]({escape(c.call_id)})[/]"
                for c in item.tool_calls
            ]
            table.add_row(str(index), "[bold green]assistant[/]", "\n".join(lines))
        elif isinstance(item, ContextSummary):
            table.add_row(
                str(index),
                "[dim]summary[/]",
                f"[dim]of items 1-{item.covers_upto} (for the model):[/] {escape(item.text)}",
            )
        else:
            if item.is_error:
                who = f"[bold red]{escape(item.tool)}[/] ✗ {escape(item.failure_kind or 'error')}"
            else:
                who = f"[bold magenta]{escape(item.tool)}[/] ✓"
            if item.sent_by:
                who += f"\n[dim]by[/] {escape(item.sent_by)}"
            table.add_row(
                str(index), who, f"{_shown(item.content)} [dim]({escape(item.call_id)})[/]"
            )
    return table


def render_status(workflow_id: str, status: ConversationStatus) -> Table:
    """The `status` query as a two-column table."""
    table = Table(title=f"Conversation {escape(workflow_id)}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in status.model_dump(
        exclude={
            "model_failed",
            "usage",
            "unanswered_messages",
            "budget",
            "budget_exceeded",
            "policy",
        }
    ).items():
        table.add_row(name.replace("_", " "), escape(str(value)))
    for model, usage in status.usage.items():
        cached = f" ({usage.cached_input_tokens} cached)" if usage.cached_input_tokens else ""
        table.add_row(
            f"tokens {escape(model)}",
            f"{usage.input_tokens} in{cached}, {usage.output_tokens} out",
        )
    failure = status.model_failed
    if failure is not None:
        table.add_row(
            "model failed", escape(f"turn {failure.turn} ({failure.type}): {failure.message}")
        )
    for name, value in render_budget(status).items():
        table.add_row(name, escape(value))
    if status.policy is not None:
        table.add_row("policy", escape(describe_policy(status.policy)))
    if status.unanswered_messages:
        table.add_row("unanswered messages", escape(render_unanswered(status.unanswered_messages)))
    return table


def render_budget(status: ConversationStatus) -> dict[str, str]:
    """Rows for a conversation's budgets: each limit with its spend, and a stop.

    Returns:
        E.g. `{"budget": "1,200 of 2,000 tokens; 0.0014 USD", "budget agent
        'frugal'": "0.0005 of 0.0008 USD"}`; empty when nothing is limited.
    """
    rows: dict[str, str] = {}
    budget = status.budget
    if budget is not None:
        scopes = [("budget", budget.conversation, budget.spent)]
        scopes += [
            (f"budget agent {name!r}", limit, budget.spent_by_agent.get(name, Spend()))
            for name, limit in sorted(budget.agents.items())
        ]
        for name, limit, spent in scopes:
            if limit is None:
                continue
            parts: list[str] = []
            if limit.max_tokens is not None:
                parts.append(f"{spent.tokens:,} of {limit.max_tokens:,} tokens")
            if limit.max_cost_usd is not None:
                parts.append(f"{spent.cost_usd:.4f} of {limit.max_cost_usd:.4f} USD")
            rows[name] = "; ".join(parts) or "no limit"
    stop = status.budget_exceeded
    if stop is not None:
        rows["budget exceeded"] = (
            f"{stop.what_waits()}: {stop.message}; raise it with "
            "`durable-tools budget raise ID --tokens N --cost USD`, or cancel"
        )
    return rows


def render_unanswered(messages: Sequence[SendMessage]) -> str:
    """User messages the model never saw (they arrived after its last turn), one per line."""
    return "\n".join(
        f"{m.text!r}" + (f" (from {m.sent_by})" if m.sent_by else "") for m in messages
    )


@dataclass(frozen=True, kw_only=True)
class PendingConversation:
    """A conversation waiting for a person, as the visibility list query finds it.

    Attributes:
        workflow_id: The conversation.
        pending: Calls waiting (`DurableToolsPendingCount`).
        kinds: What they wait for, e.g. `["approval"]` (`DurableToolsPendingKinds`).
        started: When the conversation started.
        task_queue: Its task queue.
    """

    workflow_id: str
    pending: int
    kinds: list[str]
    started: datetime
    task_queue: str


def render_pending_conversations(
    found: Sequence[PendingConversation], command: Callable[..., str]
) -> Group | Text:
    """Every conversation with something pending, and the command that shows each.

    Args:
        found: From the visibility query.
        command: Builds a `durable-tools` command line from its arguments.

    Returns:
        A rich renderable; says "no conversation is waiting" when none is.
    """
    if not found:
        return Text("no conversation is waiting for a person")
    table = Table(title="Conversations waiting for a person", title_justify="left")
    for column in ("workflow id", "pending", "kinds", "started"):
        table.add_column(column, overflow="fold")
    for conversation in found:
        table.add_row(
            escape(conversation.workflow_id),
            str(conversation.pending),
            escape(", ".join(conversation.kinds)),
            when(conversation.started),
        )
    hint = Text(f"details and call ids: {command('pending', 'WORKFLOW_ID')}")
    return Group(table, hint)


def _grant_state(grant: Grant) -> str:
    """`in force`, `until <time>`, or `revoked by ana at <time>: reason` (time of the reads)."""
    if grant.revoked_at is not None:
        why = f": {grant.revoke_reason}" if grant.revoke_reason else ""
        return f"revoked by {grant.revoked_by or 'someone'} at {when(grant.revoked_at)}{why}"
    if grant.expires_at is None:
        return "in force"
    return f"until {when(grant.expires_at)}"


def describe_policy(policy: PolicyRef) -> str:
    """An installed policy version in one line.

    E.g. `refunds sha256:9d2c... (installed by ops-lead at 2026-11-27 00:30 UTC)`.
    """
    moment = policy.installed_at
    when = f" at {moment.strftime('%Y-%m-%d %H:%M UTC')}" if moment is not None else ""
    who = f" by {policy.installed_by}" if policy.installed_by else ""
    return f"{policy.name} {policy.version} (installed{who}{when})"
