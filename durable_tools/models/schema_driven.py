"""A model that exercises a toolkit from its schemas alone (spec `test`).

After each user message, `SchemaDrivenModel` first calls every tool it is
offered once, with arguments generated from the tool's JSON Schema; on its
next turn it answers with a short summary of the results, one line per call
(`ok`, or `failed` with the failure kind and reason). It needs no provider,
so a toolkit can be smoke-tested end to end (`AgentConfig(model="test")`).

Which tools it calls (by `ToolDescriptor.kind`):

* `local` (typed, JSON-Schema and MCP tools): called.
* `signal` (`finish`, `pause`, `sleep`, `handoff`...): skipped, they steer the
  conversation loop rather than do work.
* `provider`: skipped, the provider runs them, not this model.
* `interaction`: skipped by default, because a person has to answer each
  call; `SchemaDrivenModel(include_interactions=True)` calls them too.

Tools that need approval are called like the others and wait for a decision.

Arguments come from `hypothesis-jsonschema` (`from_schema`), drawing the
simplest value Hypothesis generates first, with a fixed seed: the same schema
always gives the same arguments, on every worker and every retry of the model
activity. Generated arguments are checked with `jsonschema` (the schema's
`$schema` dialect, else draft 2020-12; formats checked); when generation
fails (e.g. recursive `$ref`, unsupported keywords) or the result does not
validate, the tool is called with `{}` and its own validation produces the
failure the summary reports.

Hypothesis and hypothesis-jsonschema are the optional `test-model` extra
(`pip install 'durable-tools[test-model]'`); without them, building a
`SchemaDrivenModel` raises `MissingExtra`. hypothesis-jsonschema 0.23.1 drives
Hypothesis's private `many.more()` protocol, which Hypothesis 6.170.9 replaced
with a context manager; `_legacy_many` adapts the new one for that module only,
so no Hypothesis version is pinned for users.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import uuid
import warnings
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import MissingExtra
from durable_tools.models.base import ModelRequest
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage

__all__ = ["SchemaDrivenModel", "example_arguments"]

_MAX_REASON_CHARS = 120


def example_arguments(parameters: dict[str, Any]) -> dict[str, Any] | None:
    """Generate one arguments object that satisfies a tool's parameters schema.

    Args:
        parameters: The JSON Schema (draft 2020-12) of the arguments object.

    Returns:
        An object valid against `parameters` (formats included), the same
        for the same schema on every call and in every process; `None` when
        none could be generated or the generated one does not validate.
    """
    text = _cached_example(json.dumps(parameters, sort_keys=True))
    return None if text is None else json.loads(text)


@lru_cache(maxsize=512)
def _cached_example(schema_json: str) -> str | None:
    schema: dict[str, Any] = json.loads(schema_json)
    try:
        with warnings.catch_warnings():
            # Unsupported patterns or keywords only warn; the validation below
            # decides whether the example is usable.
            warnings.simplefilter("ignore")
            value = _generate(schema)
    except Exception:  # any generation failure means "call with {}"
        return None
    if not isinstance(value, dict):
        return None
    # The schema's own dialect (MCP servers often send draft-07), else 2020-12.
    dialect: Any = validator_for(schema, default=Draft202012Validator)
    if not dialect(schema, format_checker=dialect.FORMAT_CHECKER).is_valid(value):
        return None
    return json.dumps(value)


def _generate(schema: dict[str, Any]) -> Any:
    # Imported here, not at module level: importing Hypothesis's strategies
    # reads (and may write) its on-disk Unicode cache, a side effect a worker
    # or a test session should pay only when this model is used.
    from collections.abc import Callable
    from typing import cast

    import hypothesis_jsonschema
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis import strategies as st

    _legacy_many()

    # One example, the simplest Hypothesis tries first, with a fixed seed and
    # no example database on disk: deterministic, about 10-100 ms a schema.
    fixed = settings(
        database=None,
        derandomize=True,
        max_examples=1,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=cast(list[HealthCheck], list(HealthCheck)),
    )
    # Formats hypothesis-jsonschema does not know but pydantic emits (UUID,
    # timedelta); without these it would draw text that fails `format`.
    formats: dict[str, st.SearchStrategy[str]] = {
        "uuid": st.just(str(uuid.UUID(int=0))),
        "duration": st.just("PT0S"),
    }
    # Its JSON type alias leaves list items unknown to a strict type checker.
    from_schema = cast(
        Callable[..., st.SearchStrategy[Any]],
        hypothesis_jsonschema.from_schema,  # pyright: ignore[reportUnknownMemberType]
    )
    strategy = from_schema(schema, custom_formats=formats, allow_x00=False, codec="utf-8")
    return find(strategy, lambda _: True, settings=fixed)


def _legacy_many() -> None:
    """Give hypothesis-jsonschema the `many.more()` loop it was written for.

    Hypothesis 6.170.9 turned `hypothesis.internal.conjecture.utils.many`
    into a context manager iterated with `for _ in elements`; the 0.23.1
    release of hypothesis-jsonschema still calls `elements.more()`. Only that
    module's reference is swapped, to a subclass that drives the new protocol
    one element per `more()` call; Hypothesis itself is left alone.
    """
    from types import SimpleNamespace

    from hypothesis.internal.conjecture import utils as conjecture_utils

    from_schema_module: Any = importlib.import_module("hypothesis_jsonschema._from_schema")
    many: Any = conjecture_utils.many
    if hasattr(many, "more") or hasattr(from_schema_module.cu, "_durable_tools_legacy"):
        return

    class LegacyMany(many):
        def more(self) -> bool:
            steps: Iterator[None] | None = getattr(self, "_legacy_steps", None)
            if steps is None:
                self.__enter__()
                steps = iter(self)
                self._legacy_steps = steps
            if next(steps, False) is None:
                return True
            self.__exit__(None)
            return False

    names: dict[str, Any] = dict(vars(conjecture_utils))
    names.update(many=LegacyMany, _durable_tools_legacy=True)
    from_schema_module.cu = SimpleNamespace(**names)


class SchemaDrivenModel:
    """Calls every tool once from its schema, then summarizes the results.

    See the module docstring for which tools are called and how arguments
    are generated.

    Args:
        include_interactions: Also call `interaction` tools (each waits for a
            person's answer); default False.

    Raises:
        MissingExtra: Hypothesis or hypothesis-jsonschema is not installed
            (the `test-model` extra).

    Example:
        ```python
        agent = AgentConfig(model="test", toolkit="support")
        # or, registered under a name of your own:
        models = {"smoke": SchemaDrivenModel()}
        ```
    """

    def __init__(self, *, include_interactions: bool = False) -> None:
        if not all(importlib.util.find_spec(m) for m in ("hypothesis", "hypothesis_jsonschema")):
            raise MissingExtra("the `test` model (SchemaDrivenModel)", "test-model")
        self.include_interactions = include_interactions

    def callable_tools(self, tools: list[ToolDescriptor]) -> list[ToolDescriptor]:
        """The descriptors this model calls, in the order given.

        Args:
            tools: The descriptors of a model request.

        Returns:
            The `local` tools, plus `interaction` tools when
            `include_interactions` is set.
        """
        kinds = {"local", "interaction"} if self.include_interactions else {"local"}
        return [t for t in tools if t.kind in kinds]

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        """Call the tools (first turn after a user message) or summarize them (next turn)."""
        since_user = _since_last_user_message(request)
        calling_turn = next(
            (i for i in reversed(since_user) if isinstance(i, AssistantMessage) and i.tool_calls),
            None,
        )
        if calling_turn is None:
            return self._call_all(request)
        outputs = {i.call_id: i for i in since_user if isinstance(i, ToolCallOutput)}
        return AssistantMessage(text=_summary(calling_turn, outputs), stop_reason="end_turn")

    def _call_all(self, request: ModelRequest) -> AssistantMessage:
        tools = self.callable_tools(request.tools)
        if not tools:
            return AssistantMessage(text="There are no tools to call.", stop_reason="end_turn")
        calls = tuple(
            ToolCall(
                call_id=f"t{request.turn}c{n}",
                name=tool.name,
                arguments=json.dumps(example_arguments(tool.parameters) or {}),
            )
            for n, tool in enumerate(tools, start=1)
        )
        return AssistantMessage(
            text=f"Calling {len(calls)} tool{'s' if len(calls) != 1 else ''}.",
            tool_calls=calls,
            stop_reason="tool_calls",
        )


def _since_last_user_message(request: ModelRequest) -> list[Any]:
    items = request.transcript
    start = next(
        (i + 1 for i in range(len(items) - 1, -1, -1) if isinstance(items[i], UserMessage)), 0
    )
    return list(items[start:])


def _summary(turn: AssistantMessage, outputs: dict[str, ToolCallOutput]) -> str:
    lines: list[str] = []
    failed = 0
    for call in turn.tool_calls:
        output = outputs.get(call.call_id)
        if output is None:
            failed += 1
            lines.append(f"- {call.name}: no result")
        elif output.is_error:
            failed += 1
            lines.append(f"- {call.name}: failed ({_failure(output)})")
        else:
            lines.append(f"- {call.name}: ok")
    total = len(turn.tool_calls)
    head = f"Called {total} tool{'s' if total != 1 else ''}: {total - failed} ok, {failed} failed."
    return "\n".join([head, *lines])


def _failure(output: ToolCallOutput) -> str:
    kind = output.failure_kind or "error"
    try:
        reason = str(json.loads(output.content).get("reason", ""))
    except (ValueError, AttributeError):
        reason = output.content
    reason = " ".join(reason.split())
    if len(reason) > _MAX_REASON_CHARS:
        reason = reason[: _MAX_REASON_CHARS - 1] + "…"
    return f"{kind}: {reason}" if reason else kind
