"""Commands for people deciding: `pending`, `approve`, `deny`, `answer`."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from durable_tools.conversation import (
    PendingApproval,
    PendingInteraction,
    PendingState,
)
from durable_tools.decision_keys import SigningKey, parse_signing_key
from durable_tools.errors import ConfigurationError, DecisionRejected
from durable_tools.grants import GrantScope, describe_scope
from durable_tools.input_requests import ElicitAction
from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    DEFAULT_TIMEOUT,
    EXIT_BAD_INPUT,
    Address,
    AsJson,
    Connection,
    Namespace,
    Timeout,
    WorkflowId,
    fail,
    out,
    whoami,
)
from durable_tools.worker.follow import Commands
from durable_tools.worker.render import (
    PendingConversation,
    asked_text,
    render_pending,
    render_pending_conversations,
)

CallId = Annotated[str, typer.Argument(help="The tool call's id (see `pending`).")]
ArgumentsHash = Annotated[
    str | None,
    typer.Option(
        "--hash",
        metavar="DIGEST",
        help="The call's digest as shown by `pending` (tool, call id, arguments); no "
        "confirmation, no lookup; with --signal, decide while no worker runs.",
    ),
]
AssumeYes = Annotated[
    bool,
    typer.Option(
        "--yes",
        "-y",
        help="For scripts: look the digest up with `pending` and send it without asking "
        "(says so). Without --yes or --hash the call is shown and you confirm.",
    ),
]
KeyEnv = Annotated[
    str | None,
    typer.Option(
        "--key-env",
        metavar="NAME",
        help="Sign the decision (HMAC-SHA256) with the base64 key in this environment variable.",
    ),
]
KeyId = Annotated[
    str, typer.Option("--key-id", help="The signing key's id, as the worker knows it.")
]
Groups = Annotated[
    list[str] | None,
    typer.Option(
        "--group",
        help="A group of the decider to assert in the signed decision (repeatable).",
    ),
]
UseSignal = Annotated[
    bool,
    typer.Option(
        "--signal",
        help="Send the durable signal (stored even while no worker runs) instead of the "
        "validated update; a rejection is then only visible in `pending`.",
    ),
]

_SIGNAL_SENT = "signal sent; if it fails its checks, `pending` lists it as rejected"


def pending_command(
    workflow_id: Annotated[
        str | None,
        typer.Argument(help="The conversation's workflow id (default: every conversation)."),
    ] = None,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Show what a conversation waits for, or list every conversation waiting for a person."""
    connection = Connection(address, namespace, timeout)
    if workflow_id is None:
        _pending_everywhere(as_json, connection)
        return
    state = connection.on(workflow_id, lambda c: c.pending(workflow_id))
    if as_json:
        print(state.model_dump_json(indent=2))
        return
    out.print(render_pending(state))
    commands = Commands(address=connection.address, namespace=connection.namespace)
    for line in _deciding_commands(state, workflow_id, commands):
        out.print(line, soft_wrap=True)


def _deciding_commands(state: PendingState, workflow_id: str, commands: Commands) -> list[str]:
    """The command lines that decide what `state` waits for, one line each (markup escaped)."""
    lines: list[str] = []
    for approval in state.approvals:
        call, digest = approval.call_id, approval.arguments_hash
        approve = commands("approve", workflow_id, call, "--hash", digest)
        deny = commands("deny", workflow_id, call, "--hash", digest, "--reason", "REASON")
        lines.append(f"approve {escape(call)}: {escape(approve)}")
        lines.append(f"deny {escape(call)}:    {escape(deny)}")
    for interaction in state.interactions:
        call = interaction.call_id
        answer = commands(
            "answer", workflow_id, call, "VALUE", "--hash", interaction.arguments_hash
        )
        lines.append(f"answer {escape(call)}: {escape(answer)}")
    if state.paused is not None:
        lines.append(f"resume: {escape(commands('resume', workflow_id, '-m', 'MESSAGE'))}")
    if state.model_failed is not None:
        lines.append(f"retry: {escape(commands('retry', workflow_id))}")
    return lines


PENDING_QUERY = (
    "(DurableToolsPendingCount > 0 OR DurableToolsPendingKinds = 'pause') "
    "AND ExecutionStatus = 'Running'"
)
"""Visibility query of `pending` without an id (the workflow upserts the attributes).

A pause is listed too: it waits for a person's `resume`, though no call is
counted in `DurableToolsPendingCount`.
"""


def _pending_everywhere(as_json: bool, connection: Connection) -> None:
    from durable_tools.workflows.visibility import PENDING_COUNT, PENDING_KINDS

    async def main() -> list[PendingConversation]:
        client = await connection.client()
        found: list[PendingConversation] = []
        async for execution in client.list_workflows(PENDING_QUERY, limit=1000):
            attributes = execution.typed_search_attributes
            found.append(
                PendingConversation(
                    workflow_id=execution.id,
                    pending=attributes.get(PENDING_COUNT) or 0,
                    kinds=list(attributes.get(PENDING_KINDS) or []),
                    started=execution.start_time,
                    task_queue=execution.task_queue,
                )
            )
        return found

    found = connection.run(main)
    if as_json:
        print(json.dumps([asdict(f) for f in found], default=str, indent=2))
        return
    commands = Commands(address=connection.address, namespace=connection.namespace)
    out.print(render_pending_conversations(found, commands), soft_wrap=True)


def _signing_key(key_env: str | None, key_id: str) -> tuple[str, SigningKey] | None:
    """`(key_id, key)` from `--key-env VAR` (`BASE64` or `ed25519-private:BASE64`)."""
    if key_env is None:
        return None
    if not key_id:
        fail("--key-env needs --key-id (the id the worker knows the key by)", EXIT_BAD_INPUT)
    value = os.environ.get(key_env, "").strip()
    if not value:
        fail(f"environment variable {key_env} holds no key", EXIT_BAD_INPUT)
    try:
        return parse_signing_key(f"{key_id}:{value}", source=f"environment variable {key_env}")
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def _pending_call(
    workflow_id: str,
    call_id: str,
    *,
    interaction: bool,
    connection: Connection,
) -> PendingApproval | PendingInteraction:
    """The pending approval or question `call_id`, or a one-line failure."""

    async def main() -> PendingApproval | PendingInteraction:
        pending = await (await connection.conversations()).pending(workflow_id)
        waiting: Sequence[PendingApproval | PendingInteraction] = (
            pending.interactions if interaction else pending.approvals
        )
        match = next((w for w in waiting if w.call_id == call_id), None)
        if match is None:
            what = "an answer" if interaction else "a decision"
            ids = ", ".join(w.call_id for w in waiting) or "none"
            raise DecisionRejected(
                f"call {call_id!r} of {workflow_id!r} is not waiting for {what} (waiting: {ids})"
            )
        return match

    return connection.run(main, workflow_id=workflow_id)


def _digest_to_send(
    workflow_id: str,
    call_id: str,
    *,
    given: str | None,
    yes: bool,
    action: str,
    interaction: bool,
    connection: Connection,
    check: Callable[[PendingApproval | PendingInteraction], None] | None = None,
) -> tuple[str, str]:
    """The digest to send and the call's summary: given, looked up (`--yes`), or confirmed.

    `check` sees the pending call once looked up (not with `--hash`) and may
    `fail` before anything is shown or sent.
    """
    if given is not None:
        return given, call_id
    call = _pending_call(workflow_id, call_id, interaction=interaction, connection=connection)
    if check is not None:
        check(call)
    summary = call.summary if isinstance(call, PendingApproval) else f"{call.tool} ({call_id})"
    if yes:
        out.print(
            f"--yes: using the digest the worker reports for {escape(summary)} "
            f"without showing it for confirmation: {call.arguments_hash}",
            soft_wrap=True,
        )
        return call.arguments_hash, summary
    approvers = (
        ", ".join(call.approvers) if isinstance(call, PendingApproval) and call.approvers else ""
    )
    asked = call.input_request
    if asked is not None:
        summary = asked_text(asked)

    out.print(
        f"call:      {escape(call_id)} in {escape(workflow_id)}\n"
        f"tool:      {escape(call.tool)}\n"
        f"arguments: {escape(call.arguments)}\n"
        f"summary:   {escape(summary)}\n"
        + (f"approvers: {escape(approvers)}\n" if approvers else "")
        + f"digest:    {call.arguments_hash}",
        soft_wrap=True,
    )
    try:
        confirmed = typer.confirm(f"{action} this call?", default=False)
    except typer.Abort:
        confirmed = False
    if not confirmed:
        fail(
            "not confirmed; nothing was sent (for scripts pass --hash DIGEST, or --yes)",
            EXIT_BAD_INPUT,
        )
    return call.arguments_hash, summary


def _decide(
    workflow_id: str,
    call_id: str,
    *,
    approved: bool,
    by: str,
    reason: str,
    arguments_hash: str | None,
    yes: bool,
    sign_with: tuple[str, SigningKey] | None,
    groups: Sequence[str],
    signal: bool,
    connection: Connection,
    grant: GrantScope | None = None,
) -> None:
    digest, summary = _digest_to_send(
        workflow_id,
        call_id,
        given=arguments_hash,
        yes=yes,
        action="Approve" if approved else "Deny",
        interaction=False,
        connection=connection,
    )

    async def main() -> None:
        conversations = await connection.conversations()
        await conversations.decide(
            workflow_id,
            call_id,
            approved=approved,
            arguments_hash=digest,
            decided_by=by or whoami(),
            reason=reason,
            groups=groups,
            sign_with=sign_with,
            wait=not signal,
            grant=grant,
        )

    connection.run(main, workflow_id=workflow_id)
    verb = "approved" if approved else "denied"
    if grant is not None:
        verb += f" (and for the rest of the conversation: {escape(describe_scope(grant))})"
    how = _SIGNAL_SENT if signal else "accepted"
    signed = f", signed with key {escape(sign_with[0])}" if sign_with else ""
    out.print(f"{verb} {escape(summary)} in {escape(workflow_id)} ({how}{signed})")


def approve_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    by: Annotated[
        str, typer.Option("--as", "--by", help="Who decides (default: your login).")
    ] = "",
    reason: Annotated[str, typer.Option(help="Why (recorded with the decision).")] = "",
    arguments_hash: ArgumentsHash = None,
    yes: AssumeYes = False,
    key_env: KeyEnv = None,
    key_id: KeyId = "",
    group: Groups = None,
    signal: UseSignal = False,
    grant: Annotated[
        str | None,
        typer.Option(
            "--grant",
            metavar="TOOL",
            help="Also approve later calls of TOOL (the call's own tool) in this "
            "conversation whose arguments match every --grant-arg.",
        ),
    ] = None,
    grant_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--grant-arg",
            metavar="POINTER=VALUE",
            help="With --grant: the JSON pointer's value must equal VALUE (JSON if it "
            "parses as a scalar, else text), e.g. /order=A-1, /amount=500. Repeatable.",
        ),
    ] = None,
    grant_for: Annotated[
        float | None,
        typer.Option(
            "--grant-for",
            metavar="SECONDS",
            help="With --grant: the grant ends this many seconds after the conversation "
            "takes it (default: with the conversation).",
        ),
    ] = None,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Approve a pending tool call; it runs next.

    Shows the call (tool, arguments, summary, digest) and asks to confirm,
    unless `--hash DIGEST` (the digest shown earlier) or `--yes` is given.
    `--grant TOOL --grant-arg /order=A-1` approves it "for the rest of this
    conversation": later calls of TOOL with that order run without waiting.
    """
    _decide(
        workflow_id,
        call_id,
        approved=True,
        by=by,
        reason=reason,
        arguments_hash=arguments_hash,
        yes=yes,
        sign_with=_signing_key(key_env, key_id),
        groups=group or [],
        signal=signal,
        connection=Connection(address, namespace, timeout),
        grant=grant_scope(grant, grant_arg or [], grant_for),
    )


def grant_scope(
    tool: str | None, pairs: Sequence[str], seconds: float | None = None
) -> GrantScope | None:
    """The `GrantScope` of `--grant TOOL --grant-arg POINTER=VALUE ... --grant-for SECONDS`.

    `None`: no `--grant`. Exits with `EXIT_BAD_INPUT` for a `--grant-arg` or
    `--grant-for` without `--grant`, a pair without `=`, or a scope
    `GrantScope` refuses (not a pointer, too long, a duration not in
    (0, a year]...).
    """
    if tool is None:
        if pairs:
            fail("--grant-arg needs --grant TOOL", EXIT_BAD_INPUT)
        if seconds is not None:
            fail("--grant-for needs --grant TOOL", EXIT_BAD_INPUT)
        return None
    arguments: dict[str, Any] = {}
    for pair in pairs:
        pointer, sep, text = pair.partition("=")
        if not sep:
            fail(
                f"--grant-arg {pair[:80]!r}: expected POINTER=VALUE, e.g. /order=A-1",
                EXIT_BAD_INPUT,
            )
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        arguments[pointer] = (
            value if value is None or isinstance(value, str | int | float) else text
        )
    try:
        return GrantScope.model_validate(
            {"tool": tool, "arguments": arguments, "expires_after": seconds}
        )
    except ValidationError as exc:
        problem = "; ".join(str(e["msg"]) for e in exc.errors())
        fail(f"--grant: {problem}", EXIT_BAD_INPUT)


def deny_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    reason: Annotated[str, typer.Option(help="Why; the model reads it.")] = "",
    by: Annotated[
        str, typer.Option("--as", "--by", help="Who decides (default: your login).")
    ] = "",
    arguments_hash: ArgumentsHash = None,
    yes: AssumeYes = False,
    key_env: KeyEnv = None,
    key_id: KeyId = "",
    group: Groups = None,
    signal: UseSignal = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Deny a pending tool call; the model sees `denied` with the reason.

    Confirms like `approve` unless `--hash` or `--yes` is given.
    """
    _decide(
        workflow_id,
        call_id,
        approved=False,
        by=by,
        reason=reason,
        arguments_hash=arguments_hash,
        yes=yes,
        sign_with=_signing_key(key_env, key_id),
        groups=group or [],
        signal=signal,
        connection=Connection(address, namespace, timeout),
    )


def answer_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    value: Annotated[
        str | None,
        typer.Argument(metavar="JSON", help="The answer, as JSON (none with --decline/--cancel)."),
    ] = None,
    decline: Annotated[
        bool,
        typer.Option("--decline", help="Decline a question an MCP server asked (no JSON)."),
    ] = False,
    cancel: Annotated[
        bool,
        typer.Option("--cancel", help="Cancel (dismiss) a question an MCP server asked."),
    ] = False,
    done: Annotated[
        bool,
        typer.Option(
            "--done", help="Say you are done at the link an MCP server asked you to open (no JSON)."
        ),
    ] = False,
    by: Annotated[
        str, typer.Option("--as", "--by", help="Who answers (default: your login).")
    ] = "",
    arguments_hash: ArgumentsHash = None,
    yes: AssumeYes = False,
    signal: UseSignal = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Answer a pending question (interaction tool call) with a JSON value.

    A question an MCP server asked (its form) may instead be declined
    (`--decline`) or cancelled (`--cancel`); the server is told which. A
    link it asked you to open is answered with `--done` once you are done
    there (or `--decline` / `--cancel`).
    Shows the question and asks to confirm, unless `--hash` or `--yes` is given.
    """
    action: ElicitAction = "decline" if decline else "cancel" if cancel else "accept"
    if decline + cancel + done > 1:
        fail("give one of --decline, --cancel and --done", EXIT_BAD_INPUT)
    answer: Any = None
    if action != "accept" or done:
        if value is not None:
            fail(f"--{'done' if done else action} takes no JSON answer", EXIT_BAD_INPUT)
    elif value is None:
        fail("give the answer as JSON (or --decline / --cancel)", EXIT_BAD_INPUT)
    else:
        try:
            answer = json.loads(value)
        except json.JSONDecodeError as exc:
            fail(f"the answer is not valid JSON: {exc}", EXIT_BAD_INPUT)
    connection = Connection(address, namespace, timeout)

    def fits(call: PendingApproval | PendingInteraction) -> None:
        """Only `--done` answers a link; `--decline` / `--cancel` only a server's question."""
        asked = call.input_request
        if done and (asked is None or asked.kind != "url"):
            what = "a form" if asked is not None else "an answer"
            fail(
                f"--done is for a link's question; call {call_id!r} asks for {what}: "
                "give the answer as JSON" + (" (or --decline / --cancel)" if asked else ""),
                EXIT_BAD_INPUT,
            )
        if value is not None and asked is not None and asked.kind == "url":
            fail(
                f"call {call_id!r} asks you to open a link ({asked.host}): answer with --done "
                "once you are done there (or --decline / --cancel), with no JSON",
                EXIT_BAD_INPUT,
            )
        if action != "accept" and asked is None:
            fail(
                f"--{action} is for a question an MCP server asked; call {call_id!r} is "
                f"{call.tool}'s question: give the answer as JSON",
                EXIT_BAD_INPUT,
            )

    digest, _ = _digest_to_send(
        workflow_id,
        call_id,
        given=arguments_hash,
        yes=yes,
        action="Answer",
        interaction=True,
        connection=connection,
        check=fits,
    )
    connection.on(
        workflow_id,
        lambda c: c.answer(
            workflow_id,
            call_id,
            answer,
            arguments_hash=digest,
            answered_by=by or whoami(),
            wait=not signal,
            action=action,
        ),
    )
    how = _SIGNAL_SENT if signal else "accepted"
    said = {"accept": "answered", "decline": "declined", "cancel": "cancelled"}[action]
    out.print(f"{said} {escape(call_id)} in {escape(workflow_id)} ({how})")
