"""`local=True`: a tool whose calls run as Temporal local activities, as declared.

What a declaration gives (idempotent, its own retries and timeout) and what
it refuses at construction, with a message that says how to fix it. The
durable loop's side is in tests/workflows/test_local_tools.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_tools import ToolContext, dynamic_tool, tool
from durable_tools.errors import ConfigurationError
from durable_tools.tools import DEFAULT_RETRY, MAX_LOCAL_TIMEOUT, RetryPolicy


async def _lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: City name.
    """
    return city


def test_a_local_tool_is_idempotent_and_keeps_its_retries_when_gated() -> None:
    lookup = tool(local=True, timeout=5, needs_approval=True)(_lookup)
    assert lookup.local and lookup.kind == "local"  # the kind of every tool with a run
    assert lookup.idempotent and not lookup.at_most_once
    # A person approves one run; a local activity may run again, so only a
    # tool that is safe to repeat may be local, and it keeps its retries.
    assert not lookup.at_most_once_for(gated=True)
    assert lookup.retry_policy_for(gated=True) == DEFAULT_RETRY
    assert not tool(_lookup).local  # the default: an ordinary activity


def test_dynamic_tools_take_local_too() -> None:
    def run(args: dict[str, Any]) -> str:
        return str(args)

    found = dynamic_tool("find", run=run, local=True, timeout=2, retry=4)
    assert found.local and found.idempotent
    assert found.retry_policy_for(gated=False) == RetryPolicy(max_attempts=4)


def test_local_with_at_most_once_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="local=True contradicts at_most_once=True"):
        tool(local=True, timeout=5, at_most_once=True)(_lookup)
    with pytest.raises(ConfigurationError, match="runs again when its worker is lost"):
        dynamic_tool("once", run=lambda: None, local=True, at_most_once=True)


def test_local_with_idempotent_false_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="local=True needs idempotent=True"):
        tool(local=True, timeout=5, idempotent=False)(_lookup)


def test_destructive_annotations_do_not_make_a_local_tool_at_most_once() -> None:
    """`local=True` is its author's word that repeating a call is harmless."""
    purge = tool(local=True, timeout=5, annotations={"destructive": True})(_lookup)
    assert purge.idempotent and not purge.at_most_once


@pytest.mark.parametrize("timeout", [None, MAX_LOCAL_TIMEOUT + 1, 3600.0])
def test_local_with_no_or_a_long_timeout_is_refused(timeout: float | None) -> None:
    with pytest.raises(ConfigurationError, match="timeout must be at most 60 s"):
        tool(local=True, timeout=timeout)(_lookup)


def test_the_default_timeout_and_the_limit_itself_are_accepted() -> None:
    assert tool(local=True)(_lookup).timeout == 60.0 == MAX_LOCAL_TIMEOUT

    @tool(local=True, timeout=MAX_LOCAL_TIMEOUT)
    def count(ctx: ToolContext) -> int:
        """Count."""
        return 1

    assert count.local
