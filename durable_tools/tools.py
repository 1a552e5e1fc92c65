"""The tool kinds and their constructors.

Four kinds, all model-visible (each renders a `ToolDescriptor`):

| kind | class | who answers a call |
|---|---|---|
| `local` | `Tool` | its `run`, on a worker (a Temporal activity in the durable loop) |
| `provider` | `ProviderTool` | the model provider (web search, code execution) |
| `signal` | `SignalTool` | the agent loop itself (sleep, pause, hand off, finish) |
| `interaction` | `InteractionTool` | an outside actor, e.g. a person answering a question |

Build them with `@tool` (a typed Python function), `dynamic_tool` (a JSON
Schema or pydantic model known only at run time, e.g. from MCP),
`provider_tool`, `signal_tool` and `interaction_tool`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, Self, TypeGuard, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, create_model

from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES, parse_arguments
from durable_tools.descriptor import ToolAnnotations, ToolDescriptor, ToolKind
from durable_tools.errors import ConfigurationError, InvalidToolName, StrictModeError
from durable_tools.schema import Schema, compile_schema
from durable_tools.strict import strict_mode_violations

__all__ = [
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
    "dynamic_tool",
    "interaction_tool",
    "is_dynamic",
    "normalize_run",
    "provider_tool",
    "signal_tool",
    "tool",
]

TOOL_NAME_PATTERN: Final[re.Pattern[str]] = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Tool names every major provider accepts (OpenAI, Anthropic, Gemini)."""

Emit = Callable[[Any], None]
"""Progress callback: `emit(event)` with a JSON-compatible event."""

FailureMode = Literal["return", "raise"]
"""What an exception in a run becomes: a `Failure` the model sees (`"return"`,
the default) or, in plain-asyncio use of `Toolkit.run`, an exception that
propagates to the caller (`"raise"`). The durable loop always returns."""


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a run knows about the call it serves.

    Attributes:
        call_id: The model's id for the call.
        tool: The tool name.
        idempotency_key: A key that is the same for every attempt of this call.
            The durable loop sets it to `"{workflow_id}/{call_id}"`, stable
            across retries, worker restarts and continue-as-new; pass it to
            downstream APIs that deduplicate (payments, tickets, e-mail).
        attempt: The attempt number, starting at 1.
    """

    call_id: str
    tool: str
    idempotency_key: str
    attempt: int = 1


@dataclass(frozen=True, kw_only=True)
class ApprovalContext:
    """What a `needs_approval` function knows about the call.

    Attributes:
        call_id: The model's id for the call.
        tool: The tool name.
        transcript: The transcript up to (and including) the turn that made
            the call, as a tuple of transcript items.
    """

    call_id: str
    tool: str
    transcript: tuple[Any, ...] = ()


NeedsApproval = bool | Callable[[Any, ApprovalContext], bool]
"""`True`/`False`, or a function of the parsed input and an `ApprovalContext`."""

ToolRun = Callable[[Any, Emit, ToolContext], Awaitable[Any]]
"""A normalized run: `await run(input, emit, ctx)` returns the tool's output."""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often a local tool is retried when its run raises.

    Mirrors Temporal's activity retry policy, which the durable loop uses.

    Attributes:
        max_attempts: Total attempts including the first (>= 1; default 3).
        initial_interval: Seconds before the first retry (default 1.0).
        backoff_coefficient: Multiplier between retries (default 2.0).
        maximum_interval: Cap on the interval between retries, seconds
            (default 60.0).
        non_retryable_error_types: Exception class names that are never
            retried (e.g. `("PermissionError",)`).
    """

    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float = 60.0
    non_retryable_error_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("RetryPolicy.max_attempts must be >= 1")
        if self.initial_interval <= 0 or self.backoff_coefficient < 1:
            raise ConfigurationError(
                "RetryPolicy needs initial_interval > 0 and backoff_coefficient >= 1"
            )


class ToolFailure(Exception):
    """Raise inside a run to answer the call with a `Failure` of your kind.

    Not retried unless `retryable` is true.

    Args:
        kind: The failure kind the model sees, e.g. `"not_found"`.
        reason: What happened and what the model could do about it.
        retryable: Whether the durable loop may retry the call.
    """

    def __init__(self, kind: str, reason: str, *, retryable: bool = False) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason
        self.retryable = retryable


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


_EMPTY_PARAMETERS: Final[dict[str, Any]] = {"type": "object", "properties": {}}


@dataclass(frozen=True, kw_only=True, eq=False)
class _BaseTool:
    name: str
    description: str = ""
    parameters: Schema = field(default_factory=lambda: compile_schema(dict(_EMPTY_PARAMETERS)))
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
        timeout: Start-to-close timeout of one attempt in seconds (default 60).
        heartbeat_timeout: Seconds without a heartbeat (progress `emit`) after
            which the attempt counts as failed; `None` disables it.
        retry: Retry policy for exceptions raised by the run.
        failure_mode: See `FailureMode` (default `"return"`).
        dynamic: True when built by `dynamic_tool` (see `is_dynamic`).
        approval_deadline: Seconds a call may wait for an approval decision
            before it expires; `None` uses the conversation's deadline
            (default 7 days).
    """

    kind: ClassVar[ToolKind] = "local"

    run: ToolRun
    output: Schema | None = None
    needs_approval: NeedsApproval = False
    timeout: float | None = 60.0
    heartbeat_timeout: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    failure_mode: FailureMode = "return"
    dynamic: bool = False
    approval_deadline: float | None = None

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


def normalize_run(fn: Callable[..., Any]) -> ToolRun:
    """Turn a run of any accepted shape into a `ToolRun`.

    Accepted shapes: `fn()`, `fn(input)`, `fn(input, emit)` and
    `fn(input, emit, ctx)`, sync or async; the number of positional parameters
    decides what is passed. Sync functions run in a worker thread
    (`asyncio.to_thread`); an awaitable they return is awaited.

    Args:
        fn: The function.

    Returns:
        `run(input, emit, ctx)`.
    """
    try:
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            arity = 3
        else:
            positional = (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            )
            arity = min(sum(1 for p in params if p.kind in positional), 3)
    except (TypeError, ValueError):  # builtins without a signature
        arity = 3
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        type(fn).__call__  # objects with an `async def __call__`
    )

    async def run(parsed: Any, emit: Emit, ctx: ToolContext) -> Any:
        args = (parsed, emit, ctx)[:arity]
        if is_async:
            return await fn(*args)
        result = await asyncio.to_thread(fn, *args)
        if inspect.isawaitable(result):
            return await result
        return result

    return run


_normalize_run = normalize_run  # the name other modules imported first


def _retry_policy(retry: RetryPolicy | int | None) -> RetryPolicy:
    if retry is None:
        return RetryPolicy()
    if isinstance(retry, int):
        return RetryPolicy(max_attempts=retry)
    return retry


def _annotations(annotations: ToolAnnotations | Mapping[str, Any] | None) -> ToolAnnotations:
    if annotations is None:
        return ToolAnnotations()
    if isinstance(annotations, ToolAnnotations):
        return annotations
    return ToolAnnotations.model_validate(dict(annotations))


def dynamic_tool(
    name: str,
    *,
    run: Callable[..., Any],
    parameters: Mapping[str, Any] | type | None = None,
    description: str = "",
    output: Mapping[str, Any] | Any | None = None,
    needs_approval: NeedsApproval = False,
    timeout: float | None = 60.0,
    heartbeat_timeout: float | None = None,
    retry: RetryPolicy | int | None = None,
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
    strict: bool = False,
    failure_mode: FailureMode = "return",
    approval_deadline: float | None = None,
) -> Tool:
    """Build a local tool whose schema is known only at run time.

    Args:
        name: Tool name (`^[a-zA-Z0-9_-]{1,64}$`).
        run: `run(input)`, `run(input, emit)` or `run(input, emit, ctx)`, sync
            or async. `input` is the validated dict (raw JSON Schema) or an
            instance of the pydantic parameters type.
        parameters: A JSON Schema dict (draft 2020-12; checked now with
            `check_schema`, preserved exactly in the descriptor, and used to
            validate every call's arguments with format checking on), a
            pydantic model/type, or `None` for no parameters.
        description: What the tool does, for the model.
        output: Optional success schema (JSON Schema dict or pydantic type):
            outputs are validated and encoded with it.
        needs_approval: See `NeedsApproval` (default False).
        timeout: Seconds per attempt (default 60; `None` = no limit).
        heartbeat_timeout: Seconds between progress events before an attempt
            fails (default `None`).
        retry: A `RetryPolicy`, or an int for `max_attempts` (default 3 attempts).
        annotations: `ToolAnnotations` or a dict of its fields (MCP defaults).
        strict: Ask providers for strict schema adherence; the schema must
            already satisfy OpenAI's strict-mode rules (never rewritten).
        failure_mode: See `FailureMode`.
        approval_deadline: Seconds a call may wait for a decision before it
            expires (`None`: the conversation's deadline, default 7 days).

    Returns:
        A `Tool` with `dynamic=True`.

    Raises:
        InvalidToolName: `name` is not a valid tool name.
        InvalidSchema: `parameters` or `output` is not a valid schema.
        StrictModeError: `strict=True` with a schema that breaks strict mode.
    """
    params = compile_schema(
        parameters if parameters is not None else dict(_EMPTY_PARAMETERS),
        what=f"parameters schema of tool {name!r}",
    )
    return Tool(
        name=name,
        description=description,
        parameters=params,
        strict=strict,
        annotations=_annotations(annotations),
        run=normalize_run(run),
        output=compile_schema(output, what=f"output schema of tool {name!r}")
        if output is not None
        else None,
        needs_approval=needs_approval,
        timeout=timeout,
        heartbeat_timeout=heartbeat_timeout,
        retry=_retry_policy(retry),
        failure_mode=failure_mode,
        approval_deadline=approval_deadline,
        dynamic=True,
    )


def _field_name(param: str, *, taken: Iterable[str]) -> str:
    """The model field for a parameter: its own name unless pydantic would refuse it.

    The parameter name stays the alias (what the model sends and sees), so a
    parameter called `copy`, `schema`, `model_config` or `_id` works too; the
    parsed input keeps attribute access by name for every other parameter.
    """
    # pydantic treats `_x` as private and protects the `model_validate*` and
    # `model_dump*` namespaces; BaseModel attributes cannot be shadowed.
    reserved = param.startswith(("_", "model_validate", "model_dump")) or hasattr(BaseModel, param)
    if not reserved:
        return param
    used = set(taken)
    base = f"arg_{param.lstrip('_')}"
    candidate, n = base, 1
    while candidate in used or hasattr(BaseModel, candidate):
        n += 1
        candidate = f"{base}{n}"
    return candidate


def _function_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    needs_approval: NeedsApproval,
    timeout: float | None,
    heartbeat_timeout: float | None,
    retry: RetryPolicy | int | None,
    annotations: ToolAnnotations | Mapping[str, Any] | None,
    strict: bool,
    failure_mode: FailureMode,
    approval_deadline: float | None,
    output: Any,
) -> Tool:
    tool_name = check_tool_name(name or fn.__name__)
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: p.description or "" for p in doc.params}
    try:
        hints = get_type_hints(fn, include_extras=True)
    except NameError as exc:
        raise ConfigurationError(
            f"@tool {tool_name!r}: cannot resolve a type hint ({exc}); define the types it "
            "uses at module level, before the function"
        ) from None
    signature = inspect.signature(fn)
    fields: dict[str, Any] = {}
    # How to fill each parameter: (its name, positional-only?, "ctx" | "emit" | field name).
    plan: list[tuple[str, bool, str]] = []
    for param in signature.parameters.values():
        hint = hints.get(param.name, param.annotation)
        positional_only = param.kind is param.POSITIONAL_ONLY
        if hint is ToolContext:
            plan.append((param.name, positional_only, "ctx"))
            continue
        if hint == Emit or (param.name == "emit" and hint is inspect.Parameter.empty):
            plan.append((param.name, positional_only, "emit"))
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(
                f"@tool {tool_name!r}: *args/**kwargs cannot be described to a model; "
                "declare each parameter, or use dynamic_tool with a JSON Schema"
            )
        if hint is inspect.Parameter.empty:
            raise ConfigurationError(
                f"@tool {tool_name!r}: parameter {param.name!r} needs a type hint "
                "(the hint becomes its JSON Schema)"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        internal = _field_name(param.name, taken=signature.parameters.keys() | fields.keys())
        fields[internal] = (
            hint,
            Field(default, alias=param.name, description=param_docs.get(param.name) or None),
        )
        plan.append((param.name, positional_only, internal))
    model_name = "".join(part.capitalize() for part in re.split(r"[_-]", tool_name)) + "Arguments"
    model: type[BaseModel] = create_model(
        model_name, __config__=ConfigDict(extra="forbid"), **fields
    )
    schema = compile_schema(model, what=f"parameters of tool {tool_name!r}")
    schema.json_schema.pop("title", None)
    text = description
    if text is None:
        text = "\n\n".join(s for s in (doc.short_description, doc.long_description) if s)

    if output is None and "return" in hints and hints["return"] not in (Any, type(None), None):
        output = hints["return"]
    out_schema = (
        compile_schema(output, what=f"output of tool {tool_name!r}") if output is not None else None
    )
    is_async = inspect.iscoroutinefunction(fn)

    async def run(parsed: Any, emit: Emit, ctx: ToolContext) -> Any:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for param_name, positional_only, source in plan:
            if source == "ctx":
                value = ctx
            elif source == "emit":
                value = emit
            else:
                value = getattr(parsed, source)
            if positional_only:
                args.append(value)
            else:
                kwargs[param_name] = value
        if is_async:
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))

    return Tool(
        name=tool_name,
        description=text,
        parameters=schema,
        strict=strict,
        annotations=_annotations(annotations),
        run=run,
        output=out_schema,
        needs_approval=needs_approval,
        timeout=timeout,
        heartbeat_timeout=heartbeat_timeout,
        retry=_retry_policy(retry),
        failure_mode=failure_mode,
        approval_deadline=approval_deadline,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    timeout: float | None = 60.0,
    heartbeat_timeout: float | None = None,
    retry: RetryPolicy | int | None = None,
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
    strict: bool = False,
    failure_mode: FailureMode = "return",
    approval_deadline: float | None = None,
    output: Any = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    timeout: float | None = 60.0,
    heartbeat_timeout: float | None = None,
    retry: RetryPolicy | int | None = None,
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
    strict: bool = False,
    failure_mode: FailureMode = "return",
    approval_deadline: float | None = None,
    output: Any = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a local tool from a typed sync or async function.

    The parameters schema comes from the signature (via pydantic; extra keys
    are rejected), the description and per-parameter descriptions from the
    Google-style docstring. A parameter annotated `ToolContext` receives the
    call's context and one annotated `Emit` (or named `emit`) the progress
    callback; neither is shown to the model. A return annotation becomes the
    success schema unless `output` is given. Sync functions run in a thread.

    Args:
        fn: The function (when used as `@tool` without parentheses).
        name: Tool name (default: the function name).
        description: Description (default: the docstring without its sections).
        needs_approval: See `NeedsApproval` (default False).
        timeout: Seconds per attempt (default 60; `None` = no limit).
        heartbeat_timeout: Seconds between progress events before an attempt
            fails (default `None`).
        retry: A `RetryPolicy`, or an int for `max_attempts` (default 3).
        annotations: `ToolAnnotations` or a dict of its fields (MCP defaults).
        strict: Ask providers for strict schema adherence.
        failure_mode: See `FailureMode` (default `"return"`).
        approval_deadline: Seconds a call may wait for a decision before it
            expires (`None`: the conversation's deadline, default 7 days).
        output: Success schema overriding the return annotation.

    Returns:
        A `Tool` (or a decorator producing one).

    Raises:
        InvalidToolName: The name is not a valid tool name.
        ConfigurationError: A parameter lacks a type hint or is `*args`/`**kwargs`.
        StrictModeError: `strict=True` and a parameter is optional.

    Example:
        ```python
        @tool(timeout=10, retry=5)
        async def get_weather(city: str, unit: Literal["C", "F"] = "C") -> Weather:
            '''Current weather for a city.

            Args:
                city: City name, e.g. "Paris".
                unit: Temperature unit.
            '''
        ```
    """  # noqa: D214 - the example's own docstring has an indented "Args:"

    def build(f: Callable[..., Any]) -> Tool:
        return _function_tool(
            f,
            name=name,
            description=description,
            needs_approval=needs_approval,
            timeout=timeout,
            heartbeat_timeout=heartbeat_timeout,
            retry=retry,
            annotations=annotations,
            strict=strict,
            failure_mode=failure_mode,
            approval_deadline=approval_deadline,
            output=output,
        )

    return build(fn) if fn is not None else build


def provider_tool(
    name: str,
    *,
    provider: str,
    config: Mapping[str, Any] | None = None,
    description: str = "",
    parameters: Mapping[str, Any] | type | None = None,
) -> ProviderTool:
    """Declare a tool the model provider executes.

    Args:
        name: Tool name as the provider knows it (e.g. `"web_search"`).
        provider: The provider (`"openai"`, `"anthropic"`, `"google"`).
        config: The provider-specific tool object, sent as it is.
        description: Description, for providers that take one.
        parameters: Parameters schema, if the provider needs one.

    Returns:
        A `ProviderTool`.
    """
    return ProviderTool(
        name=name,
        description=description,
        parameters=compile_schema(
            parameters if parameters is not None else dict(_EMPTY_PARAMETERS)
        ),
        provider=provider,
        config=dict(config or {}),
    )


def signal_tool(
    name: str,
    *,
    description: str = "",
    parameters: Mapping[str, Any] | type | None = None,
    handler: Callable[[Any], Any] | None = None,
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
) -> SignalTool:
    """Declare a tool the agent loop interprets (sleep, pause, hand off, finish…).

    Args:
        name: Tool name.
        description: What calling it means, for the model.
        parameters: Parameters schema (JSON Schema dict or pydantic type).
        handler: Deterministic function from the parsed input to a
            `durable_tools.signals.SignalAction`; see `SignalTool.handler`.
        annotations: Behaviour hints.

    Returns:
        A `SignalTool`.
    """
    return SignalTool(
        name=name,
        description=description,
        parameters=compile_schema(
            parameters if parameters is not None else dict(_EMPTY_PARAMETERS)
        ),
        handler=handler,
        annotations=_annotations(annotations),
    )


def interaction_tool(
    name: str,
    *,
    description: str = "",
    parameters: Mapping[str, Any] | type | None = None,
    answer: Mapping[str, Any] | Any | None = None,
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
) -> InteractionTool:
    """Declare a tool an outside actor (a person, another system) answers.

    Args:
        name: Tool name.
        description: What is being asked, for the model.
        parameters: Schema of the question's arguments.
        answer: Optional schema (JSON Schema dict or pydantic type) every
            answer must satisfy.
        annotations: Behaviour hints.

    Returns:
        An `InteractionTool`.
    """
    return InteractionTool(
        name=name,
        description=description,
        parameters=compile_schema(
            parameters if parameters is not None else dict(_EMPTY_PARAMETERS)
        ),
        answer=compile_schema(answer, what=f"answer schema of tool {name!r}")
        if answer is not None
        else None,
        annotations=_annotations(annotations),
    )
