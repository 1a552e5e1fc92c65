"""`durable-tools policy`: what decided a call, where a candidate disagrees, installing a policy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from durable_tools.errors import ConfigurationError
from durable_tools.policy_document import PolicyDocument
from durable_tools.policy_reads import PolicyDiff
from durable_tools.policy_verdict import explain_verdict
from durable_tools.worker.cli.deciding import CallId
from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    DEFAULT_TIMEOUT,
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

policy_app = typer.Typer(
    name="policy",
    help="Approval policies: what decided a call (docs/policies.md).",
    no_args_is_help=True,
)


@policy_app.command("explain")
def explain_command(
    workflow_id: WorkflowId,
    call_id: CallId,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Print which policy version and rule decided a call, from the conversation's history.

    Reads the workflow's history (no worker needed). Exits 1 when no policy
    decided the call (the tool's own `needs_approval` did, or there is no
    such call).
    """
    connection = Connection(address, namespace, timeout)
    verdict = connection.on(workflow_id, lambda c: c.policy_verdict(workflow_id, call_id))
    if verdict is None:
        fail(
            f"no policy decided call {call_id!r} of {workflow_id!r} (the tool's own "
            "needs_approval did, or the conversation has no such call)"
        )
    if as_json:
        print(verdict.model_dump_json(indent=2))
        return
    out.print(f"{escape(call_id)}: {escape(explain_verdict(verdict))}", soft_wrap=True)
    out.print(f"policy:  {escape(verdict.policy)} {escape(verdict.version)}", soft_wrap=True)
    out.print(f"rule:    {escape(verdict.rule or '(default)')}", soft_wrap=True)
    out.print(f"outcome: {verdict.outcome}", soft_wrap=True)


@policy_app.command("diff")
def diff_command(
    query: Annotated[
        str,
        typer.Option(
            "--query",
            help="A visibility query ANDed to WorkflowType = 'AgentWorkflow' "
            "(e.g. \"TaskQueue = 'support'\"). Default: every conversation.",
        ),
    ] = "",
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="Most conversations read, newest first.")
    ] = 100,
    as_json: AsJson = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Summarise where the agents' candidate (shadow) policies disagree with the active ones.

    Lists recent conversations and reads their histories (no worker needed,
    through continue-as-new): counts per active rule -> candidate rule and
    outcome pair, and per tool, with example conversation ids.
    """
    connection = Connection(address, namespace, timeout)

    async def main() -> PolicyDiff:
        conversations = await connection.conversations()
        return await conversations.policy_diff(query, limit=limit)

    diff = connection.run(main)
    if as_json:
        print(diff.model_dump_json(indent=2))
        return
    out.print(
        f"{diff.disagreements} of {diff.calls} calls disagree, in "
        f"{diff.conversations_disagreeing} of {diff.conversations} conversations",
        soft_wrap=True,
    )
    if diff.active_versions:
        compared = ", ".join(f"{v} ({n} calls)" for v, n in diff.active_versions.items())
        out.print(f"compared with: {escape(compared)}", soft_wrap=True)
    if diff.by_rules:
        table = Table("active rule", "version", "candidate rule", "outcomes", "calls", "e.g.")
        for row in diff.by_rules:
            table.add_row(
                escape(row.active),
                escape(row.active_version[:19] or "-"),
                escape(row.candidate),
                escape(row.outcomes),
                str(row.count),
                escape(", ".join(row.examples)),
            )
        out.print(table)
        tools = Table("tool", "calls", "e.g.")
        for tool in diff.by_tool:
            tools.add_row(escape(tool.tool), str(tool.count), escape(", ".join(tool.examples)))
        out.print(tools)


@policy_app.command("install")
def install_command(
    policy_file: Annotated[
        Path,
        typer.Argument(help="The policy: YAML or JSON (name, rules, default).", dir_okay=False),
    ],
    workflow_ids: Annotated[
        list[str], typer.Argument(help="The conversations to install it in (one or more).")
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded).")] = "",
    by: Annotated[str, typer.Option("--by", help="Who installs it.")] = "",
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Install a policy version in running conversations (the durable `set_policy` signal).

    No worker needed: each conversation takes it at its next workflow task;
    calls waiting for approval are decided again under it (released,
    re-gated or denied), later calls are planned with it. Exits 1 when the
    file is not a policy (checked here, before connecting; its rules are
    compiled by the worker, where a rule that does not compile fails closed).
    """
    try:
        document = PolicyDocument.from_text(policy_file.read_text())
    except (OSError, UnicodeDecodeError, ConfigurationError) as exc:
        fail(f"not a policy: {exc}")
    connection = Connection(address, namespace, timeout)

    async def main() -> str:
        conversations = await connection.conversations()
        versions = [
            await conversations.set_policy(
                workflow_id, document, installed_by=by or whoami(), reason=reason
            )
            for workflow_id in workflow_ids
        ]
        return versions[0]

    version = connection.run(main, workflow_id=workflow_ids[0] if len(workflow_ids) == 1 else None)
    out.print(
        f"policy {escape(document.name)} {version} sent to {len(workflow_ids)} "
        f"conversation{'s' if len(workflow_ids) != 1 else ''}",
        soft_wrap=True,
    )
