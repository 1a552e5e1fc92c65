"""The facts a policy rule sees when a turn's calls are planned, and which policies apply."""

from __future__ import annotations

import json
from typing import Any

from durable_tools import Toolkit, tool
from durable_tools._wire import ModelTurnRequest
from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.activities.call_policies import CallPolicies
from durable_tools.activities.planning import plan_calls
from durable_tools.agents import ResolvedAgent
from durable_tools.descriptor import ToolAnnotations
from durable_tools.mcp import McpServerConfig
from durable_tools.policies import Policy, Rule
from durable_tools.results import ToolCall
from durable_tools.transcript import AssistantMessage, ToolCallOutput, UserMessage


@tool(annotations=ToolAnnotations(read_only=True, destructive=False))
async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return key


KIT = Toolkit(lookup, label="kit")

ECHO = Policy(
    "echo",
    [Rule(id="all", when="true", outcome="approve", groups=("g",))],
)


def _call(call_id: str, key: str = "k") -> ToolCall:
    return ToolCall(call_id=call_id, name="lookup", arguments=json.dumps({"key": key}))


def _facts(transcript: list[Any], trusted: bool = True) -> list[Any]:
    """What each rule saw of the calls `n1` and `n2`, planned after `transcript`."""
    seen: list[Any] = []

    class Spy(Policy):
        def decide(self, facts: Any, *, tool_approvers: Any = ()) -> Any:
            seen.append(facts)
            return super().decide(facts, tool_approvers=tool_approvers)

    spy = Spy("spy", [Rule(id="all", when="true", outcome="run")])
    policies = CallPolicies(lambda _: [spy], transcript, {"team": "t", "agent": "a"},
                            lambda _: trusted)  # fmt: skip
    plan_calls(KIT, [_call("n1"), _call("n2")], transcript, policies=policies)
    return seen


def test_history_caller_and_annotations() -> None:
    earlier = [
        UserMessage(text="hi", sent_by="ana"),
        AssistantMessage(tool_calls=(_call("o1"), _call("o2"))),
        ToolCallOutput(call_id="o1", tool="lookup", content="k"),
        ToolCallOutput(call_id="o2", tool="lookup", content="no", is_error=True),
        UserMessage(text="again", sent_by="bob"),
    ]
    first, second = _facts(earlier)
    assert first.conversation == {"team": "t", "agent": "a", "caller": "bob"}
    assert (first.history["tool_calls"], first.history["tool_ran"]) == (2, 1)
    assert second.history["tool_calls"] == 3  # the turn's first call counts
    assert first.history["calls"] == {"lookup": 2} and first.history["ran"] == {"lookup": 1}
    assert first.annotations["read_only"] is True and "title" not in first.annotations
    assert first.args == {"key": "k"}
    [untrusted, _] = _facts([], trusted=False)
    assert untrusted.annotations == {}
    assert untrusted.conversation["caller"] == ""


def test_a_policy_gates_denies_or_runs_in_the_plan() -> None:
    deny = Policy("d", [Rule(id="no", when="true", outcome="deny", reason="never")])
    [plan] = plan_calls(KIT, [_call("c1")], [], policies=CallPolicies(lambda _: [deny], [], {}))
    assert plan.failure is not None and plan.failure.kind == "denied"
    assert plan.failure.reason == "denied by policy 'd' (rule no): never; the tool did not run"
    assert plan.policy is not None and plan.policy.rule == "no"
    [plan] = plan_calls(KIT, [_call("c1")], [], policies=CallPolicies(lambda _: [ECHO], [], {}))
    assert plan.needs_approval and plan.approvers == ["group:g"]
    [plan] = plan_calls(KIT, [_call("c1")], [], policies=CallPolicies(lambda _: [], [], {}))
    assert not plan.needs_approval and plan.policy is None


class _Servers:
    """What the model activity asks of the worker's MCP servers."""

    version = 0

    def __init__(self, servers: dict[str, McpServerConfig]) -> None:
        self.servers = servers

    def server_of(self, tool: str) -> McpServerConfig | None:
        return self.servers.get(tool)


def test_the_agents_then_the_toolkits_then_the_mcp_servers_policies_apply() -> None:
    agent_policy = Policy("agent", [Rule(id="a", when='tool == "x"', outcome="run")])
    kit_policy = Policy("kit", [Rule(id="k", when='tool == "y"', outcome="run")])
    files_policy = Policy("files", [Rule(id="f", when="true", outcome="deny")])
    files = McpServerConfig(name="files", command="true")
    activities = AgentActivities(
        {"kit": KIT}, {}, policies={"kit": kit_policy, "mcp:files": files_policy}
    )
    activities.mcp = _Servers({"files__write": files})  # type: ignore[assignment]
    agent = ResolvedAgent(
        name="main", model="m", toolkit="kit", instructions="", settings={}, policy=agent_policy
    )
    request = ModelTurnRequest(workflow_id="w", run_id="r", turn=1, upto=0, team="ops")
    policies = activities._call_policies(agent, request, [])  # pyright: ignore[reportPrivateUsage]
    assert policies is not None
    applied = policies._policies_for  # pyright: ignore[reportPrivateUsage]
    assert [p.name for p in applied("lookup")] == ["agent", "kit"]
    assert [p.name for p in applied("files__write")] == ["agent", "kit", "files"]
    trusted = policies._trusted  # pyright: ignore[reportPrivateUsage]
    assert trusted("lookup") and not trusted("files__write")
    no_policies = AgentActivities({"kit": KIT}, {})
    plain = ResolvedAgent(name="main", model="m", toolkit="kit", instructions="", settings={})
    assert no_policies._call_policies(plain, request, []) is None  # pyright: ignore[reportPrivateUsage]
