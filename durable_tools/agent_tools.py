"""Agents as tools: a tool whose call runs another declared agent.

`agent_tool("researcher", description=...)` is a toolkit entry like any
other: the model sees one descriptor (a `message` string by default, or the
`parameters` you give), and a call runs the agent `researcher` as a
sub-agent. In the durable loop a call is a child conversation, a child
`AgentWorkflow` whose first user message is the call's task, and the
sub-agent's final output is the call's tool result (`workflows/sub_agents.py`;
docs/tools.md, "Agents as tools").

```python
research = Toolkit(search_web, finish_tool())
desk = Toolkit(
    lookup_order,
    agent_tool("researcher", description="Research a question on the web; give the question."),
)
app = App(
    toolkits={"research": research, "desk": desk},
    agents={
        "researcher": Agent(model="openai:gpt-4o-mini", toolkit="research"),
        "support": Agent(model="openai:gpt-4o", toolkit="desk"),
    },
)
```

An agent tool is a signal tool (`SignalTool`, kind `signal`): its handler
only maps the validated arguments to a `RunAgent` action while the model
activity plans the turn, so arguments that break the schema are answered
`input_validation_error` before anything starts.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from pydantic import BaseModel

from durable_tools._local_options import annotations_of, parameters_schema
from durable_tools.conversation import ConversationResult
from durable_tools.errors import ConfigurationError
from durable_tools.handler_input import clean_text
from durable_tools.results import Failure, Ok, ToolCall, failed
from durable_tools.signals import RunAgent
from durable_tools.toolkit import Toolkit
from durable_tools.tools import SignalTool

__all__ = [
    "MAX_SUB_AGENT_DEPTH",
    "MAX_SUB_AGENT_OUTPUT_BYTES",
    "SUB_AGENT_FAILED",
    "AgentTool",
    "agent_tool",
    "check_agent_tools",
    "sub_agent_result",
    "sub_agent_workflow_id",
]

MESSAGE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {
            "type": "string",
            "minLength": 1,
            "description": "The task for the agent, with everything it needs to know.",
        }
    },
    "required": ["message"],
    "additionalProperties": False,
}
"""The parameters of an agent tool declared without `parameters`."""


@dataclass(frozen=True, kw_only=True, eq=False)
class AgentTool(SignalTool):
    """A signal tool whose calls run the agent `agent` as a sub-agent (`agent_tool`).

    Attributes:
        agent: The name of the agent a call runs.
    """

    agent: str = ""


def _message(value: Any) -> str:
    # The task the sub-agent reads: the `message` itself, or the structured
    # input as JSON (a pydantic instance, or the dict a JSON Schema validated).
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if isinstance(value, dict):
        fields = cast(dict[str, Any], value)
        message = fields.get("message")
        if set(fields) == {"message"} and isinstance(message, str):
            return message
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def agent_tool(
    agent: str,
    *,
    name: str | None = None,
    description: str = "",
    parameters: Mapping[str, Any] | type[BaseModel] | None = None,
) -> AgentTool:
    """A tool that runs the agent `agent` as a sub-agent (a child conversation).

    Args:
        agent: The name of the agent a call runs: a declared agent
            (`App(agents={agent: Agent(...)})`) or an agent configuration
            the conversation knows (`handoffs`).
        name: The tool's name (default `agent`).
        description: What the agent does, for the model (default: "Ask the
            agent AGENT to do a task and return its final output.").
        parameters: The input the model gives (a pydantic model or a JSON
            Schema of an object): the validated input, as JSON, is the
            sub-agent's first message. Default: `{"message": string}`, the
            message itself.

    Returns:
        An `AgentTool` (a `SignalTool` whose handler returns `RunAgent`).

    Raises:
        InvalidToolName: The tool's name is not valid.
        ConfigurationError: `agent` is empty.

    Example:
        ```python
        kit = Toolkit(agent_tool("researcher", description="Research a question."))
        ```
    """
    if not agent:
        raise ConfigurationError("agent_tool needs the name of the agent it runs")

    def handler(args: Any) -> RunAgent:
        return RunAgent(agent=agent, message=_message(args))

    return AgentTool(
        name=name or agent,
        description=description or f"Ask the agent {agent} to do a task and return its output.",
        parameters=parameters_schema(parameters if parameters is not None else MESSAGE_PARAMETERS),
        handler=handler,
        annotations=annotations_of(None),
        agent=agent,
    )


def check_agent_tools(agents: Mapping[str, Any], toolkits: Mapping[str, object]) -> None:
    """Fail at construction on an agent tool of a declared agent that names no declared agent.

    Args:
        agents: The worker's declared agents by name (none: development
            mode, nothing to check against).
        toolkits: The worker's toolkits by name.

    Raises:
        ConfigurationError: A declared agent's toolkit has an agent tool
            running an agent the worker does not declare.
    """
    if not agents:
        return
    for name, declared in agents.items():
        kit = toolkits.get(getattr(declared, "toolkit", ""))
        if not isinstance(kit, Toolkit):
            continue
        for tool in kit.tools.values():
            if isinstance(tool, AgentTool) and tool.agent not in agents:
                raise ConfigurationError(
                    f"agent {name!r} has the agent tool {tool.name!r}, which runs agent "
                    f"{tool.agent!r}; declare it in App(agents={{...}}) "
                    f"(declared: {', '.join(sorted(agents))})"
                )


MAX_SUB_AGENT_DEPTH: Final[int] = 4
"""How deep sub-agents may nest: a conversation this many levels down
(`ConversationOptions.sub_agent_depth`) starts no sub-agent (`sub_agent_failed`)."""

SUB_AGENT_FAILED: Final[str] = "sub_agent_failed"
"""The `Failure` kind of a call whose sub-agent ended without a final output."""

MAX_SUB_AGENT_OUTPUT_BYTES: Final[int] = 256 * 1024
"""Most JSON bytes of a sub-agent's output the call takes (else `output_too_large`):
the output joins the parent's transcript and its next model request's input."""

_PLAIN_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MAX_WORKFLOW_ID = 900  # Temporal's default limit is 1,000 characters


def sub_agent_workflow_id(parent_id: str, turn: int, call_id: str) -> str:
    """The child conversation's workflow id for one call: the same on every replay.

    Args:
        parent_id: The parent conversation's workflow id.
        turn: The model turn the call belongs to (call ids are the model's:
            a model may repeat one in another turn).
        call_id: The call's id; one that is not plain (`[A-Za-z0-9_.-]`, at
            most 64 characters) is replaced by a digest of it.

    Returns:
        E.g. `ticket-7/sub-agent/3/call_abc`.
    """
    if _PLAIN_ID.fullmatch(call_id) is None:
        digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()
        call_id = f"h{digest[:32]}"
    child = f"{parent_id}/sub-agent/{turn}/{call_id}"
    if len(child) > _MAX_WORKFLOW_ID:
        parent = hashlib.sha256(parent_id.encode("utf-8", "surrogatepass")).hexdigest()
        child = f"sub-agent-{parent[:40]}/{turn}/{call_id}"
    return child


def sub_agent_result(
    call: ToolCall, agent: str, workflow_id: str, result: ConversationResult
) -> Ok | Failure:
    """The call's output for the child's `ConversationResult`.

    `finished`: `Ok` with the output (`output_too_large` past
    `MAX_SUB_AGENT_OUTPUT_BYTES`); otherwise `sub_agent_failed`, naming how
    it ended and its last text.
    """
    if result.status != "finished":
        last = f"; its last text: {clean_text(str(result.output), 400)}" if result.output else ""
        reason = (
            f"sub-agent {agent!r} (workflow {workflow_id}) ended with {result.status} "
            f"after {result.turns} model turns without a final output{last}"
        )
        return failed(call, SUB_AGENT_FAILED, reason)
    try:
        size = len(json.dumps(result.output, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError):
        size = MAX_SUB_AGENT_OUTPUT_BYTES + 1
    if size > MAX_SUB_AGENT_OUTPUT_BYTES:
        reason = (
            f"sub-agent {agent!r} returned {size:,} bytes, over the limit of "
            f"{MAX_SUB_AGENT_OUTPUT_BYTES:,}; ask it for a shorter answer"
        )
        return failed(call, "output_too_large", reason)
    return Ok(call_id=call.call_id, tool=call.name, value=result.output)
