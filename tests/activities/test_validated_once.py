"""A call's arguments are validated once: planning's validation serves its tool activity.

Issue 26, item 2 ("validation done once"): the model activity validates
each call's arguments when it plans the turn; the tool activity on the same
worker runs the first attempt with that validated input instead of parsing
and validating the arguments again. A retry validates again, so an input
the failed attempt changed is never handed to the next one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from durable_tools import RetryPolicy, ToolContext, Toolkit, tool
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call
from durable_tools.tools import _BaseTool  # pyright: ignore[reportPrivateUsage]

DECODES: Counter[str] = Counter()
SEEN: list[list[int]] = []


@tool(retry=RetryPolicy(max_attempts=2, initial_interval=0.05, maximum_interval=0.05))
async def tally(items: list[int], fail_first: bool, ctx: ToolContext) -> int:
    """Add up numbers; with `fail_first`, the first attempt spoils its input and raises.

    Args:
        items: The numbers.
        fail_first: Whether the first attempt fails.
    """
    SEEN.append(list(items))
    if fail_first and ctx.attempt == 1:
        items.append(1000)  # what a later attempt must not see
        raise RuntimeError("the first attempt fails")
    return sum(items)


@tool(needs_approval=lambda args, context: False)
async def gated_tally(items: list[int]) -> int:
    """Add up numbers (a `needs_approval` function sees the input first).

    Args:
        items: The numbers.
    """
    return sum(items)


KIT = Toolkit(tally, gated_tally)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    original = _BaseTool.decode

    def decode(self: _BaseTool, arguments: Any, **kwargs: Any) -> Any:
        DECODES[self.name] += 1
        return original(self, arguments, **kwargs)

    monkeypatch.setattr(_BaseTool, "decode", decode)
    DECODES.clear()
    SEEN.clear()
    yield DECODES


async def _outputs(model: ScriptedModel) -> dict[str, str]:
    async with AgentTestEnvironment.start(toolkit=KIT, model=model) as env:
        chat = await env.start_conversation("add these up")
        assert await env.wait_for_reply(chat) == "done"
        return {call_id: out.content for call_id, out in (await env.tool_outputs(chat)).items()}


async def test_a_planned_call_runs_on_the_input_planning_validated(
    counted: Counter[str],
) -> None:
    model = ScriptedModel([[call("c1", "tally", items=[1, 2, 3], fail_first=False)], "done"])
    outputs = await _outputs(model)
    assert outputs["c1"] == "6"
    assert counted["tally"] == 1  # planned: validated; run: not again


async def test_a_retry_validates_again_and_never_sees_what_an_attempt_changed(
    counted: Counter[str],
) -> None:
    model = ScriptedModel([[call("c1", "tally", items=[1, 2, 3], fail_first=True)], "done"])
    outputs = await _outputs(model)
    assert SEEN == [[1, 2, 3], [1, 2, 3]]
    assert outputs["c1"] == "6"
    assert counted["tally"] == 2  # planning's (used by attempt 1), then attempt 2's own


async def test_an_input_a_needs_approval_function_saw_is_validated_again(
    counted: Counter[str],
) -> None:
    model = ScriptedModel([[call("c1", "gated_tally", items=[4, 5])], "done"])
    outputs = await _outputs(model)
    assert outputs["c1"] == "9"
    assert counted["gated_tally"] == 2
