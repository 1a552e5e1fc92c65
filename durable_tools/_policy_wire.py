"""Private wire types of a live policy change's re-evaluation (`policy.reevaluate-v1`).

When a `set_policy` signal installs a policy version while calls wait for
approval, the workflow asks the worker (this activity) what the new version
makes of each waiting call; the answer is recorded in history, and the
workflow applies it: release, new approvers and quorum, or denial
(docs/policies.md, "Live change").
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, Field

from durable_tools.conversation import AgentConfig
from durable_tools.policy_document import InstalledPolicy, PolicyRef
from durable_tools.policy_verdict import PolicyOutcome, PolicyVerdict
from durable_tools.results import ToolCall

__all__ = ["REEVALUATE_ACTIVITY", "Reevaluated", "Reevaluation", "ReevaluationResult"]

REEVALUATE_ACTIVITY: Final[str] = "policy.reevaluate-v1"
"""Activity type of the re-evaluation of waiting calls under a new policy version."""


class Reevaluation(BaseModel):
    """What the worker needs to decide the waiting calls again.

    One of `policy_ref` (sent now) and `policy` (older inputs) is set.

    Attributes:
        workflow_id: The conversation.
        run_id: The run.
        agent: The current agent's configuration (resolved on the worker).
        toolkit: The toolkit the calls' turn ran in.
        team: The conversation's team (`conversation.team`), `None`: none.
        caller: Who sent the latest user message (`conversation.caller`).
        policy: The version just installed, whole, as inputs recorded before
            workers loaded policies by version sent it (decoded, never sent
            now; `policy_ref` instead).
        policy_ref: The version just installed (the worker loads its
            document by version, `activities/policy_versions.py`).
        calls: The waiting calls, in the turn's order.
        earlier: Tool name → calls the model made before the calls' turn
            (`history.calls` starts from it).
        ran: Tool name → those answered `Ok` (`history.ran`).
        turn: The names of every call of the calls' turn, in order.
        positions: Each waiting call's index in `turn` (the calls before it
            count in its `history.calls`, as when it was planned).
        upto: How many transcript items, conversation-wide, up to and
            including the calls' turn: the transcript a tool's own
            `needs_approval` and the rules saw when the calls were planned,
            read again by the worker. 0: none (inputs recorded before it was
            sent: `needs_approval` saw an empty transcript).
    """

    workflow_id: str
    run_id: str
    agent: AgentConfig
    toolkit: str
    team: str | None = None
    caller: str = ""
    policy: InstalledPolicy | None = None
    policy_ref: PolicyRef | None = None
    calls: list[ToolCall]
    earlier: dict[str, int] = Field(default_factory=dict[str, int])
    ran: dict[str, int] = Field(default_factory=dict[str, int])
    turn: list[str] = Field(default_factory=list[str])
    positions: list[int] = Field(default_factory=list[int])
    upto: int = Field(default=0, ge=0)


class Reevaluated(BaseModel):
    """What the new version makes of one waiting call.

    Attributes:
        call_id: The call.
        outcome: `run` (release it), `approve` (wait on, for `approvers`
            and `quorum`) or `deny`.
        approvers: Who may approve (`approve`); empty: anyone who may decide.
        quorum: Distinct approvers needed (`approve`).
        policy: The verdict (`None`: no policy decided; the tool's own
            `needs_approval` did).
        reason: For `deny`, what the model reads.
    """

    call_id: str
    outcome: PolicyOutcome
    approvers: list[str] = Field(default_factory=list[str])
    quorum: int = 1
    policy: PolicyVerdict | None = None
    reason: str = ""


class ReevaluationResult(BaseModel):
    """The activity's result: one `Reevaluated` per waiting call, in order."""

    calls: list[Reevaluated] = Field(default_factory=list[Reevaluated])
