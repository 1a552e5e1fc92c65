"""docs/context.md's Python blocks run as written (with a toolkit named `kit` given)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from durable_tools import Toolkit, tool
from durable_tools.context import ContextPolicy, ContextRequest, CustomStrategy
from durable_tools.transcript import AssistantMessage, UserMessage

DOC = Path(__file__).resolve().parents[2] / "docs" / "context.md"


@tool
async def ping() -> str:
    """Ping."""
    return "pong"


def test_the_blocks_run_and_the_custom_strategy_does_what_it_says() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {"kit": Toolkit(ping)}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    faq = namespace["app"].agents["faq"]
    (strategy,) = faq.context.strategies
    assert isinstance(strategy, CustomStrategy)
    items = (UserMessage(text="a"), AssistantMessage(text="b"), UserMessage(text="c"))
    request = ContextRequest(
        items=items,
        limit_tokens=None,
        count_tokens=len,
        overhead_tokens=0,
        options=strategy.options,
    )
    assert namespace["last_user_messages"](request) == [items[0], items[2]]
    assert isinstance(namespace["support"].context, ContextPolicy)
