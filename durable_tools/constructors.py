"""Tool constructors: `@tool`, `dynamic_tool`, `provider_tool`, `signal_tool`, `interaction_tool`.

`@tool` derives a parameters schema from a typed function's signature and
its Google-style docstring; `dynamic_tool` takes a JSON Schema (validated with
jsonschema) or a pydantic type known only at run time, e.g. from MCP.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, get_origin, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, create_model

from durable_tools._local_options import LocalOptions, annotations_of, parameters_schema
from durable_tools.descriptor import ToolAnnotations
from durable_tools.errors import ConfigurationError
from durable_tools.schema import compile_schema
from durable_tools.tool_threads import run_sync
from durable_tools.tools import (
    DEFAULT_HEARTBEAT_TIMEOUT,
    Emit,
    FailureMode,
    InteractionTool,
    NeedsApproval,
    ProviderTool,
    RetryPolicy,
    SignalTool,
    Tool,
    ToolContext,
    ToolRun,
    check_tool_name,
)

__all__ = [
    "dynamic_tool",
    "interaction_tool",
    "normalize_run",
    "provider_tool",
    "signal_tool",
    "tool",
]


def normalize_run(fn: Callable[..., Any]) -> ToolRun:
    """Turn a run of any accepted shape into a `ToolRun`.

    Accepted shapes: `fn()`, `fn(input)`, `fn(input, emit)` and
    `fn(input, emit, ctx)`, sync or async; the number of positional parameters
    decides what is passed. Sync functions run in a thread (`run_sync`: the
    worker's bounded `ToolThreads`, else the default executor); an awaitable
    they return is awaited.

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
        result = await run_sync(fn, *args)
        if inspect.isawaitable(result):
            return await result
        return result

    return run


def dynamic_tool(
    name: str,
    *,
    run: Callable[..., Any],
    parameters: Mapping[str, Any] | type | None = None,
    description: str = "",
    output: Mapping[str, Any] | Any | None = None,
    needs_approval: NeedsApproval = False,
    timeout: float | None = 60.0,
    heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT,
    retry: RetryPolicy | int | None = None,
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
    strict: bool = False,
    failure_mode: FailureMode = "return",
    approval_deadline: float | None = None,
    approvers: Sequence[str] = (),
    idempotent: bool | None = None,
    at_most_once: bool = False,
    local: bool = False,
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
        heartbeat_timeout: Seconds without a heartbeat after which Temporal
            counts an attempt as lost (default 30). The tool activity
            heartbeats every third of it while the run works (and on every
            `emit`), so it bounds how late a lost worker is noticed and a
            cancellation reaches the run; see `Tool.heartbeat_timeout`.
            `None`: no heartbeats, so neither is noticed before `timeout`.
        retry: A `RetryPolicy`, or an int for `max_attempts`; wins over the
            defaults, which follow the effect (`None`): 3 attempts, but one
            for a call that needs approval or a destructive tool, unless it is
            idempotent (see `Tool.retry_policy_for`).
        annotations: `ToolAnnotations` or a dict of its fields (MCP defaults).
            Read-only or idempotent annotations make the tool idempotent;
            destructive ones (not read-only, `destructive` not false) make it
            at-most-once. Without annotations the tool declares neither.
        strict: Ask providers for strict schema adherence; the schema must
            already satisfy OpenAI's strict-mode rules (never rewritten).
        failure_mode: See `FailureMode`.
        approval_deadline: Seconds a call may wait for a decision before it
            expires (`None`: the conversation's deadline, default 7 days).
        approvers: Who may decide its calls: `group:NAME` or `user:ID`
            (default: anyone who can signal the conversation). With approvers
            only a signed decision counts (docs/approvals.md, "Trust model").
        idempotent: Repeating a call has no more effect (default: what the
            annotations say, else False); its calls are retried even when
            they need approval.
        at_most_once: Never run a call twice (default False): one attempt, and
            an unknown outcome becomes Failure `interrupted`.
        local: Run each call as a Temporal local activity (default False):
            in the worker running the workflow task, recorded as one marker
            event instead of an activity's 3 to 6, with the same timeout and
            retries but no heartbeats or activity events. For fast,
            idempotent, side-effect-free tools: it implies `idempotent=True`
            (a local activity runs again when its worker is lost) and needs
            `timeout` of at most `MAX_LOCAL_TIMEOUT` (60 s). See
            docs/tools.md, "Local activities".

    Returns:
        A `Tool` with `dynamic=True`.

    Raises:
        InvalidToolName: `name` is not a valid tool name.
        InvalidSchema: `parameters` or `output` is not a valid schema.
        StrictModeError: `strict=True` with a schema that breaks strict mode.
        ConfigurationError: `at_most_once=True` with `retry` of more than one
            attempt or with `idempotent=True`; `local=True` with
            `at_most_once=True`, `idempotent=False`, or a `timeout` of `None`
            or over 60 s.
    """
    params = parameters_schema(parameters, what=f"parameters schema of tool {name!r}")
    options = LocalOptions(
        needs_approval=needs_approval,
        timeout=timeout,
        heartbeat_timeout=heartbeat_timeout,
        retry=retry,
        annotations=annotations,
        strict=strict,
        failure_mode=failure_mode,
        approval_deadline=approval_deadline,
        approvers=approvers,
        idempotent=idempotent,
        at_most_once=at_most_once,
        local=local,
    )
    return options.tool(
        name=name,
        description=description,
        parameters=params,
        run=normalize_run(run),
        output=compile_schema(output, what=f"output schema of tool {name!r}")
        if output is not None
        else None,
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
    output: Any,
    options: LocalOptions,
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
        if hint is ToolContext or get_origin(hint) is ToolContext:
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
        return await run_sync(fn, *args, **kwargs)

    return options.tool(
        name=tool_name, description=text, parameters=schema, run=run, output=out_schema
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
    heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT,
    retry: RetryPolicy | int | None = None,
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
    strict: bool = False,
    failure_mode: FailureMode = "return",
    approval_deadline: float | None = None,
    approvers: Sequence[str] = (),
    output: Any = None,
    idempotent: bool | None = None,
    at_most_once: bool = False,
    local: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    timeout: float | None = 60.0,
    heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT,
    retry: RetryPolicy | int | None = None,
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
    strict: bool = False,
    failure_mode: FailureMode = "return",
    approval_deadline: float | None = None,
    approvers: Sequence[str] = (),
    output: Any = None,
    idempotent: bool | None = None,
    at_most_once: bool = False,
    local: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a local tool from a typed sync or async function.

    The parameters schema comes from the signature (via pydantic; extra keys
    are rejected), the description and per-parameter descriptions from the
    Google-style docstring. A parameter annotated `ToolContext` receives the
    call's context and one annotated `Emit` (or named `emit`) the progress
    callback; neither is shown to the model. A return annotation becomes the
    success schema unless `output` is given. Sync functions run in a thread
    of the worker's bounded pool (`durable_tools.tool_threads`); they stop
    on cancellation only by checking `ctx.cancelled`.

    Args:
        fn: The function (when used as `@tool` without parentheses).
        name: Tool name (default: the function name).
        description: Description (default: the docstring without its sections).
        needs_approval: See `NeedsApproval` (default False).
        timeout: Seconds per attempt (default 60; `None` = no limit).
        heartbeat_timeout: Seconds without a heartbeat after which Temporal
            counts an attempt as lost (default 30). The tool activity
            heartbeats every third of it while the run works (and on every
            `emit`), so it bounds how late a lost worker is noticed and a
            cancellation reaches the run; see `Tool.heartbeat_timeout`.
            `None`: no heartbeats, so neither is noticed before `timeout`.
        retry: A `RetryPolicy`, or an int for `max_attempts`; wins over the
            defaults, which follow the effect (`None`): 3 attempts, but one
            for a call that needs approval or a destructive tool, unless it is
            idempotent (see `Tool.retry_policy_for`).
        annotations: `ToolAnnotations` or a dict of its fields (MCP defaults).
            Read-only or idempotent annotations make the tool idempotent;
            destructive ones (not read-only, `destructive` not false) make it
            at-most-once. Without annotations the tool declares neither.
        strict: Ask providers for strict schema adherence.
        failure_mode: See `FailureMode` (default `"return"`).
        approval_deadline: Seconds a call may wait for a decision before it
            expires (`None`: the conversation's deadline, default 7 days).
        approvers: Who may decide its calls: `group:NAME` or `user:ID`
            (default: anyone who can signal the conversation). With approvers
            only a signed decision counts (docs/approvals.md, "Trust model").
        output: Success schema overriding the return annotation.
        idempotent: Repeating a call has no more effect (default: what the
            annotations say, else False); its calls are retried even when
            they need approval.
        at_most_once: Never run a call twice (default False): one attempt, and
            an unknown outcome becomes Failure `interrupted`.
        local: Run each call as a Temporal local activity (default False):
            in the worker running the workflow task, recorded as one marker
            event instead of an activity's 3 to 6, with the same timeout and
            retries but no heartbeats or activity events. For fast,
            idempotent, side-effect-free tools: it implies `idempotent=True`
            (a local activity runs again when its worker is lost) and needs
            `timeout` of at most `MAX_LOCAL_TIMEOUT` (60 s). See
            docs/tools.md, "Local activities".

    Returns:
        A `Tool` (or a decorator producing one).

    Raises:
        InvalidToolName: The name is not a valid tool name.
        ConfigurationError: A parameter lacks a type hint or is `*args`/`**kwargs`;
            or `at_most_once=True` with `retry` of more than one attempt or
            with `idempotent=True`; or `local=True` with `at_most_once=True`,
            `idempotent=False`, or a `timeout` of `None` or over 60 s.
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
    options = LocalOptions(
        needs_approval=needs_approval,
        timeout=timeout,
        heartbeat_timeout=heartbeat_timeout,
        retry=retry,
        annotations=annotations,
        strict=strict,
        failure_mode=failure_mode,
        approval_deadline=approval_deadline,
        approvers=tuple(approvers),
        idempotent=idempotent,
        at_most_once=at_most_once,
        local=local,
    )

    def build(f: Callable[..., Any]) -> Tool:
        return _function_tool(f, name=name, description=description, output=output, options=options)

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
        parameters=parameters_schema(parameters),
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
        parameters=parameters_schema(parameters),
        handler=handler,
        annotations=annotations_of(annotations),
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
        parameters=parameters_schema(parameters),
        answer=compile_schema(answer, what=f"answer schema of tool {name!r}")
        if answer is not None
        else None,
        annotations=annotations_of(annotations),
    )
