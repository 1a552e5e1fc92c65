"""Commands for people conversing: start one, talk to it, watch it, end it.

`start`, `run`, `send`, `retry`, `resume`, `cancel`; reading one
(`history`, `follow`, `status`, `result`) is `watching.py`.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import signal
import uuid
from collections.abc import Callable
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from durable_tools.budgets import Budget
from durable_tools.conversation import (
    AGENT_REFUSED,
    AgentConfig,
    ConversationOptions,
)
from durable_tools.errors import ConfigurationError
from durable_tools.teams import check_team
from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    DEFAULT_TASK_QUEUE,
    DEFAULT_TIMEOUT,
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    FOREVER,
    Address,
    CliError,
    Connection,
    Namespace,
    TaskQueue,
    Timeout,
    WorkflowId,
    fail,
    out,
    run_reported,
    whoami,
)
from durable_tools.worker.follow import Commands, Followed, Follower, LostServer
from durable_tools.worker.render import (
    render_unanswered,
)

ModelSettings = Annotated[
    list[str] | None,
    typer.Option(
        "--setting",
        help="A model setting, key=value (repeatable), sent as a request body field: the "
        'value is JSON when it parses (0.2, true, ["END"]), else a string '
        "(reasoning_effort=low).",
    ),
]

AgentName = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="An agent the worker declares (App(agents=...)); its model, toolkit and "
        "instructions come from the worker.",
    ),
]
MaxTokens = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        help="The conversation's token budget (input + output, every model call); "
        "past it the conversation waits in state budget_exceeded until `budget raise`.",
    ),
]
MaxCost = Annotated[
    float | None,
    typer.Option(
        "--max-cost",
        help="The conversation's budget in USD, priced by the worker's price table.",
    ),
]
Variables = Annotated[
    list[str] | None,
    typer.Option(
        "--var",
        help="A template variable of the agent's instructions, NAME=VALUE. Repeatable.",
    ),
]


def _variables(pairs: list[str] | None) -> dict[str, str]:
    """`--var NAME=VALUE` options as a mapping, or fail with one line (exit 2)."""
    found: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            fail(f"invalid --var {pair!r}: use NAME=VALUE", EXIT_BAD_INPUT)
        found[name] = value
    return found


def start_command(
    workflow_id: WorkflowId,
    model: Annotated[
        str | None,
        typer.Option(
            help="Model adapter name or spec; with --agent, one the agent allows "
            "(default: the agent's)."
        ),
    ] = None,
    toolkit: Annotated[
        str | None,
        typer.Option(help="Toolkit name on the worker (default: the agent's)."),
    ] = None,
    message: Annotated[str | None, typer.Option(help="The first user message.")] = None,
    instructions: Annotated[str, typer.Option(help="System instructions.")] = "",
    agent: Annotated[
        str,
        typer.Option(
            help="The agent: one the worker declares, or the name of this configuration "
            "on a worker that declares none (then give --model and --toolkit)."
        ),
    ] = "default",
    variables: Variables = None,
    approval_deadline: Annotated[
        float | None, typer.Option(help="Seconds an approval may wait (default 7 days).")
    ] = None,
    idle_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds to wait for the next message before ending (default 7 days)."),
    ] = None,
    search_attributes: Annotated[
        bool,
        typer.Option(help="Upsert DurableToolsPending* (they must be registered)."),
    ] = True,
    setting: ModelSettings = None,
    team: Team = None,
    max_tokens: MaxTokens = None,
    max_cost: MaxCost = None,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Start a conversation (or attach to the running one with this id)."""
    _check_team(team)
    values = _variables(variables)
    overrides: dict[str, Any] = {
        "search_attributes": search_attributes,
        "budget": _budget(max_tokens, max_cost),
    }
    if approval_deadline is not None:
        overrides["approval_deadline"] = approval_deadline
    if idle_timeout is not None:
        overrides["idle_timeout"] = idle_timeout
    settings = _model_settings(setting)
    try:
        config = AgentConfig(
            name=agent,
            instructions=instructions,
            model=model or "",
            toolkit=toolkit or "",
            variables=values,
            settings=settings,
        )
        options = ConversationOptions(**overrides)
    except ValueError as exc:
        fail(f"invalid option: {exc}", EXIT_BAD_INPUT)

    connection = Connection(address, namespace, timeout)

    async def main() -> str:
        conversations = await connection.conversations(task_queue)
        handle = await conversations.start(
            workflow_id, agent=config, message=message, options=options, team=team
        )
        return handle.result_run_id or handle.run_id or ""

    run_id = connection.run(main, workflow_id=workflow_id)
    out.print(
        f"conversation [bold]{escape(workflow_id)}[/] runs on task queue {escape(task_queue)} "
        f"(run {run_id}); see it with `durable-tools pending {escape(workflow_id)}`"
    )


Team = Annotated[
    str | None,
    typer.Option(
        "--team",
        help="The team that owns the conversation: the inbox shows it only to that team "
        "(its DurableToolsTeam search attribute).",
    ),
]


def _budget(max_tokens: int | None, max_cost: float | None) -> Budget | None:
    """`--max-tokens`/`--max-cost` as the conversation's `Budget` (`None`: neither), or fail.

    Fails with one line (exit 2) on a negative, non-finite or too large limit
    (`durable_tools.budgets.Budget`'s bounds).
    """
    if max_tokens is None and max_cost is None:
        return None
    try:
        return Budget(max_tokens=max_tokens, max_cost_usd=max_cost)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = "--max-tokens" if problem["loc"][0] == "max_tokens" else "--max-cost"
        fail(f"invalid {where}: {problem['msg']}", EXIT_BAD_INPUT)


def _check_team(team: str | None) -> None:
    """Fail with one line (exit 2) on a team name `check_team` refuses."""
    if team is not None:
        try:
            check_team(team)
        except ConfigurationError as exc:
            fail(str(exc), EXIT_BAD_INPUT)


def _model_settings(given: list[str] | None) -> dict[str, Any]:
    """`--setting key=value` options as settings, or fail with one line (exit 2)."""
    from durable_tools.models._settings import check_settings, parse_setting

    try:
        return check_settings(dict(parse_setting(t) for t in given or []), where="--setting")
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def _check_model(spec: str) -> None:
    """Fail with one line (exit 2) on a `test` or `scripted:FILE` spec that cannot work.

    Only the offline specs are checked here (a malformed script file is
    reported before anything starts); names an `--app` registers and provider
    specs, which need the provider's SDK and key, are the worker's to resolve.
    """
    if spec != "test" and not spec.startswith("scripted:"):
        return
    try:
        registry = importlib.import_module("durable_tools.models.registry")
    except ModuleNotFoundError:  # no registry: the worker alone resolves the name
        return
    resolve: Callable[[str], object] | None = getattr(registry, "resolve_model", None)
    if resolve is None:
        return
    try:
        resolve(spec)
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def print_followed(
    followed: Followed, workflow_id: str, commands: Commands, *, console: Console
) -> None:
    """Print how `run` ended on `console`; raise `typer.Exit` unless it ended or waits idle."""
    if followed.outcome == "detached":
        console.print(
            f"detached: conversation {escape(workflow_id)} goes on; follow it with "
            f"`{escape(commands('history', workflow_id))}` or "
            f"`{escape(commands('pending', workflow_id))}`",
            soft_wrap=True,
        )
        raise typer.Exit(130)
    if followed.outcome == "model_failed":
        console.print(
            "the conversation waits: run the turn again with "
            f"`{escape(commands('retry', workflow_id))}`, send a new message with "
            f"`{escape(commands('send', workflow_id, 'MESSAGE'))}`, or cancel it",
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILURE)
    if followed.outcome == "budget_exceeded":
        raise_it = commands("budget", "raise", workflow_id, "--tokens", "N", "--cost", "USD")
        console.print(
            f"the conversation waits: raise its budget with `{escape(raise_it)}`, or cancel it",
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILURE)
    if followed.outcome == "idle":
        console.print(f"[bold]answer[/]: {escape(followed.answer)}", soft_wrap=True)
        console.print(
            "the conversation waits for your next message: "
            f"`{escape(commands('send', workflow_id, 'MESSAGE'))}`",
            soft_wrap=True,
        )
        return
    result = followed.result
    assert result is not None  # outcome "ended"
    output = result.output
    shown = output if isinstance(output, str) else json.dumps(output, indent=2, default=str)
    label = "final answer" if result.status == "finished" else f"ended ({result.status})"
    console.print(f"[bold]{label}[/]: {escape(shown)}", soft_wrap=True)
    if result.unanswered_messages:
        console.print(
            f"[bold]unanswered[/] (sent after the model's last turn, never seen by it):\n"
            f"{escape(render_unanswered(result.unanswered_messages))}",
            soft_wrap=True,
        )


def run_command(
    prompt: Annotated[str, typer.Argument(help="The first user message.")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Model the worker resolves: test, scripted:FILE, openai:MODEL, "
            "anthropic:MODEL, or a name an --app registers; with --agent, one the agent "
            "allows (default: the agent's; without --agent: test)."
        ),
    ] = None,
    toolkit: Annotated[
        str | None,
        typer.Option(
            help="Toolkit name on the worker (the first --toolkit is 'default'; "
            "with --agent: the agent's)."
        ),
    ] = None,
    agent: AgentName = None,
    variables: Variables = None,
    workflow_id: Annotated[
        str | None, typer.Option("--id", help="Workflow id (default: run-<random hex>).")
    ] = None,
    instructions: Annotated[str, typer.Option(help="System instructions.")] = "",
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Print the id and return at once.")
    ] = False,
    setting: ModelSettings = None,
    team: Team = None,
    max_tokens: MaxTokens = None,
    max_cost: MaxCost = None,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    task_queue: TaskQueue = DEFAULT_TASK_QUEUE,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=0.1, help="Seconds to wait for Temporal to start it."),
    ] = DEFAULT_TIMEOUT,
) -> None:
    """Start a conversation and show what happens until it ends (Ctrl-C detaches).

    Shows model text, tool calls starting and finishing, retries, progress,
    approvals and questions with the commands that decide them, and the final
    answer. When the model answers in text, the conversation waits for the next
    message (`send`); `run` shows the answer and returns.
    """
    _check_team(team)
    values = _variables(variables)
    settings = _model_settings(setting)
    options = ConversationOptions(budget=_budget(max_tokens, max_cost))
    if agent is None:  # development mode: the whole configuration from here
        model = model or "test"
        toolkit = toolkit or "default"
    if model:
        _check_model(model)
    wf = workflow_id or f"run-{uuid.uuid4().hex[:12]}"
    config = AgentConfig(
        name=agent or "default",
        instructions=instructions,
        model=model or "",
        toolkit=toolkit or "",
        variables=values,
        settings=settings,
    )
    what = (
        f"agent {agent}" + (f", model {model}" if model else "")
        if agent
        else f"model {model}, toolkit {toolkit}"
    )
    commands = Commands(
        address=address,
        namespace=namespace,
        default_address=DEFAULT_ADDRESS,
        default_namespace=DEFAULT_NAMESPACE,
    )

    connection = Connection(address, namespace, FOREVER)

    async def main() -> Followed | None:
        try:
            async with asyncio.timeout(timeout):
                conversations = await connection.conversations(task_queue)
                await conversations.start(
                    wf, agent=config, message=prompt, options=options, team=team
                )
        except TimeoutError:
            raise CliError(
                f"no answer within {timeout:g} s from Temporal at {address} "
                f"(starting conversation {wf!r})"
            ) from None
        if detach:
            return None
        out.print(
            f"conversation [bold]{escape(wf)}[/] started ({escape(what)}, task queue "
            f"{escape(task_queue)}); Ctrl-C detaches",
            soft_wrap=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        try:
            follower = Follower(
                conversations,
                wf,
                emit=lambda line: out.print(line, soft_wrap=True),
                commands=commands,
            )
            followed = await follower.follow(stop)
        except LostServer as exc:
            raise CliError(
                f"{exc} at {address}; conversation {wf!r} goes on on the server: see it later "
                f"with `{commands('history', wf)}`"
            ) from exc
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        failure = followed.failure
        if failure is not None and failure.type == AGENT_REFUSED and failure.turn == 1:
            # The worker refused what this command asked for: nothing ran, and
            # only a new `run` can fix it. Leave no conversation waiting for it.
            await conversations.cancel(wf)
            raise CliError(
                f"the worker refused what this run asked for ({failure.message}); "
                f"conversation {wf!r} is cancelled: nothing of it ran"
            )
        return followed

    followed = run_reported(
        main,
        address=address,
        namespace=namespace,
        timeout=FOREVER,
        workflow_id=wf,
    )
    if followed is None:
        out.print(f"started conversation [bold]{escape(wf)}[/]", soft_wrap=True)
        for what, command in (
            ("watch it", "history"),
            ("what it waits for", "pending"),
            ("wait for its result", "result"),
        ):
            out.print(f"  {what}: {escape(commands(command, wf))}", soft_wrap=True)
        return
    print_followed(followed, wf, commands, console=out)


def send_command(
    workflow_id: WorkflowId,
    text: Annotated[str, typer.Argument(help="The message.")],
    by: Annotated[str, typer.Option("--by", help="Who sends it (default: your login).")] = "",
    operator: Annotated[
        bool,
        typer.Option(
            "--operator",
            help="Send an operator's note: the transcript marks it and the model reads it "
            "as a note from the operator, not as the user's words (default: a user message).",
        ),
    ] = False,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Send a user message, or an operator's note (a durable signal; no worker needs to run)."""
    sender = by or whoami()
    Connection(address, namespace, timeout).on(
        workflow_id, lambda c: c.send(workflow_id, text, sent_by=sender, operator=operator)
    )
    what = "an operator's note" if operator else "a user message"
    out.print(f"sent {what} from {escape(sender)} to {escape(workflow_id)}")


def retry_command(
    workflow_id: WorkflowId,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--signal",
            help="--wait (default): the validated update, which needs a running worker "
            "and fails unless the conversation is in state model_failed. --signal: the "
            "durable signal, taken even with no worker running, ignored in other states.",
        ),
    ] = True,
    by: Annotated[str, typer.Option("--by", help="Who asks.")] = "",
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Run a failed model turn again (a conversation in state model_failed)."""
    Connection(address, namespace, timeout).on(
        workflow_id, lambda c: c.retry(workflow_id, requested_by=by or whoami(), wait=wait)
    )
    if wait:
        out.print(f"{escape(workflow_id)} runs its model turn again")
    else:
        out.print(
            f"asked {escape(workflow_id)} to run its model turn again (if it waits after a failure)"
        )


def resume_command(
    workflow_id: WorkflowId,
    message: Annotated[
        str,
        typer.Option("--message", "-m", help="What the model reads as the pause's answer."),
    ] = "resumed",
    by: Annotated[str, typer.Option("--as", help="Who resumes (default: your login).")] = "",
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--signal",
            help="--wait (default): the validated update, which needs a running worker "
            "and fails unless a pause waits. --signal: the durable signal, taken even "
            "with no worker running; with nothing paused it resumes the next pause.",
        ),
    ] = True,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Resume a paused conversation (the `pause` tool's call gets the message)."""
    Connection(address, namespace, timeout).on(
        workflow_id,
        lambda c: c.resume(workflow_id, message, resumed_by=by or whoami(), wait=wait),
    )
    if wait:
        out.print(f"resumed {escape(workflow_id)}")
    else:
        out.print(f"sent resume to {escape(workflow_id)} (it resumes the pause, or the next one)")


def cancel_command(
    workflow_id: WorkflowId,
    by: Annotated[str, typer.Option("--by", help="Who cancels it (default: your login).")] = "",
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> None:
    """Cancel a conversation (open calls are answered cancelled or interrupted).

    The cancel request's reason names who cancelled (`cancelled by NAME`): the
    cancelled calls' outputs and the last event name them.
    """
    Connection(address, namespace, timeout).on(
        workflow_id, lambda c: c.cancel(workflow_id, cancelled_by=by or whoami())
    )
    out.print(f"asked {escape(workflow_id)} to cancel")
