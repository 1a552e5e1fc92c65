"""Issue 23, item 1: a conversation outside your teams does not exist for you.

Two teams share one namespace and one inbox. A conversation records its team
when it starts (the `DurableToolsTeam` search attribute, `start(...,
team=...)`); the inbox lists, opens, streams and acts on it only for people
whose groups map to that team (`TeamAuthorizer`). For anyone else every route
answers exactly what a conversation that does not exist answers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from inbox_support import basic, csrf_token, listed, turns
from workflow_helpers import Harness

from durable_tools.errors import ConfigurationError
from durable_tools.teams import TEAM, check_team, team_clause
from durable_tools.worker.inbox import Identity
from durable_tools.worker.inbox.app import create_app
from durable_tools.worker.inbox.auth import Authenticators, TokenAuth
from durable_tools.worker.inbox.authz import ACTIONS, TeamAuthorizer, parse_team_map

CREDENTIALS = (
    "sam:sam-secret:support\n"  # the support team
    "fay:fay-secret:fin-approvers\n"  # finance, through --team fin-approvers=finance
    "root:root-secret:admins\n"  # sees everything
)
SAM, FAY, ROOT = (
    basic("sam", "sam-secret"),
    basic("fay", "fay-secret"),
    basic("root", "root-secret"),
)
REFUND = {"order": "o1", "amount": 5}


@asynccontextmanager
async def inbox(harness: Harness, **authorizer: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        harness.conversations,
        Authenticators([TokenAuth.parse(CREDENTIALS)], basic_realm="inbox"),
        refresh_seconds=0,
        authorizer=TeamAuthorizer(
            {"fin-approvers": "finance"}, frozenset({"admins"}), **authorizer
        ),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        yield client


async def _waiting(harness: Harness, team: str | None) -> str:
    wf = await harness.start(turns(("r1", "refund", REFUND)), team=team)
    await harness.wait_approval(wf, "r1")
    return wf


async def _ids(client: httpx.AsyncClient, who: dict[str, str]) -> set[str]:
    response = await client.get("/api/pending", headers=who)
    assert response.status_code == 200, response.text
    return {w["workflow_id"] for w in response.json()}


async def test_each_team_sees_and_acts_on_its_own_conversations_only(harness: Harness) -> None:
    support = await _waiting(harness, "support")
    finance = await _waiting(harness, "finance")
    untagged = await _waiting(harness, None)
    described = await harness.conversations.client.get_workflow_handle(support).describe()
    assert described.typed_search_attributes.get(TEAM) == "support"

    async with inbox(harness) as client:
        # Listed server-side by team: wait until visibility has all three for root.
        for wf in (support, finance, untagged):
            await listed(client, ROOT, wf)
        mine = await _ids(client, SAM)
        assert support in mine and untagged in mine and finance not in mine
        theirs = await _ids(client, FAY)
        assert finance in theirs and untagged in theirs and support not in theirs

        # Every route on the other team's conversation answers as for one that
        # does not exist: same status, same error kind, same sentence.
        nowhere = f"no-such-{uuid.uuid4().hex[:8]}"
        token = await csrf_token(client, SAM)
        for method, suffix, body in [
            ("GET", "", None),
            ("GET", "/version", None),
            ("GET", "/events", None),
            ("POST", "/calls/r1/decision", {"approved": True, "arguments_hash": "0" * 64}),
            ("POST", "/calls/r1/answer", {"value": "x", "arguments_hash": "0" * 64}),
            ("POST", "/messages", {"text": "approve it, I'm the customer"}),
            ("POST", "/resume", {"message": "go"}),
            ("POST", "/retry", None),
        ]:
            answers = []
            for wf in (finance, nowhere):
                response = await client.request(
                    method,
                    f"/api/conversations/{wf}{suffix}",
                    json=body,
                    headers={**SAM, "X-CSRF-Token": token},
                )
                text = response.text.replace(wf, "ID")
                answers.append((response.status_code, text))
            assert answers[0] == answers[1], (method, suffix, answers)
            assert answers[0][0] == 404, (method, suffix, answers)
        page = await client.get(f"/conversations/{finance}", headers=SAM)
        assert page.status_code == 404 and "refund" not in page.text
        form = await client.post(
            f"/conversations/{finance}/send",
            data={"text": "hello", "csrf_token": token},
            headers=SAM,
        )
        assert form.status_code == 404

        # Nothing reached the other team's conversation.
        pending = await harness.conversations.pending(finance)
        assert [a.call_id for a in pending.approvals] == ["r1"]
        assert harness.ledger_rows("refund") == []

        # Its own team still decides.
        fay_token = await csrf_token(client, FAY)
        digest = (await harness.wait_approval(finance, "r1")).arguments_hash
        decided = await client.post(
            f"/api/conversations/{finance}/calls/r1/decision",
            json={"approved": True, "arguments_hash": digest},
            headers={**FAY, "X-CSRF-Token": fay_token},
        )
        assert decided.status_code == 200, decided.text
        await harness.wait_outputs(finance, "r1")

    # With teams required, a conversation without one is for admins only.
    async with inbox(harness, require_team=True) as client:
        await listed(client, ROOT, untagged)
        assert untagged not in await _ids(client, SAM)
        hidden = await client.get(f"/api/conversations/{untagged}", headers=SAM)
        assert hidden.status_code == 404


def test_the_default_policy() -> None:
    policy = TeamAuthorizer({"fin-approvers": "finance"}, frozenset({"admins"}))
    sam = Identity("sam", ("support", "not a team!"), "basic")
    assert policy.teams(sam) == {"support"}
    assert policy.visibility_clause(sam) == (
        "(DurableToolsTeam IN ('support') OR DurableToolsTeam IS NULL)"
    )
    assert policy.visibility_clause(Identity("root", ("admins",), "basic")) is None
    assert policy.visibility_clause(Identity("dev")) is None  # dev mode: one local person
    for action in ACTIONS:
        assert policy.may(sam, action, "support") and policy.may(sam, action, None)
        assert not policy.may(sam, action, "finance")
        assert policy.may(Identity("fay", ("fin-approvers",), "proxy"), action, "finance")
    strict = TeamAuthorizer(require_team=True)
    assert not strict.may(sam, "view", None)
    assert strict.visibility_clause(Identity("nobody", (), "basic")) == "WorkflowId = ''"
    assert parse_team_map(["a=b", " c = d "]) == {"a": "b", "c": "d"}
    for bad in ("a", "=b", "a=b c", "a='x'"):
        with pytest.raises(ConfigurationError):
            parse_team_map([bad])


@given(st.text(max_size=80))
def test_no_team_name_can_escape_a_visibility_query(name: str) -> None:
    try:
        check_team(name)
    except ConfigurationError:
        return
    clause = team_clause([name], untagged=False)
    assert clause == f"(DurableToolsTeam IN ('{name}'))"
    assert re.fullmatch(r"[A-Za-z0-9_.@-]+", name)
