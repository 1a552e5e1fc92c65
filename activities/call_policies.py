"""Approval policies applied to a model turn's calls while they are planned.

`CallPolicies` gathers what a rule sees of each call (`PolicyInput`: the
tool, its arguments, trusted annotations, the conversation's team, agent
and caller, and the call's history in this conversation) and asks the
policies that apply to that tool (`durable_tools.policies.decide`). It runs
inside the `model.turn` activity; the verdict is recorded with the call's
plan, so the workflow, and any replay, only read it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from durable_tools.policies import Policy, PolicyInput, decide, json_arguments
from durable_tools.policy_verdict import PolicyVerdict
from durable_tools.results import ToolCall
from durable_tools.tools import Tool
from durable_tools.transcript import AssistantMessage, ToolCallOutput, TranscriptItem, UserMessage

__all__ = ["CallPolicies"]


class CallPolicies:
    """The policies of one model turn and the facts its rules see.

    Args:
        policies_for: The policies that apply to a tool, by tool name, in
            order (the agent's, the toolkit's, the tool's MCP server's).
        transcript: The conversation's transcript before this turn (read
            only when a rule uses `history` or `conversation.caller`).
        conversation: `team`, `agent`, `workflow_id` (`caller` is added
            from the transcript: who sent the latest user message).
        trusted_annotations: Whether a tool's annotations are trusted
            (default: every tool's; an MCP server's only with
            `trust_annotations`).
        candidates_for: The candidate policies of shadow mode, by tool name,
            in order (the agent's `shadow_policy` in place of its
            `policy`, then the same defaults); default none: no shadow.
        history: The counts `history.calls` and `history.ran` start from,
            when the caller counted them (a re-evaluation of waiting calls);
            default: counted from `transcript`.
    """

    def __init__(
        self,
        policies_for: Callable[[str], Sequence[Policy]],
        transcript: Sequence[TranscriptItem],
        conversation: Mapping[str, str],
        trusted_annotations: Callable[[str], bool] = lambda _: True,
        candidates_for: Callable[[str], Sequence[Policy]] | None = None,
        history: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
    ) -> None:
        self._policies_for = policies_for
        self._candidates_for = candidates_for
        self._transcript = transcript
        self._conversation = dict(conversation)
        self._trusted = trusted_annotations
        self._calls: Counter[str] | None = None
        self._ran: Counter[str] = Counter()
        if history is not None:
            self._calls, self._ran = Counter(history[0]), Counter(history[1])
            self._conversation.setdefault("caller", "")

    @property
    def shadowed(self) -> bool:
        """Whether a candidate policy is evaluated beside the active one (shadow mode)."""
        return self._candidates_for is not None

    def _history(self) -> tuple[Counter[str], Counter[str]]:
        # Counted once per turn, and only when a policy applies: a long
        # conversation's turns would otherwise all pay for a walk over it.
        if self._calls is None:
            calls: Counter[str] = Counter()
            caller = ""
            for item in self._transcript:
                if isinstance(item, AssistantMessage):
                    calls.update(call.name for call in item.tool_calls)
                elif isinstance(item, ToolCallOutput) and not item.is_error:
                    self._ran[item.tool] += 1
                elif isinstance(item, UserMessage):
                    caller = item.sent_by
            self._calls = calls
            self._conversation.setdefault("caller", caller)
        return self._calls, self._ran

    def verdict(self, call: ToolCall, tool: Tool) -> PolicyVerdict | None:
        """The verdict of the first policy that decides this call, or `None`; never raises.

        A call counts in `history.calls` of the calls planned after it in the same turn.
        """
        return self.verdicts(call, tool)[0]

    def verdicts(
        self, call: ToolCall, tool: Tool
    ) -> tuple[PolicyVerdict | None, PolicyVerdict | None]:
        """The active and the candidate policies' verdicts of this call (`None`: none decided).

        The candidate's is `None` too without shadow mode. Both see the
        same facts; never raises. A call counts in `history.calls` of the
        calls planned after it in the same turn.
        """
        policies = self._policies_for(call.name)
        candidates: Sequence[Policy] = ()
        if self._candidates_for is not None:
            candidates = self._candidates_for(call.name)
        if not policies and not candidates:
            return None, None
        calls, ran = self._history()
        annotations: dict[str, Any] = {}
        if self._trusted(call.name):
            annotations = tool.annotations.model_dump(exclude={"title"})
        facts = PolicyInput(
            tool=call.name,
            args=json_arguments(call.arguments),
            annotations=annotations,
            conversation=self._conversation,
            history={
                "calls": dict(calls),
                "ran": dict(ran),
                "tool_calls": calls[call.name],
                "tool_ran": ran[call.name],
            },
        )
        calls[call.name] += 1
        active = decide(policies, facts, tool_approvers=tool.approvers) if policies else None
        candidate = decide(candidates, facts, tool_approvers=tool.approvers) if candidates else None
        return active, candidate
