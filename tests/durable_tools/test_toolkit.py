"""Toolkit operations: construction, from_list, compose, namespace, wrap, with_run, names."""

from __future__ import annotations

from typing import Any

import pytest

from durable_tools import (
    DuplicateToolName,
    Emit,
    InvalidToolName,
    Ok,
    Output,
    Tool,
    ToolCall,
    ToolContext,
    Toolkit,
    ToolNotFound,
    ToolRun,
    compose,
    dynamic_tool,
    finish_tool,
    interaction_tool,
    provider_tool,
    signal_tool,
    sleep_tool,
)


def const(name: str, value: Any = None, **kwargs: Any) -> Tool:
    return dynamic_tool(name, run=lambda: value if value is not None else name, **kwargs)


async def results(kit: Toolkit, *names: str) -> dict[str, Any]:
    calls = [ToolCall(call_id=f"c{i}", name=n) for i, n in enumerate(names)]
    out: dict[str, Any] = {}
    async for event in kit.run(calls):
        if isinstance(event, Output):
            assert isinstance(event.result, Ok), event.result
            out[event.result.tool] = event.result.value
    return out


# construction -----------------------------------------------------------------------


def test_tools_keep_their_order_and_are_looked_up_by_name() -> None:
    a, b, c = const("a"), const("b"), sleep_tool()
    kit = Toolkit(a, b, c, label="app")
    assert [t.name for t in kit] == ["a", "b", "sleep"]
    assert len(kit) == 3
    assert "b" in kit and "zz" not in kit
    assert kit.get("b") is b
    assert kit.tools["sleep"] is c
    assert [d.name for d in kit.descriptors()] == ["a", "b", "sleep"]
    assert kit.source("a") == "app"


def test_get_of_a_missing_tool_raises_tool_not_found() -> None:
    kit = Toolkit(const("a"), label="app")
    with pytest.raises(ToolNotFound, match="no tool named 'nope' in toolkit 'app'"):
        kit.get("nope")
    with pytest.raises(KeyError):  # ToolNotFound is also a KeyError
        kit.get("nope")


def test_duplicate_names_are_rejected_at_construction() -> None:
    with pytest.raises(DuplicateToolName) as info:
        Toolkit(const("a"), const("b"), const("a", 2), label="app")
    assert info.value.name == "a"
    assert info.value.sources == ("app", "app")
    assert "namespace" in str(info.value)


def test_duplicates_across_kinds_are_rejected_too() -> None:
    with pytest.raises(DuplicateToolName):
        Toolkit(const("finish"), finish_tool())


async def test_from_list_keeps_the_last_tool_of_a_name() -> None:
    kit = Toolkit.from_list([const("a", "first"), const("b"), const("a", "second")], label="mcp")
    assert len(kit) == 2
    assert kit.label == "mcp"
    assert await results(kit, "a", "b") == {"a": "second", "b": "b"}


# compose ----------------------------------------------------------------------------


async def test_compose_combines_toolkits_in_order() -> None:
    kit = compose(Toolkit(const("a"), label="one"), Toolkit(const("b"), label="two"))
    assert [t.name for t in kit] == ["a", "b"]
    assert kit.source("a") == "one"
    assert kit.source("b") == "two"
    assert await results(kit, "a", "b") == {"a": "a", "b": "b"}


def test_compose_collision_names_the_tool_and_both_toolkits() -> None:
    github = Toolkit(const("search"), label="github")
    jira = Toolkit(const("create"), const("search"), label="jira")
    with pytest.raises(DuplicateToolName) as info:
        compose(github, jira)
    assert info.value.name == "search"
    assert info.value.sources == ("github", "jira")
    message = str(info.value)
    assert "'search'" in message and "'github'" in message and "'jira'" in message
    assert "github__search" not in message  # the hint is generic: prefix__search
    assert "prefix__search" in message


def test_compose_keeps_original_sources_through_nesting() -> None:
    inner = compose(Toolkit(const("a"), label="one"), Toolkit(const("b"), label="two"))
    with pytest.raises(DuplicateToolName) as info:
        compose(inner, Toolkit(const("b"), label="three"))
    assert info.value.sources == ("two", "three")


def test_namespacing_resolves_a_collision() -> None:
    github = Toolkit(const("search"), label="github")
    jira = Toolkit(const("search"), label="jira")
    kit = compose(github.namespace("github"), jira.namespace("jira"))
    assert [t.name for t in kit] == ["github__search", "jira__search"]


# namespace --------------------------------------------------------------------------


async def test_namespace_prefixes_every_tool_and_keeps_everything_else() -> None:
    kit = Toolkit(const("a", "A", description="does a"), sleep_tool(), label="src")
    spaced = kit.namespace("ns")
    assert [t.name for t in spaced] == ["ns__a", "ns__sleep"]
    assert spaced.label == "ns"
    assert spaced.source("ns__a") == "src"
    before, after = kit.descriptors(), spaced.descriptors()
    for old, new in zip(before, after, strict=True):
        assert new.model_dump(exclude={"name"}) == old.model_dump(exclude={"name"})
    assert await results(spaced, "ns__a") == {"ns__a": "A"}
    assert [t.name for t in kit] == ["a", "sleep"]  # the original is untouched


def test_namespace_that_makes_a_name_too_long_is_rejected() -> None:
    kit = Toolkit(const("x" * 60))
    with pytest.raises(InvalidToolName):
        kit.namespace("long")


def test_namespace_with_an_invalid_prefix_is_rejected() -> None:
    with pytest.raises(InvalidToolName):
        Toolkit(const("a")).namespace("has space")


# wrap -------------------------------------------------------------------------------


async def test_wrap_wraps_local_runs_only_and_keeps_descriptors() -> None:
    seen: list[str] = []

    def logging(t: Tool, run: ToolRun) -> ToolRun:
        async def wrapped(parsed: Any, emit: Emit, ctx: ToolContext) -> Any:
            seen.append(f"before {t.name} {ctx.call_id}")
            value = await run(parsed, emit, ctx)
            return f"<{value}>"

        return wrapped

    kit = Toolkit(
        const("a"),
        const("b"),
        sleep_tool(),
        provider_tool("web_search", provider="openai", config={"type": "web_search"}),
        interaction_tool("ask"),
    )
    wrapped = kit.wrap(logging)
    assert wrapped.descriptors() == kit.descriptors()
    for name in ("sleep", "web_search", "ask"):
        assert wrapped.get(name) is kit.get(name)
    assert await results(wrapped, "a", "b") == {"a": "<a>", "b": "<b>"}
    assert sorted(seen) == ["before a c0", "before b c1"]
    assert await results(kit, "a") == {"a": "a"}  # the original is untouched


async def test_wrap_composes_in_order() -> None:
    def tag(label: str) -> Any:
        def middleware(t: Tool, run: ToolRun) -> ToolRun:
            async def wrapped(parsed: Any, emit: Emit, ctx: ToolContext) -> Any:
                return f"{label}({await run(parsed, emit, ctx)})"

            return wrapped

        return middleware

    kit = Toolkit(const("a")).wrap(tag("inner")).wrap(tag("outer"))
    assert await results(kit, "a") == {"a": "outer(inner(a))"}


# with_run ---------------------------------------------------------------------------


async def test_with_run_swaps_one_run_and_keeps_the_descriptor() -> None:
    kit = Toolkit(
        dynamic_tool(
            "weather",
            description="Weather for a city.",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            run=lambda p: "real",
        ),
        const("other"),
    )
    fake = kit.with_run("weather", lambda p: f"fake weather for {p['city']}")
    assert fake.descriptors() == kit.descriptors()
    assert fake.get("other") is kit.get("other")
    call = ToolCall(call_id="c1", name="weather", arguments='{"city": "Oslo"}')
    outputs = [e async for e in fake.run([call])]
    assert outputs == [
        Output(Ok(call_id="c1", tool="weather", value="fake weather for Oslo")),
    ]


def test_with_run_on_a_missing_or_non_local_tool_raises() -> None:
    kit = Toolkit(const("a"), sleep_tool())
    with pytest.raises(ToolNotFound):
        kit.with_run("missing", lambda: 1)
    with pytest.raises(ToolNotFound, match="signal tool"):
        kit.with_run("sleep", lambda: 1)


# names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["a", "get_weather", "get-weather", "A1", "x" * 64, "_", "-", "UPPER_case-9"]
)
def test_valid_names(name: str) -> None:
    assert const(name).name == name


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("", "'tool'"),
        ("get weather", "'get_weather'"),
        ("get.weather", "'get_weather'"),
        ("x" * 65, repr("x" * 64)),
        ("abc\n", "'abc_'"),
        ("ümlaut", "'_mlaut'"),
        ("a/b", "'a_b'"),
    ],
)
def test_invalid_names_say_how_to_fix_them(name: str, suggestion: str) -> None:
    with pytest.raises(InvalidToolName) as info:
        const(name)
    message = str(info.value)
    assert "^[a-zA-Z0-9_-]{1,64}$" in message
    assert "1-64 letters, digits, '_' or '-'" in message
    assert f"e.g. {suggestion}" in message


@pytest.mark.parametrize(
    "build",
    [
        lambda: sleep_tool("bad name"),
        lambda: signal_tool("bad name"),
        lambda: interaction_tool("bad name"),
        lambda: provider_tool("bad name", provider="openai"),
    ],
)
def test_every_kind_checks_its_name(build: Any) -> None:
    with pytest.raises(InvalidToolName):
        build()


def test_renamed_checks_the_new_name() -> None:
    assert const("a").renamed("b").name == "b"
    with pytest.raises(InvalidToolName):
        const("a").renamed("b c")
