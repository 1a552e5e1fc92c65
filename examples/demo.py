"""The `make demo` application: real tools of every kind the durable loop runs.

| tool | kind | what it shows |
|---|---|---|
| `time__get_current_time` | MCP, stdio | `mcp-server-time`'s tool; each worker reconnects |
| `check_service` | local | fails twice, then succeeds: Temporal's activity retries |
| `write_file` | local, approval | a person approves each write; escapes refused |
| `ask_user` | interaction | a question a person answers, checked by a schema |
| `finish` | signal | the structured final output |

The model is `ScriptedFileModel` playing `examples/demo_script.yaml`
(registered under the spec `scripted:examples/demo_script.yaml`): its last
turn quotes the MCP server's time, the flaky tool's attempt count, the file
written and the person's answer, through the script's `{{ call_id.field }}`
templates.

The workspace `write_file` writes into is `DURABLE_TOOLS_DEMO_WORKSPACE` when
set, else `.durable-tools/workspace/` under the worker's working directory.

The app declares one agent, `reporter` (that model, the `demo` toolkit, its
instructions): a client starts a conversation by its name and chooses nothing
else. The app also allows the offline models (`test`, `scripted:FILE` under
`examples/`), as a demo may; a production app leaves them off.

Run it: `make demo` (embedded server, the whole story), or
`durable-tools dev --app examples.demo:app` and then
`durable-tools run --agent reporter "Status report"`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pydantic import BaseModel

from durable_tools import (
    RetryPolicy,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolFailure,
    Toolkit,
    finish_tool,
    interaction_tool,
    tool,
)
from durable_tools.agents import Agent
from durable_tools.conversation import AgentConfig
from durable_tools.mcp import McpServerConfig
from durable_tools.models.scripted import ScriptedFileModel
from durable_tools.worker import App

__all__ = [
    "AGENT",
    "FAILING_ATTEMPTS",
    "MODEL",
    "REPORTER",
    "SCRIPT",
    "TIME_SERVER",
    "WORKSPACE_ENV",
    "ServiceStatus",
    "WrittenFile",
    "app",
    "ask_user",
    "check_service",
    "default_workspace",
    "kit",
    "make_kit",
    "write_file_tool",
]

WORKSPACE_ENV = "DURABLE_TOOLS_DEMO_WORKSPACE"
"""Environment variable naming the directory `write_file` writes into."""

SCRIPT = Path(__file__).with_name("demo_script.yaml")
"""The scripted model's turns."""

MODEL = "scripted:examples/demo_script.yaml"
"""The name the scripted model is registered under (also a spec any worker resolves)."""

FAILING_ATTEMPTS = 2
"""Attempts of every `check_service` call that fail before one succeeds."""


def default_workspace() -> Path:
    """`$DURABLE_TOOLS_DEMO_WORKSPACE`, else `.durable-tools/workspace` (made absolute)."""
    return Path(os.environ.get(WORKSPACE_ENV) or ".durable-tools/workspace").resolve()


class ServiceStatus(BaseModel):
    """What `check_service` reports."""

    service: str
    status: str
    attempt: int


class WrittenFile(BaseModel):
    """What `write_file` reports."""

    path: str
    """The path relative to the workspace, as the model gave it."""
    file: str
    """The absolute path written."""
    bytes: int


@tool(
    timeout=10,
    retry=RetryPolicy(max_attempts=5, initial_interval=1.0, backoff_coefficient=1.0),
    annotations=ToolAnnotations(read_only=True, destructive=False, idempotent=True),
)
async def check_service(name: str, ctx: ToolContext) -> ServiceStatus:
    """Check an upstream service's health.

    The example's service drops the first two connections of every call: each
    call fails on attempts 1 and 2 and succeeds on attempt 3. The attempt
    number comes from Temporal (`ToolContext.attempt`), so it survives a
    worker restart; no state is kept in the process.

    Args:
        name: The service, e.g. "billing".
    """
    if ctx.attempt <= FAILING_ATTEMPTS:
        raise ConnectionError(f"{name}: connection reset by peer (attempt {ctx.attempt})")
    return ServiceStatus(service=name, status="ok", attempt=ctx.attempt)


def write_file_tool(workspace: Path) -> Tool:
    """Build `write_file`, writing under `workspace` and gated by approval.

    Args:
        workspace: The directory files are written into (created on the first
            write). A path that resolves outside it (`..`, an absolute path, a
            symlink pointing out) is refused with Failure `outside_workspace`.

    Returns:
        The tool.
    """
    root = workspace.resolve()

    @tool(
        needs_approval=True,
        timeout=10,
        annotations=ToolAnnotations(destructive=True, idempotent=True, open_world=False),
    )
    def write_file(path: str, content: str) -> WrittenFile:
        """Write a UTF-8 text file in the workspace (a person approves each write).

        Args:
            path: A path relative to the workspace, e.g. "reports/status.md".
            content: The file's text.
        """
        target = (root / path).resolve()
        if not target.is_relative_to(root):
            raise ToolFailure(
                "outside_workspace",
                f"{path!r} resolves outside the workspace; give a relative path inside it",
            )
        if target == root:
            raise ToolFailure("invalid_path", "the path names the workspace itself, not a file")
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode()
        target.write_bytes(data)
        return WrittenFile(path=path, file=str(target), bytes=len(data))

    return write_file


ask_user = interaction_tool(
    "ask_user",
    description="Ask the person a question and wait for the reply (it may take days).",
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question."}},
        "required": ["question"],
        "additionalProperties": False,
    },
    answer={
        "type": "object",
        "properties": {"recipient": {"type": "string", "minLength": 1}},
        "required": ["recipient"],
        "additionalProperties": False,
    },
)
"""Asks who receives the report; answer e.g. `{"recipient": "ops@example.com"}`."""


def make_kit(workspace: Path) -> Toolkit:
    """The demo's local tools, with `write_file` writing under `workspace`."""
    return Toolkit(check_service, write_file_tool(workspace), ask_user, finish_tool(), label="demo")


kit = make_kit(default_workspace())
"""The demo toolkit (MCP tools join it on the worker)."""

TIME_SERVER = McpServerConfig(
    name="time",
    command=str(Path(sys.executable).with_name("mcp-server-time")),
    args=["--local-timezone", "Etc/UTC"],
    tools=["get_current_time"],
    trust_annotations=True,  # a server we install and pin: its read-only hint is policy
)
"""`mcp-server-time` (installed next to the interpreter); its tool is `time__get_current_time`."""

REPORTER = Agent(
    model=MODEL,
    toolkit="demo",
    instructions=(
        "You write short status reports: check the time and the services, write the "
        "report into the workspace (a person approves writes), ask who receives it, finish."
    ),
)
"""The demo's agent, declared on the worker."""

AGENT = AgentConfig(name="reporter")
"""What the demo's client sends: the agent's name, nothing else."""

app = App(
    toolkits={"demo": kit},
    models={MODEL: ScriptedFileModel(SCRIPT)},
    mcp_servers=[TIME_SERVER],
    agents={AGENT.name: REPORTER},
    allow_offline_models=True,
    scripts_dir=SCRIPT.parent,
)
"""The application `durable-tools worker --app examples.demo:app` serves."""
