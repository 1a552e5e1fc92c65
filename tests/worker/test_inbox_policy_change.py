"""The inbox API installs a policy version (`set_policy`) for the conversation's team only."""

from __future__ import annotations

from agent_support import turns
from inbox_support import basic, csrf_token, inbox_client
from workflow_helpers import Harness

ANA = basic("ana", "ana-secret")  # group approvers: the conversation's team
BOB = basic("bob", "bob-secret")  # no team
RELEASE = """
name: release
rules:
  - {id: all, when: 'tool == "refund"', outcome: run}
"""


async def test_the_team_installs_a_policy_that_releases_a_waiting_call(harness: Harness) -> None:
    script = turns([("r1", "refund", {"order": "o1", "amount": 5})])
    wf = await harness.start(script, team="approvers")
    await harness.wait_approval(wf, "r1")  # the tool's own needs_approval
    async with inbox_client(harness) as client:
        url = f"/api/conversations/{wf}/policy"
        token = await csrf_token(client, BOB)
        refused = await client.post(
            url, json={"policy": RELEASE}, headers={**BOB, "X-CSRF-Token": token}
        )
        assert refused.status_code == 404  # not bob's team: it does not exist for him
        headers = {**ANA, "X-CSRF-Token": await csrf_token(client, ANA)}
        for bad in ("name: x\nrules: [{id: a, when: 'true', outcome: maybe}]", "[" * 5000, "7"):
            answer = await client.post(url, json={"policy": bad}, headers=headers)
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"] == "invalid_policy"
        ok = await client.post(url, json={"policy": RELEASE, "reason": "hotfix"}, headers=headers)
        assert ok.status_code == 200, ok.text
        assert ok.json()["note"].startswith("sha256:")

    outputs = await harness.wait_outputs(wf, "r1")
    assert not outputs["r1"].is_error
    events, _ = await harness.conversations.retained_events(wf)
    [installed] = [e for e in events if e.kind == "policy_installed"]
    assert installed.sent_by == "ana"
    assert installed.reason is not None and installed.reason.endswith("; hotfix")
    [decided] = [e for e in events if e.kind == "approval_decided"]
    assert decided.decided_by is not None and "installed by ana" in decided.decided_by
