"""The tool kinds: local, provider, signal and interaction tools.

Four kinds, all model-visible (each renders a `ToolDescriptor`):

| kind | class | who answers a call |
|---|---|---|
| `local` | `Tool` | its `run`, on a worker (a Temporal activity in the durable loop) |
| `provider` | `ProviderTool` | the model provider (web search, code execution) |
| `signal` | `SignalTool` | the agent loop itself (sleep, pause, hand off, finish) |
| `interaction` | `InteractionTool` | an outside actor, e.g. a person answering a question |

A local tool declared `local=True` runs each call as a Temporal *local
activity* instead (`Tool.local`); it is still of kind `local`.

Build them with the constructors in `durable_tools.constructors`: `@tool`
(a typed Python function), `dynamic_tool` (a JSON Schema or pydantic model
known only at run time, e.g. from MCP), `provider_tool`, `signal_tool` and
`interaction_tool`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Self, TypeGuard

from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES, parse_arguments
from durable_tools.descriptor import ToolAnnotations, ToolDescriptor, ToolKind
from durable_tools.errors import ConfigurationError, InvalidToolName, StrictModeError
from durable_tools.schema import Schema, compile_schema
from durable_tools.strict import strict_mode_violations
from durable_tools.tool_context import (
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_RETRY,
    MAX_LOCAL_TIMEOUT,
    ONE_ATTEMPT,
    ApprovalContext,
    Emit,
    FailureMode,
    NeedsApproval,
    RetryPolicy,
    ToolContext,
    ToolFailure,
    ToolRun,
)

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "DEFAULT_RETRY",
    "MAX_LOCAL_TIMEOUT",
    "ONE_ATTEMPT",
    "TOOL_NAME_PATTERN",
    "AnyTool",
    "ApprovalContext",
    "Emit",
    "FailureMode",
    "InteractionTool",
    "NeedsApproval",
    "ProviderTool",
    "RetryPolicy",
    "SignalTool",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolRun",
    "is_dynamic",
]

TOOL_NAME_PATTERN: Final[re.Pattern[str]] = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Tool names every major provider accepts (OpenAI, Anthropic, Gemini)."""


def check_tool_name(name: str) -> str:
    """Return `name` if it is a valid tool name.

    Args:
        name: The candidate name.

    Returns:
        `name`, unchanged.

    Raises:
        InvalidToolName: With a suggestion of a valid name.
    """
    if not TOOL_NAME_PATTERN.fullmatch(name):
        suggestion = re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64] or "tool"
        raise InvalidToolName(
            f"invalid tool name {name!r}: use 1-64 letters, digits, '_' or '-' "
            f"(^[a-zA-Z0-9_-]{{1,64}}$, accepted by every major provider), e.g. {suggestion!r}"
        )
    return name


EMPTY_PARAMETERS: Final[dict[str, Any]] = {"type": "object", "properties": {}}


@dataclass(frozen=True, kw_only=True, eq=False)
class _BaseTool:
    name: str
    description: str = ""
    parameters: Schema = field(default_factory=lambda: compile_schema(dict(EMPTY_PARAMETERS)))
    strict: bool = False
    annotations: ToolAnnotations = field(default_factory=ToolAnnotations)

    kind: ClassVar[ToolKind]

    def __post_init__(self) -> None:
        check_tool_name(self.name)
        if self.strict:
            problems = strict_mode_violations(self.parameters.json_schema)
            if problems:
                raise StrictModeError(
                    f"tool {self.name!r} is strict but its parameters schema breaks "
                    f"OpenAI strict mode: {'; '.join(problems)}"
                )

    def descriptor(self) -> ToolDescriptor:
        """Render what the model sees of this tool.

        Returns:
            A `ToolDescriptor`; `parameters` is the JSON Schema exactly as given
            (raw schemas) or as pydantic renders it (typed tools).
        """
        return ToolDescriptor(
            name=self.name,
            description=self.description,
            parameters=self.parameters.json_schema,
            strict=self.strict,
            kind=self.kind,
            annotations=self.annotations,
        )

    def decode(
        self, arguments: str | Mapping[str, Any], *, max_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES
    ) -> Any:
        """Parse and validate a call's arguments.

        Args:
            arguments: The raw argument text (or an already decoded mapping).
            max_bytes: Size limit of the text in bytes (default 1 MiB).

        Returns:
            The parsed input: an instance of the pydantic parameters type, or
            the validated dict for a raw JSON Schema.

        Raises:
            ArgumentsError: The text is not an acceptable JSON object.
            SchemaViolation: The object violates the parameters schema.
        """
        return self.parameters.validate(parse_arguments(arguments, max_bytes=max_bytes))

    def renamed(self, name: str) -> Self:
        """A copy of this tool under another name.

        Args:
            name: The new name, checked like any tool name.

        Returns:
            A tool of the same kind and fields, named `name`.

        Raises:
            InvalidToolName: `name` is not a valid tool name.
        """
        return dataclasses.replace(self, name=name)


@dataclass(frozen=True, kw_only=True, eq=False)
class Tool(_BaseTool):
    """A local tool: it has a run, executed on a worker.

    Build one with `@tool` or `dynamic_tool`; the fields are public for
    inspection and for `dataclasses.replace`.

    Attributes:
        run: The normalized run, `await run(input, emit, ctx)`.
        output: Optional success schema: outputs are validated and encoded with
            it; `None` means any JSON-compatible value.
        needs_approval: Whether a call waits for a person's decision (a bool, or
            a function of the parsed input and an `ApprovalContext`).
        timeout: Start-to-close timeout of one attempt in seconds (default 60;
            `None`: one day). When it passes, the tool activity cancels the
            run before Temporal retries the call: an async run gets
            `asyncio.CancelledError`, a sync run sees `ToolContext.cancelled`
            (its thread runs on until it returns).
        heartbeat_timeout: Seconds without a heartbeat after which Temporal
            counts the attempt as lost (default `DEFAULT_HEARTBEAT_TIMEOUT`,
            30). The tool activity heartbeats every third of it while the run
            works, and on every progress `emit` (with the event as the
            heartbeat's details), so it bounds how late a lost worker (or an
            event loop blocked by an async run) is noticed and how late a
            cancellation reaches the run (Temporal delivers it with a
            heartbeat's answer). `None`: no heartbeats, so a cancellation
            never reaches the run and a lost worker is noticed only after
            `timeout`.
        retry: The retry policy its author chose for exceptions raised by the
            run; `None` (the default) lets the tool's effect decide (see
            `retry_policy_for`).
        failure_mode: See `FailureMode` (default `"return"`).
        dynamic: True when built by `dynamic_tool` (see `is_dynamic`).
        approval_deadline: Seconds a call may wait for an approval decision
            before it expires; `None` uses the conversation's deadline
            (default 7 days).
        approvers: Who may decide its calls (`group:NAME`, `user:ID`); empty:
            anyone. Recorded in the call's plan, so the workflow checks it;
            with approvers only a signed decision counts.
        idempotent: Repeating a call with the same arguments has no more
            effect than running it once (default False): its calls keep the
            default retries even when they need approval.
        at_most_once: The call must never run twice (default False). The
            durable loop gives it one attempt, and an attempt whose outcome is
            unknown (its worker was lost) becomes Failure `interrupted`
            instead of `timed_out`. `@tool` and `dynamic_tool` set it for a
            tool whose annotations mark it destructive (unless it is
            idempotent or has its own `retry`); MCP tools not known to be
            idempotent set it. Calls that need approval run at most once even
            without it (see `at_most_once_for`).
        local: Run each call as a Temporal *local activity* (default False):
            in the worker that runs the workflow task, recorded as one
            `MarkerRecorded` event instead of the 3 to 6 events of an
            activity, with no round trip through the server's task queues.
            Same activity name (`tool.<name>`), `timeout` and retry policy;
            no heartbeats (`heartbeat_timeout` is not used) and no activity
            events. A local activity runs again after its worker is lost,
            so the tool must be idempotent (`@tool(local=True)` makes it so
            unless told otherwise) and `timeout` at most `MAX_LOCAL_TIMEOUT`
            (60 s). Not to be confused with `kind == "local"`, which every
            tool with a `run` has. See docs/tools.md, "Local activities".

    Raises:
        ConfigurationError: `at_most_once=True` with a `retry` of more than
            one attempt, or with `idempotent=True`; `local=True` with
            `at_most_once=True`, without `idempotent=True`, or with a
            `timeout` of `None` or over `MAX_LOCAL_TIMEOUT`.
    """

    kind: ClassVar[ToolKind] = "local"

    run: ToolRun
    output: Schema | None = None
    needs_approval: NeedsApproval = False
    timeout: float | None = 60.0
    heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT
    retry: RetryPolicy | None = None
    failure_mode: FailureMode = "return"
    dynamic: bool = False
    approval_deadline: float | None = None
    approvers: tuple[str, ...] = ()
    idempotent: bool = False
    at_most_once: bool = False
    local: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.local:
            self._check_local()
        if self.at_most_once and self.retry is not None and self.retry.max_attempts > 1:
            raise ConfigurationError(
                f"tool {self.name!r}: retry={self.retry.max_attempts} (attempts) contradicts "
                "at_most_once=True, which never runs a call twice; drop `retry`, or drop "
                "`at_most_once` (and declare idempotent=True if repeating a call is harmless)"
            )
        if self.at_most_once and self.idempotent:
            raise ConfigurationError(
                f"tool {self.name!r}: at_most_once=True contradicts idempotent=True; an "
                "idempotent tool may be retried, so keep one of them"
            )

    def _check_local(self) -> None:
        """Refuse what a Temporal local activity cannot keep (see `local`)."""
        if self.at_most_once:
            raise ConfigurationError(
                f"tool {self.name!r}: local=True contradicts at_most_once=True; a local "
                "activity runs again when its worker is lost (at least once), so drop "
                "`local` for a tool whose calls must never run twice"
            )
        if not self.idempotent:
            raise ConfigurationError(
                f"tool {self.name!r}: local=True needs idempotent=True; a local activity "
                "runs again when its worker is lost, so keep `local` for tools that are "
                "safe to repeat (no side effects), or drop it"
            )
        if self.timeout is None or self.timeout > MAX_LOCAL_TIMEOUT:
            given = "None (one day)" if self.timeout is None else f"{self.timeout:g} s"
            raise ConfigurationError(
                f"tool {self.name!r}: local=True with timeout={given}; a local activity "
                f"holds its workflow task while it runs, so its timeout must be at most "
                f"{MAX_LOCAL_TIMEOUT:g} s (a few seconds is typical); drop `local` for "
                "longer calls"
            )

    def at_most_once_for(self, *, gated: bool) -> bool:
        """Whether one call runs at most once (one attempt, an unknown outcome is `interrupted`).

        The defaults follow the effect: a tool declared `at_most_once` (or
        destructive, see the class docstring) always; a call that needs
        approval too, because a person approved one run, not several, unless
        the tool is `idempotent` or its author chose a `retry` policy.

        Args:
            gated: The call waits for (or waited for) an approval decision.

        Returns:
            True when the call gets exactly one attempt.
        """
        if self.at_most_once:
            return True
        if self.retry is not None or self.idempotent:
            return False
        return gated

    def retry_policy_for(self, *, gated: bool) -> RetryPolicy:
        """The retry policy of one call: the tool's own `retry` wins, then the effect decides.

        | the tool | attempts |
        |---|---|
        | `at_most_once=True` (or destructive annotations) | 1 |
        | its own `retry=` | as given |
        | `idempotent=True` | `RetryPolicy()` (3) |
        | the call needs approval | 1 |
        | otherwise | `RetryPolicy()` (3) |

        Args:
            gated: The call waits for (or waited for) an approval decision.

        Returns:
            The policy the durable loop gives the call's activity.
        """
        if self.at_most_once_for(gated=gated):
            return self.retry if self.retry is not None else ONE_ATTEMPT
        return self.retry if self.retry is not None else DEFAULT_RETRY

    def requires_approval(self, parsed_input: Any, context: ApprovalContext) -> bool:
        """Evaluate `needs_approval` for one call.

        Args:
            parsed_input: The decoded input (see `decode`).
            context: The call id, tool name and transcript.

        Returns:
            True when the call must wait for a decision.
        """
        if isinstance(self.needs_approval, bool):
            return self.needs_approval
        return bool(self.needs_approval(parsed_input, context))

    def encode_output(self, value: Any) -> Any:
        """Validate and encode a run's output to JSON-compatible data.

        Args:
            value: What the run returned.

        Returns:
            JSON-compatible data: encoded by the success schema if there is one.

        Raises:
            SchemaViolation: The output does not satisfy the success schema, or
                (without one) is not JSON-compatible.
        """
        if self.output is not None:
            return self.output.encode(value)
        return _to_json(value)


def _to_json(value: Any) -> Any:
    from pydantic_core import PydanticSerializationError, to_jsonable_python

    from durable_tools.schema import SchemaViolation

    try:
        return to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise SchemaViolation(f"the tool output is not JSON-compatible: {exc}") from None


@dataclass(frozen=True, kw_only=True, eq=False)
class ProviderTool(_BaseTool):
    """A tool the model provider executes (web search, code execution).

    Its results come back inside the model's turn; a call that reaches the
    executor gets Failure `non_local_tool`.

    Attributes:
        provider: Which provider runs it (`"openai"`, `"anthropic"`, `"google"`).
        config: The provider-specific tool object sent on the wire, e.g.
            `{"type": "web_search"}`.
    """

    kind: ClassVar[ToolKind] = "provider"

    provider: str
    config: dict[str, Any] = field(default_factory=dict[str, Any])

    def descriptor(self) -> ToolDescriptor:  # noqa: D102 - documented on the base
        return (
            super()
            .descriptor()
            .model_copy(update={"provider": self.provider, "provider_config": dict(self.config)})
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class SignalTool(_BaseTool):
    """A tool the agent loop interprets itself (no run).

    Attributes:
        handler: A deterministic, side-effect-free function from the parsed
            input to a `durable_tools.signals.SignalAction` (sleep, pause,
            hand off, finish, or reply with a value). The durable loop runs it
            inside workflow code, so it must not do I/O or read clocks.
    """

    kind: ClassVar[ToolKind] = "signal"

    handler: Callable[[Any], Any] | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class InteractionTool(_BaseTool):
    """A tool an outside actor answers, e.g. a person choosing an account.

    Attributes:
        answer: Optional schema an answer must satisfy; `None` accepts any
            JSON value.
    """

    kind: ClassVar[ToolKind] = "interaction"

    answer: Schema | None = None

    def descriptor(self) -> ToolDescriptor:  # noqa: D102 - documented on the base
        answer = self.answer.json_schema if self.answer is not None else None
        return super().descriptor().model_copy(update={"answer_schema": answer})


AnyTool = Tool | ProviderTool | SignalTool | InteractionTool
"""Any tool kind; `tool.kind` tells them apart."""


def is_dynamic(value: object) -> TypeGuard[Tool]:
    """Whether `value` is a tool built by `dynamic_tool`.

    Args:
        value: Anything.

    Returns:
        True only for `Tool` instances made by `dynamic_tool`; False for
        `@tool` functions, other kinds and non-tools.
    """
    return isinstance(value, Tool) and value.dynamic
