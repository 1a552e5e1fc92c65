"""The inbox installs a policy version (`set_policy`): its API and its page's form, for who may."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from agent_support import turns
from inbox_support import basic, csrf_token, inbox_client
from workflow_helpers import Harness, eventually

from durable_tools.worker.inbox.auth import Identity
from durable_tools.worker.inbox.authz import Action, TeamAuthorizer

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


@dataclass(frozen=True)
class PolicyKeepers(TeamAuthorizer):
    """Everyone who may view may act, except that only `approvers` install policies."""

    def may(self, identity: Identity, action: Action, team: str | None) -> bool:
        if action == "set_policy" and "approvers" not in identity.groups:
            return False
        return super().may(identity, action, team)


async def test_the_page_offers_the_policy_form_only_to_who_may_install_one(
    harness: Harness,
) -> None:
    script = turns([("r1", "refund", {"order": "o1", "amount": 5})])
    wf = await harness.start(script)  # no team: ana and bob both see it
    await harness.wait_approval(wf, "r1")
    async with inbox_client(harness, authorizer=PolicyKeepers()) as client:
        page = f"/conversations/{wf}"
        bobs = await client.get(page, headers=BOB)
        assert bobs.status_code == 200 and "r1" in bobs.text
        assert "Install the policy" not in bobs.text and f"{page}/policy" not in bobs.text
        token = await csrf_token(client, BOB)
        form = {"policy": RELEASE, "reason": "mine", "csrf_token": token}
        refused = await client.post(f"{page}/policy", data=form, headers=BOB)
        assert refused.status_code == 404  # as for a conversation that does not exist

        anas = await client.get(page, headers=ANA)
        assert anas.status_code == 200
        assert "Install the policy" in anas.text and f'action="{page}/policy"' in anas.text
        token = await csrf_token(client, ANA)
        for bad, says in (("", "Write a policy first"), ("name: x\nrules: 7", "invalid policy")):
            form = {"policy": bad, "csrf_token": token}
            answer = await client.post(f"{page}/policy", data=form, headers=ANA)
            assert answer.status_code == 422 and says in answer.text, answer.text
            assert 'data-conflict="invalid_policy"' in answer.text
        form = {"policy": RELEASE, "reason": "hotfix", "csrf_token": token}
        done = await client.post(f"{page}/policy", data=form, headers=ANA)
        assert done.status_code == 303, done.text
        after = await client.get(done.headers["location"], headers=ANA)
        assert "Policy sha256:" in after.text and "installed." in after.text
        notice = parse_qs(urlsplit(done.headers["location"]).query)["notice"][0]
        version = notice.split()[1]  # "Policy sha256:... installed."

        async def shown() -> bool:  # the meta line names the version installed, and who did
            page_now = await client.get(page, headers=ANA)
            return f"{version} (installed by ana at " in page_now.text

        await eventually(shown, what="the installed version on the page")
        status = await harness.conversations.status(wf)
        assert status.policy is not None
        assert (status.policy.version, status.policy.installed_by) == (version, "ana")

    outputs = await harness.wait_outputs(wf, "r1")
    assert not outputs["r1"].is_error
    events, _ = await harness.conversations.retained_events(wf)
    [installed] = [e for e in events if e.kind == "policy_installed"]
    assert installed.sent_by == "ana"  # bob's form installed nothing
    assert installed.reason is not None and installed.reason.endswith("; hotfix")
