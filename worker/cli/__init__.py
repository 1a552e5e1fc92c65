"""The `durable-tools` command line: a dev server, a worker, and conversations by id.

```sh
durable-tools dev --toolkit examples.support:kit           # server + UI + worker, one process
durable-tools worker --toolkit examples.support:kit        # a worker for an existing server
durable-tools run --model test "What is the weather in Oslo?"   # start it and watch it
durable-tools run --detach --id ticket-42 "Refund A-1001"  # start it, return at once
durable-tools run --agent support --var customer_name=Ana "My order broke"  # a declared agent
durable-tools pending                                      # every conversation waiting for a person
durable-tools pending ticket-42                            # what one waits for
durable-tools approve ticket-42 call_2 --as ana            # validated update by default
durable-tools deny ticket-42 call_2 --reason "over limit" --signal   # durable signal
durable-tools answer ticket-42 call_1 '{"order_id": "A-1001"}'
durable-tools send ticket-42 "any news?"
durable-tools history ticket-42
durable-tools policy explain ticket-42 call_2              # which policy rule decided it
durable-tools mcp login notes --mcp-config mcp.toml        # OAuth for an MCP server
```

Connection options read `DURABLE_TOOLS_ADDRESS` / `TEMPORAL_ADDRESS` (default
`localhost:7233`), `DURABLE_TOOLS_NAMESPACE` / `TEMPORAL_NAMESPACE` (default
`default`) and `DURABLE_TOOLS_TASK_QUEUE` (default `agents`).
Bad input and failures print one line to stderr, never a traceback, and exit
non-zero: 2 for input the command could not use (invalid JSON, a toolkit or
app spec that does not import, a malformed model spec), 1 for everything
else (unknown conversation or call, a decision already made, no server, no
answer within `--timeout` seconds), 130 when Ctrl-C interrupts a command
(`run` then says the conversation goes on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable_tools.worker.cli import (
    budgets,
    conversing,
    deciding,
    granting,
    mcp,
    operating,
    policies,
    serving,
    watching,
)
from durable_tools.worker.cli.conversing import print_followed
from durable_tools.worker.cli.serving import dev_command as dev_command
from durable_tools.worker.cli.shared import CliError, app
from durable_tools.worker.cli.shared import out as _out
from durable_tools.worker.follow import Commands, Followed

__all__ = ["CliError", "app"]

# Who uses which command: serving.py and operating.py (operators), conversing.py
# and watching.py (people conversing), deciding.py (people deciding); shared.py holds the app,
# the options they share and the connection. Registered here, in the order
# `durable-tools --help` lists them.
_COMMANDS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("dev-server", serving.dev_server_command),
    ("worker", serving.worker_command),
    ("dev", serving.dev_command),
    ("inbox", operating.inbox_command),
    ("start", conversing.start_command),
    ("run", conversing.run_command),
    ("send", conversing.send_command),
    ("retry", conversing.retry_command),
    ("resume", conversing.resume_command),
    ("cancel", conversing.cancel_command),
    ("pending", deciding.pending_command),
    ("approve", deciding.approve_command),
    ("deny", deciding.deny_command),
    ("answer", deciding.answer_command),
    ("history", watching.history_command),
    ("follow", watching.follow_command),
    ("status", watching.status_command),
    ("result", watching.result_command),
    ("health", operating.health_command),
    ("check-upgrade", operating.check_upgrade_command),
    ("codec-server", operating.codec_server_command),
    ("keygen", operating.keygen_command),
)
for _name, _command in _COMMANDS:
    app.command(_name)(_command)
app.add_typer(policies.policy_app, name="policy")
app.add_typer(budgets.budget_app, name="budget")
app.add_typer(granting.grant_app, name="grant")
app.add_typer(mcp.mcp_app, name="mcp")


# Reached from outside by this name (tests replace `_out` to read what it prints).
def _print_followed(  # pyright: ignore[reportUnusedFunction]
    followed: Followed, workflow_id: str, commands: Commands
) -> None:
    """`print_followed` on this module's `_out` console."""
    print_followed(followed, workflow_id, commands, console=_out)
