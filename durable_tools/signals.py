"""Signal tools: tools the agent loop interprets, and the actions they produce.

A signal tool's handler maps the parsed input to a `SignalAction`. The durable
loop carries it out inside workflow code, so handlers must be deterministic
(no I/O, no clocks, no randomness). Built-in signal tools:

| tool | action | what the durable loop does |
|---|---|---|
| `sleep` | `Sleep` | a durable timer ("check again in 3 days"), no worker needed meanwhile |
| `pause` | `Pause` | waits for a `resume` message |
| `handoff` | `Handoff` | continues under another agent configuration |
| `finish` | `Finish` | ends the conversation with a structured final output |
| `agent_tool(...)` | `RunAgent` | runs a sub-agent as a child workflow; its output answers |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from durable_tools.constructors import signal_tool
from durable_tools.errors import ConfigurationError
from durable_tools.tools import SignalTool

__all__ = [
    "Finish",
    "Handoff",
    "Pause",
    "Reply",
    "RunAgent",
    "SignalAction",
    "Sleep",
    "finish_tool",
    "handoff_tool",
    "pause_tool",
    "sleep_tool",
]

_MAX_SLEEP_SECONDS = 366 * 24 * 3600


class Sleep(BaseModel):
    """Wait durably, then answer the call and continue.

    Attributes:
        seconds: How long, in seconds (> 0).
        reason: Why, for people reading the history.
    """

    model_config = ConfigDict(frozen=True)
    action: Literal["sleep"] = "sleep"
    seconds: float = Field(gt=0)
    reason: str = ""


class Pause(BaseModel):
    """Wait until someone sends `resume`; the resume message answers the call.

    Attributes:
        reason: Why, shown in the `pending` query.
        seconds: Longest wait in seconds; past it the pause ends by itself and
            the call's output says so (`None`, the default: until a `resume`
            or a new user message).
    """

    model_config = ConfigDict(frozen=True)
    action: Literal["pause"] = "pause"
    reason: str = ""
    seconds: float | None = Field(default=None, gt=0, le=_MAX_SLEEP_SECONDS)


class Handoff(BaseModel):
    """Continue the conversation under another agent configuration.

    Attributes:
        agent: Name of an agent configuration the conversation knows.
        reason: Why, for the next agent and for people.
    """

    model_config = ConfigDict(frozen=True)
    action: Literal["handoff"] = "handoff"
    agent: str
    reason: str = ""


class Finish(BaseModel):
    """End the conversation with a final output.

    Attributes:
        output: JSON-compatible final output (the conversation's result).
    """

    model_config = ConfigDict(frozen=True)
    action: Literal["finish"] = "finish"
    output: Any = None


class Reply(BaseModel):
    """Answer the call with a value and continue (custom signal tools).

    Attributes:
        value: JSON-compatible value the model receives as the tool output.
    """

    model_config = ConfigDict(frozen=True)
    action: Literal["reply"] = "reply"
    value: Any = None


class RunAgent(BaseModel):
    """Run another agent as a sub-agent; its final output answers the call.

    The durable loop runs it as a child conversation (`workflows/sub_agents.py`):
    a child `AgentWorkflow` whose first user message is `message`.

    Attributes:
        agent: The name of a declared agent (`App(agents=...)`), or of an
            agent configuration the conversation knows.
        message: The task, the sub-agent's first user message.
    """

    model_config = ConfigDict(frozen=True)
    action: Literal["agent"] = "agent"
    agent: str
    message: str


SignalAction = Annotated[
    Sleep | Pause | Handoff | Finish | Reply | RunAgent, Field(discriminator="action")
]
"""What a signal tool asks the loop to do, discriminated by `action`."""


def sleep_tool(name: str = "sleep", *, max_seconds: float = _MAX_SLEEP_SECONDS) -> SignalTool:
    """The built-in `sleep` signal tool: "check again in N seconds".

    Args:
        name: Tool name (default `"sleep"`).
        max_seconds: Longest sleep the model may ask for (default 366 days).

    Returns:
        A `SignalTool` whose handler returns `Sleep`.
    """
    schema = {
        "type": "object",
        "properties": {
            "seconds": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": max_seconds,
                "description": "How long to wait, in seconds.",
            },
            "reason": {"type": "string", "description": "Why you are waiting."},
        },
        "required": ["seconds"],
        "additionalProperties": False,
    }
    return signal_tool(
        name,
        description="Wait durably for a while, then continue (e.g. check again in 3 days).",
        parameters=schema,
        handler=lambda args: Sleep(seconds=args["seconds"], reason=args.get("reason", "")),
    )


def pause_tool(name: str = "pause", *, max_seconds: float | None = None) -> SignalTool:
    """The built-in `pause` signal tool: wait until a person resumes the conversation.

    Args:
        name: Tool name (default `"pause"`).
        max_seconds: The longest pause in seconds (at most 366 days): the
            pause ends by itself after it, and the call's output says that
            nobody resumed it. `None` (the default): a pause lasts until a
            `resume`, a new user message or cancellation.

    Returns:
        A `SignalTool` whose handler returns `Pause`.

    Raises:
        ConfigurationError: `max_seconds` is not in `(0, 366 days]`.
    """
    if max_seconds is not None and not 0 < max_seconds <= _MAX_SLEEP_SECONDS:
        raise ConfigurationError(
            f"max_seconds must be in (0, {_MAX_SLEEP_SECONDS:g}], got {max_seconds!r}"
        )
    schema = {
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "What you are waiting for."}},
        "additionalProperties": False,
    }
    description = "Pause until a person resumes the conversation."
    if max_seconds is not None:
        description += f" The pause ends by itself after {max_seconds:g} seconds."
    return signal_tool(
        name,
        description=description,
        parameters=schema,
        handler=lambda args: Pause(reason=args.get("reason", ""), seconds=max_seconds),
    )


def handoff_tool(agents: Sequence[str] | Mapping[str, str], name: str = "handoff") -> SignalTool:
    """The built-in `handoff` signal tool.

    Args:
        agents: Agent configuration names the model may hand off to, or a
            mapping of name to a description of when to pick it.
        name: Tool name (default `"handoff"`).

    Returns:
        A `SignalTool` whose handler returns `Handoff`.
    """
    names = list(agents)
    described = (
        "; ".join(f"{k}: {v}" for k, v in agents.items()) if isinstance(agents, Mapping) else ""
    )
    schema = {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "enum": names, "description": described or "Agent name."},
            "reason": {"type": "string", "description": "Why you hand off."},
        },
        "required": ["agent"],
        "additionalProperties": False,
    }
    return signal_tool(
        name,
        description="Hand the conversation off to another agent.",
        parameters=schema,
        handler=lambda args: Handoff(agent=args["agent"], reason=args.get("reason", "")),
    )


def finish_tool(
    output: Mapping[str, Any] | None = None,
    name: str = "finish",
    *,
    output_type: type[BaseModel] | None = None,
) -> SignalTool:
    """The built-in `finish` signal tool: end with a structured final output.

    Args:
        output: JSON Schema of the final output (default: any JSON value).
        name: Tool name (default `"finish"`).
        output_type: A pydantic model whose JSON Schema becomes the output's
            schema (instead of `output`). A `finish` call whose output does
            not validate is answered `input_validation_error` naming the
            problem, so the model tries again; `Conversations.result(id,
            output_type=...)` reads the output back as that type.

    Returns:
        A `SignalTool` with parameters `{"output": <output schema>}` whose
        handler returns `Finish`.

    Raises:
        ConfigurationError: Both `output` and `output_type` are given.
    """
    definitions: dict[str, Any] = {}
    if output_type is not None:
        if output is not None:
            raise ConfigurationError(f"finish_tool {name!r}: give output or output_type, not both")
        output = dict(output_type.model_json_schema())
        # `$ref`s point at the root: lift the model's `$defs` to the tool's schema.
        definitions = output.pop("$defs", {})
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"output": dict(output) if output is not None else {}},
        "required": ["output"],
        "additionalProperties": False,
    }
    if definitions:
        schema["$defs"] = definitions

    def handler(args: Any) -> Finish:
        if output_type is None:
            return Finish(output=args["output"])
        # Validators JSON Schema cannot express (pydantic field validators)
        # run here too; a ValidationError becomes `input_validation_error`.
        return Finish(output=output_type.model_validate(args["output"]).model_dump(mode="json"))

    return signal_tool(
        name,
        description="Finish the conversation with its final output.",
        parameters=schema,
        handler=handler,
    )
