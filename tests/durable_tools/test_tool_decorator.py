"""The @tool constructor: schema and descriptions from a typed function."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from durable_tools import (
    ApprovalRequested,
    ConfigurationError,
    Emit,
    Failure,
    Ok,
    Output,
    Progress,
    StrictModeError,
    ToolAnnotations,
    ToolCall,
    ToolContext,
    ToolEvent,
    Toolkit,
    tool,
)


class Weather(BaseModel):
    city: str
    celsius: float


async def run_events(t: Any, arguments: str = "{}", call_id: str = "c1") -> list[ToolEvent]:
    kit = Toolkit(t)
    return [e async for e in kit.run([ToolCall(call_id=call_id, name=t.name, arguments=arguments)])]


def only_result(events: list[ToolEvent]) -> Ok | Failure:
    outputs = [e for e in events if isinstance(e, Output)]
    assert len(outputs) == 1
    return outputs[0].result


@tool(timeout=10, retry=5, annotations={"read_only": True})
async def get_weather(city: str, unit: Literal["C", "F"] = "C") -> Weather:
    """Current weather for a city.

    Uses a fixed table; good enough for a test.

    Args:
        city: City name, e.g. "Paris".
        unit: Temperature unit.
    """
    return Weather(city=city, celsius=21.5 if unit == "C" else -1)


def test_description_and_parameter_descriptions_come_from_the_docstring() -> None:
    d = get_weather.descriptor()
    assert d.name == "get_weather"
    assert (
        d.description
        == "Current weather for a city.\n\nUses a fixed table; good enough for a test."
    )
    props = d.parameters["properties"]
    assert props["city"]["description"] == 'City name, e.g. "Paris".'
    assert props["unit"]["description"] == "Temperature unit."
    assert props["unit"]["enum"] == ["C", "F"]
    assert props["unit"]["default"] == "C"
    assert d.parameters["required"] == ["city"]
    assert d.parameters["additionalProperties"] is False
    assert "title" not in d.parameters


def test_options_are_applied() -> None:
    assert get_weather.timeout == 10
    assert get_weather.retry.max_attempts == 5
    assert get_weather.annotations == ToolAnnotations(read_only=True)
    assert get_weather.kind == "local"
    assert not get_weather.dynamic


def test_name_and_description_can_be_overridden() -> None:
    @tool(name="lookup", description="Look it up.")
    def f(key: str) -> str:
        """Ignored."""
        return key

    assert f.name == "lookup"
    assert f.descriptor().description == "Look it up."


def test_return_annotation_is_the_success_schema() -> None:
    assert get_weather.output is not None
    assert get_weather.output.python_type is Weather


async def test_return_value_is_encoded_with_the_success_schema() -> None:
    result = only_result(await run_events(get_weather, '{"city": "Oslo"}'))
    assert result == Ok(call_id="c1", tool="get_weather", value={"city": "Oslo", "celsius": 21.5})


async def test_a_return_value_breaking_the_return_annotation_is_a_failure() -> None:
    @tool
    def count() -> int:
        """Count."""
        return "many"  # type: ignore[return-value]

    result = only_result(await run_events(count))
    assert isinstance(result, Failure)
    assert result.kind == "output_validation_error"


def test_output_overrides_the_return_annotation() -> None:
    @tool(output=dict[str, int])
    def f() -> Any:
        """F."""
        return {}

    assert f.output is not None
    assert f.output.json_schema["type"] == "object"


def test_no_return_annotation_means_no_success_schema() -> None:
    @tool
    def f(x: int):  # deliberately unannotated
        """F.

        Args:
            x: X.
        """
        return x

    @tool
    def g(x: int) -> None:
        """G.

        Args:
            x: X.
        """

    assert f.output is None
    assert g.output is None


async def test_arguments_are_validated_and_extra_keys_rejected() -> None:
    bad_type = only_result(await run_events(get_weather, '{"city": 3}'))
    assert isinstance(bad_type, Failure) and bad_type.kind == "input_validation_error"
    assert "$.city" in bad_type.reason
    extra = only_result(await run_events(get_weather, '{"city": "Oslo", "country": "NO"}'))
    assert isinstance(extra, Failure) and extra.kind == "input_validation_error"
    assert "$.country" in extra.reason
    missing = only_result(await run_events(get_weather, "{}"))
    assert isinstance(missing, Failure) and "$.city: Field required" in missing.reason
    bad_enum = only_result(await run_events(get_weather, '{"city": "Oslo", "unit": "K"}'))
    assert isinstance(bad_enum, Failure) and "$.unit" in bad_enum.reason


async def test_context_and_emit_are_injected_and_not_in_the_schema() -> None:
    seen: list[ToolContext] = []

    @tool
    async def work(ctx: ToolContext, steps: int, emit: Emit) -> str:
        """Work in steps.

        Args:
            steps: How many.
        """
        seen.append(ctx)
        for i in range(steps):
            emit({"step": i})
        return "done"

    schema = work.descriptor().parameters
    assert set(schema["properties"]) == {"steps"}
    assert schema["required"] == ["steps"]
    events = await run_events(work, '{"steps": 2}', call_id="call_7")
    assert events == [
        Progress("call_7", "work", {"step": 0}),
        Progress("call_7", "work", {"step": 1}),
        Output(Ok(call_id="call_7", tool="work", value="done")),
    ]
    assert seen == [ToolContext(call_id="call_7", tool="work", idempotency_key="call_7")]


def test_an_unannotated_parameter_named_emit_is_the_progress_callback() -> None:
    @tool
    def f(x: int, emit) -> int:  # deliberately unannotated
        """F.

        Args:
            x: X.
        """
        return x

    assert set(f.descriptor().parameters["properties"]) == {"x"}


async def test_sync_functions_run_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []

    @tool
    def blocking(n: int, emit: Emit) -> int:
        """Block.

        Args:
            n: A number.
        """
        threads.append(threading.get_ident())
        emit("from a thread")
        return n * 2

    events = await run_events(blocking, '{"n": 21}')
    assert events == [
        Progress("c1", "blocking", "from a thread"),
        Output(Ok(call_id="c1", tool="blocking", value=42)),
    ]
    assert threads and threads[0] != loop_thread


async def test_parameters_named_like_basemodel_attributes_work() -> None:
    @tool
    def store(
        copy: str, schema: int, _id: int = 0, model_config: bool = False, model_dump_x: int = 1
    ) -> dict[str, Any]:
        """Store.

        Args:
            copy: Text.
            schema: Version.
            _id: An id.
            model_config: A flag.
            model_dump_x: A number.
        """
        return {"copy": copy, "schema": schema, "_id": _id, "model_config": model_config}

    props = store.descriptor().parameters["properties"]
    assert list(props) == ["copy", "schema", "_id", "model_config", "model_dump_x"]
    assert props["_id"]["description"] == "An id."
    result = only_result(await run_events(store, '{"copy": "x", "schema": 2, "_id": 7}'))
    assert result == Ok(
        call_id="c1",
        tool="store",
        value={"copy": "x", "schema": 2, "_id": 7, "model_config": False},
    )


async def test_needs_approval_reads_parameters_by_name() -> None:
    @tool(needs_approval=lambda args, ctx: args.amount > 100)
    def pay(amount: int, model_name: str = "x") -> str:
        """Pay.

        Args:
            amount: Cents.
            model_name: A name.
        """
        return "paid"

    small = only_result(await run_events(pay, '{"amount": 5}'))
    assert small == Ok(call_id="c1", tool="pay", value="paid")
    big = await run_events(pay, '{"amount": 500}')
    assert len(big) == 1 and isinstance(big[0], ApprovalRequested)


async def test_positional_only_parameters_work() -> None:
    @tool
    def add(a: int, b: int, /) -> int:
        """Add.

        Args:
            a: A.
            b: B.
        """
        return a + b

    assert only_result(await run_events(add, '{"a": 1, "b": 2}')) == Ok(
        call_id="c1", tool="add", value=3
    )


def test_a_parameter_without_a_type_hint_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="parameter 'x' needs a type hint"):

        @tool
        def f(x) -> None:  # deliberately unannotated
            """F."""


def test_varargs_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"\*args/\*\*kwargs"):

        @tool
        def f(*names: str) -> None:
            """F."""

    with pytest.raises(ConfigurationError, match=r"\*args/\*\*kwargs"):

        @tool
        def g(**options: str) -> None:
            """G."""


def test_unresolvable_type_hints_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="cannot resolve a type hint"):

        @tool
        def f(x: NotDefinedAnywhere) -> None:  # noqa: F821
            """F."""


def test_strict_tool_with_an_optional_parameter_is_rejected() -> None:
    with pytest.raises(StrictModeError, match=r"\$\.properties\.unit: not listed in 'required'"):

        @tool(strict=True)
        def f(city: str, unit: str = "C") -> str:
            """F."""
            return city


def test_strict_tool_with_required_parameters_is_accepted() -> None:
    @tool(strict=True)
    def f(city: str, unit: str | None) -> str:
        """F."""
        return city

    assert f.descriptor().strict is True


async def test_async_tool_runs_on_the_event_loop() -> None:
    loop = asyncio.get_running_loop()
    loops: list[asyncio.AbstractEventLoop] = []

    @tool
    async def here() -> str:
        """Here."""
        loops.append(asyncio.get_running_loop())
        return "ok"

    assert only_result(await run_events(here)) == Ok(call_id="c1", tool="here", value="ok")
    assert loops == [loop]
