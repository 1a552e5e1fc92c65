"""`PolicyVersions` without a server: digests checked, inputs of older workers read.

Inputs recorded before workers loaded policies by version carry the whole
document (`ModelTurnRequest.policy`, `Reevaluation.policy`): they still
decode, and their document is checked against its version like any other.
A document whose digest is not the version asked for is never compiled:
the policy fails closed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from durable_tools._policy_wire import Reevaluation
from durable_tools._wire import ModelTurnRequest
from durable_tools.activities.policy_versions import PolicyVersions, UnloadedPolicy
from durable_tools.live_runs import Reads
from durable_tools.policies import Policy, PolicyInput
from durable_tools.policy_document import InstalledPolicy, PolicyDocument, PolicyRef

OPEN = Policy.from_text("""
name: open
rules:
  - {id: everything, when: 'true', outcome: run}
""")
FORGED = PolicyDocument.model_validate(
    {"name": "open", "rules": [{"id": "everything", "when": "true", "outcome": "deny"}]}
)
WHEN = datetime(2026, 11, 26, tzinfo=UTC)


@contextlib.asynccontextmanager
async def _no_slot(name: str) -> AsyncIterator[None]:
    raise AssertionError(f"no query expected ({name})")
    yield


class _Run:
    """A run in this process that answers one document for any version."""

    def __init__(self, document: PolicyDocument) -> None:
        self.document = document

    def live_policy(self, version: str) -> PolicyDocument:
        return self.document

    def live_agent_config(self, name: str) -> None:
        return None

    def live_open_call(self, call_id: str) -> None:
        return None

    def live_transcript(self, request: object) -> None:
        return None

    def live_followed(self, now: object) -> bool:
        return False


def _ref(version: str = OPEN.version) -> PolicyRef:
    return PolicyRef(name="open", version=version, installed_by="ops", installed_at=WHEN)


async def test_a_recorded_document_of_the_version_is_compiled_once() -> None:
    reads = Reads()
    versions = PolicyVersions(reads, _no_slot)
    policy = await versions.load(
        _ref(), workflow_id="w", run_id="r", live=None, recorded=OPEN.document
    )
    assert not isinstance(policy, UnloadedPolicy) and policy.version == OPEN.version
    again = await versions.load(_ref(), workflow_id="w", run_id="r", live=None)
    assert again is policy
    assert versions.loaded == {"recorded": 1, "compiled": 1}
    assert (reads.local, reads.queries) == (0, 0)


async def test_a_forged_document_is_refused_wherever_it_comes_from() -> None:
    versions = PolicyVersions(Reads(), _no_slot)
    recorded = await versions.load(_ref(), workflow_id="w", run_id="r", live=None, recorded=FORGED)
    live = await versions.load(_ref(), workflow_id="w", run_id="r", live=_Run(FORGED))
    for policy in (recorded, live):
        assert isinstance(policy, UnloadedPolicy)
        verdict = policy.decide(PolicyInput(tool="refund"), tool_approvers=["group:finance"])
        assert (verdict.policy, verdict.version, verdict.outcome) == (
            "open",
            OPEN.version,
            "approve",
        )
        assert verdict.approvers == ["group:finance"]
        assert "refused, every call needs approval" in verdict.error
        assert "digests to sha256:" in verdict.error
    assert versions.loaded == {"refused": 2}
    # Nothing forged was kept: the genuine document still loads.
    genuine = await versions.load(_ref(), workflow_id="w", run_id="r", live=_Run(OPEN.document))
    assert genuine.version == OPEN.version and not isinstance(genuine, UnloadedPolicy)


async def test_a_claimed_version_that_is_not_a_digest_fails_closed() -> None:
    versions = PolicyVersions(Reads(), _no_slot)
    policy = await versions.load(
        _ref("sha256:" + "0" * 64), workflow_id="w", run_id="r", live=_Run(OPEN.document)
    )
    assert isinstance(policy, UnloadedPolicy)
    assert policy.decide(PolicyInput(tool="x")).outcome == "approve"


def test_inputs_recorded_with_the_whole_document_still_decode() -> None:
    installed = InstalledPolicy(
        document=OPEN.document, version=OPEN.version, installed_by="ops", installed_at=WHEN
    )
    old_turn = {
        "workflow_id": "w",
        "run_id": "r",
        "turn": 2,
        "upto": 3,
        "policy": installed.model_dump(mode="json"),
    }
    request = ModelTurnRequest.model_validate_json(
        ModelTurnRequest.model_validate(old_turn).model_dump_json()
    )
    assert request.policy == installed and request.policy_ref is None
    old_reevaluation = {
        "workflow_id": "w",
        "run_id": "r",
        "agent": {"name": "refunds"},
        "toolkit": "shop",
        "policy": installed.model_dump(mode="json"),
        "calls": [],
    }
    reevaluation = Reevaluation.model_validate(old_reevaluation)
    assert reevaluation.policy == installed and reevaluation.policy_ref is None
    # What is sent now: the reference only.
    assert installed.ref() == _ref()
    assert "rules" not in ModelTurnRequest(
        workflow_id="w", run_id="r", turn=1, upto=1, policy_ref=installed.ref()
    ).model_dump_json(exclude_none=True)
